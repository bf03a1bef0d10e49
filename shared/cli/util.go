package cli

import (
	"fmt"
	"github.com/sluice-dev/sluice/shared/bytesize"
	"runtime/debug"
	"sort"
	"time"

	"github.com/oklog/ulid/v2"
)

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			return v
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "devel-" + s.Value[:12]
			}
		}
	}
	return "devel"
}

// humanBytes renders a byte count in IEC units.
func humanBytes(n int64) string { return bytesize.IEC(n) }

// humanDuration renders d briefly: 850ms, 12s, 4m10s, 3h05m, 2d4h.
func humanDuration(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.0fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// msTime renders a Unix-millisecond timestamp in UTC.
func msTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04")
}

func parseULID(s string) (ulid.ULID, error) { return ulid.ParseStrict(s) }

// HumanBytes renders a byte count in IEC units (12.3 MiB).
func HumanBytes(n int64) string { return humanBytes(n) }

// HumanCount renders a count briefly (1.2M).
func HumanCount(n uint64) string { return humanCount(n) }

// HumanDuration renders a duration briefly (4m10s).
func HumanDuration(d time.Duration) string { return humanDuration(d) }

// MsTime renders a Unix-millisecond time in UTC (2006-01-02 15:04).
func MsTime(ms int64) string { return msTime(ms) }

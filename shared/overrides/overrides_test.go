package overrides

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/planning"
)

const good = `
overrides:
  acme:
    retention: 90d
    retention_5m: 1y
    max_series_per_partition: 500000
    downsample: true
    downsample_raw_span: 2d
  legacy:
    compaction_disabled: true
    downsample: false
`

func TestParse(t *testing.T) {
	o, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	day := 24 * time.Hour
	base := config.Retention{Raw: 30 * day, OneHour: 3 * 365 * day}
	if got := o.Retention("acme", base); got != (config.Retention{Raw: 90 * day, FiveMinutes: 365 * day, OneHour: 3 * 365 * day}) {
		t.Errorf("acme's retention = %+v", got)
	}
	if got := o.Retention("other", base); got != base {
		t.Errorf("a tenant without overrides gets %+v, want the deployment's %+v", got, base)
	}
	if !o.CompactionDisabled("legacy") || o.CompactionDisabled("acme") {
		t.Error("compaction_disabled is not per tenant")
	}
	if p := o.Policy("acme", planning.Policy{MaxSeriesPerPartition: 7}); p.MaxSeriesPerPartition != 500000 {
		t.Errorf("acme's partition limit = %d", p.MaxSeriesPerPartition)
	}
	if p := o.Policy("legacy", planning.Policy{MaxSeriesPerPartition: 7}); p.MaxSeriesPerPartition != 7 {
		t.Errorf("legacy's partition limit = %d, want the deployment's", p.MaxSeriesPerPartition)
	}
	deployment := planning.Policy{Downsample: true, DownsampleRawSpan: 40 * time.Hour, DownsampleFiveMinuteSpan: 10 * day}
	if p := o.Policy("acme", planning.Policy{}); !p.Downsample || p.DownsampleRawSpan != 2*day || p.DownsampleFiveMinuteSpan != 0 {
		t.Errorf("acme's downsampling = %v, raw span %v, 5m span %v; want on, 2d, the deployment's", p.Downsample, p.DownsampleRawSpan, p.DownsampleFiveMinuteSpan)
	}
	if p := o.Policy("legacy", deployment); p.Downsample || p.DownsampleRawSpan != 40*time.Hour {
		t.Errorf("legacy's downsampling = %v, raw span %v; want off, the deployment's span", p.Downsample, p.DownsampleRawSpan)
	}
	if p := o.Policy("other", deployment); !p.Downsample {
		t.Error("a tenant without overrides does not downsample as the deployment does")
	}
	if !o.AnyRetention() || strings.Join(o.Describe("acme"), ", ") != "downsample true, downsample_raw_span 2d, max_series_per_partition 500000, retention 90d, retention_5m 1y" {
		t.Errorf("describe acme = %v", o.Describe("acme"))
	}
	if empty, err := Parse(nil); err != nil || len(empty.Tenants) != 0 {
		t.Errorf("an empty object = %+v, %v; want no overrides", empty, err)
	}
}

func TestParseNamesTheBadLine(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown field", "overrides:\n  acme:\n    retension: 90d\n", "line 3"},
		{"bad duration", "overrides:\n  acme:\n    retention: 90d\n    retention_1h: forever\n", "line 4"},
		{"bad tenant", "overrides:\n  acme:\n    retention: 9d\n  \"a/b\":\n    retention: 9d\n", "line 4"},
		{"not yaml", "overrides: [", "yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), File) {
				t.Fatalf("Parse = %v, want an error naming %s and %q", err, File, tc.want)
			}
		})
	}
}

// A cache reads again after its TTL, and a bad object keeps the last good
// overrides in force.
func TestCacheKeepsTheLastGood(t *testing.T) {
	c := &Cache{TTL: time.Minute}
	now := time.Unix(1000, 0)
	body, reads := good, 0
	load := func(context.Context) ([]byte, bool, error) { reads++; return []byte(body), true, nil }
	ctx := context.Background()
	if o, err := c.Get(ctx, now, load); err != nil || !o.CompactionDisabled("legacy") {
		t.Fatalf("first read = %+v, %v", o, err)
	}
	body = "overrides:\n  legacy:\n    compaction_disabld: false\n"
	if _, err := c.Get(ctx, now.Add(30*time.Second), load); err != nil || reads != 1 {
		t.Fatalf("read again within the TTL (%d reads, %v)", reads, err)
	}
	o, err := c.Get(ctx, now.Add(2*time.Minute), load)
	if err == nil || !strings.Contains(err.Error(), "line 3") || !o.CompactionDisabled("legacy") {
		t.Fatalf("bad object: %+v, %v; want the last good kept and the error naming line 3", o, err)
	}
	none := func(context.Context) ([]byte, bool, error) { return nil, false, nil }
	if o, err := c.Get(ctx, now.Add(4*time.Minute), none); err != nil || len(o.Tenants) != 0 {
		t.Fatalf("a removed object = %+v, %v; want no overrides", o, err)
	}
	failing := func(context.Context) ([]byte, bool, error) { return nil, false, errors.New("throttled") }
	if _, err := c.Get(ctx, now.Add(6*time.Minute), failing); err == nil {
		t.Fatal("a failed read is not reported")
	}
}

func TestKey(t *testing.T) {
	if k := Key(blockkey.Layout{}); k != File {
		t.Errorf("root key = %q", k)
	}
	if k := Key(blockkey.Layout{Prefix: "/blocks/"}); k != "blocks/"+File {
		t.Errorf("prefixed key = %q", k)
	}
}

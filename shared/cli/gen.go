package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockkey"
)

func init() {
	register(&command{
		name:    "gen",
		summary: "write synthetic 2h blocks to try Sluice with",
		usage:   "DIR [--blocks N] [--series N] [--rf N] [--start TIME] [--tenant T] ...",
		help: `Writes consecutive 2h Prometheus TSDB blocks into DIR/<ULID>/ with realistic
series (http_requests_total by method, code and handler; node, process and
go metrics; optionally native histograms). With --rf N every block range gets
N copies with distinct ULIDs and identical samples, as replicated Cortex or
Mimir ingesters ship them; Sluice merges the copies. --label k=v (repeated)
sets the blocks' external labels (thanos.labels), as a Prometheus server's
sidecar writes them; with --replica-label L the copies are told apart by
L="0", L="1", ..., as replicated Prometheus servers are.

The output is a pure function of the flags: the same flags write the same
ULIDs and bytes. --tenant only seeds the data (two tenants get different
blocks); the tenant a block belongs to is chosen at upload.

Example:
  sluice gen /tmp/blocks --blocks 12 --rf 2 --tenant team-a
  sluice upload --tenant team-a /tmp/blocks/*
  sluice gen /tmp/east --label cluster=east --rf 2 --replica-label replica`,
		setup: func(fs *flag.FlagSet) runFunc {
			blocks := fs.Int("blocks", 12, "number of consecutive 2h ranges")
			series := fs.Int("series", blockgen.DefaultSeries, "series per block")
			samples := fs.Int("samples", blockgen.DefaultSamplesPerSeries, "samples per series and block")
			rf := fs.Int("rf", 1, "replication factor: copies of every range")
			start := fs.String("start", blockgen.DefaultStart.Format(time.RFC3339), "start of the first block (RFC 3339 or YYYY-MM-DD, UTC)")
			tenant := fs.String("tenant", "", "seeds the data")
			seed := fs.Int64("seed", 0, "seeds the data")
			hist := fs.Bool("histograms", false, "make some series native histograms")
			thanos := fs.Bool("thanos-files", true, "list files with sizes in meta.json, as the Thanos shipper does")
			var labels externalLabels
			fs.Var(&labels, "label", "an external label `name=value` of every block (repeat for more)")
			replicaLabel := fs.String("replica-label", "", "tell the --rf copies apart by this external label (\"0\", \"1\", ...)")
			return func(ctx context.Context, e *Env, args []string) error {
				if len(args) != 1 {
					return usagef("want exactly one DIR, got %d arguments", len(args))
				}
				if *tenant != "" {
					if err := blockkey.ValidateTenant(*tenant); err != nil {
						return usagef("tenant %q: %v", *tenant, err)
					}
				}
				t, err := parseStart(*start)
				if err != nil {
					return usagef("--start %q: %v", *start, err)
				}
				if *blocks < 1 || *series < 1 || *samples < 1 || *rf < 1 {
					return usagef("--blocks, --series, --samples and --rf must be at least 1")
				}
				if st, err := os.Stat(args[0]); err == nil && !st.IsDir() {
					return refusef("%s exists and is not a directory", args[0])
				}
				began := time.Now()
				out, err := blockgen.Generate(args[0], blockgen.Options{
					Tenant: *tenant, Start: t, Blocks: *blocks, Series: *series, SamplesPerSeries: *samples,
					ReplicationFactor: *rf, Histograms: *hist, Seed: *seed, ThanosFiles: *thanos,
					ExternalLabels: labels.m, ReplicaLabel: *replicaLabel,
				})
				if err != nil {
					return err
				}
				var dirs []string
				var samplesTotal uint64
				for _, b := range out {
					dirs = append(dirs, b.Dir)
					samplesTotal += b.Meta.Stats.NumSamples
				}
				first, last := out[0].Meta, out[len(out)-1].Meta
				fmt.Fprintf(e.Stdout, "wrote %d block(s) to %s in %s: %d range(s) × %d replica(s), %d series, %s samples, %s → %s\n",
					len(out), args[0], time.Since(began).Round(time.Millisecond), *blocks, *rf, *series, humanCount(samplesTotal),
					msTime(first.MinTime), msTime(last.MaxTime))
				for _, d := range dirs {
					fmt.Fprintf(e.Stdout, "  %s\n", d)
				}
				fmt.Fprintf(e.Stdout, "next: sluice upload --tenant %s %s\n", nonEmpty(*tenant, "TENANT"), strings.TrimRight(args[0], "/")+"/*")
				return nil
			}
		},
	})
}

// externalLabels is the repeated --label flag.
type externalLabels struct{ m map[string]string }

func (l *externalLabels) String() string {
	var kv []string
	for k, v := range l.m {
		kv = append(kv, k+"="+v)
	}
	return strings.Join(kv, ",")
}

func (l *externalLabels) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" || v == "" {
		return fmt.Errorf("want name=value, got %q", s)
	}
	if !model.LegacyValidation.IsValidLabelName(k) {
		return fmt.Errorf("%q is not a label name", k)
	}
	if l.m == nil {
		l.m = map[string]string{}
	}
	if _, dup := l.m[k]; dup {
		return fmt.Errorf("label %s given twice", k)
	}
	l.m[k] = v
	return nil
}

func parseStart(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("want RFC 3339 (2024-01-01T00:00:00Z) or YYYY-MM-DD")
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

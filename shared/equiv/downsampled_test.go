package equiv

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/downsample"
	"github.com/sluice-dev/sluice/shared/downsample/downsampletest"
)

// CheckDownsampled passes a block downsampled from the raw block it is
// given (native histograms among its series), and fails it against raw
// samples with one float value changed, against raw samples with one
// histogram changed, and when it is given twice.
func TestCheckDownsampled(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	write := func(changed, histogramChanged bool) string {
		series := downsampletest.Make(downsampletest.Options{Start: start, Span: 8 * time.Hour, Counters: 12, Seed: 1, Histograms: true})
		if changed {
			series[0].Vs[len(series[0].Vs)/2] += 0.5
		}
		if histogramChanged {
			for _, s := range series {
				if i := len(s.FH) / 2; i > 0 && s.FH[i] != nil {
					s.FH[i] = s.FH[i].Copy().Mul(2)
					break
				}
			}
		}
		dir, _, err := downsampletest.Write(ctx, t.TempDir(), series, false)
		if err != nil {
			t.Fatal(err)
		}
		return dir
	}
	raw, other, otherHistogram := write(false, false), write(true, false), write(false, true)
	b, err := tsdb.OpenBlock(nil, raw, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := blockmeta.ReadDir(raw)
	if err != nil {
		t.Fatal(err)
	}
	res, err := downsample.Block(ctx, slog.New(slog.DiscardHandler), b, m, t.TempDir(), ulid.MustNew(1, nil), 5*60*1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckDownsampled(ctx, []string{raw}, []string{res.Dir}, nil); err != nil {
		t.Fatalf("the block's own downsample: %v", err)
	}
	for _, tc := range []struct {
		name      string
		raw, down []string
		want      string
	}{
		{"other raw samples", []string{other}, []string{res.Dir}, "the raw samples give"},
		{"another histogram", []string{otherHistogram}, []string{res.Dir}, "the raw histograms give"},
		{"given twice", []string{raw}, []string{res.Dir, res.Dir}, "in two downsampled blocks"},
	} {
		err := CheckDownsampled(ctx, tc.raw, tc.down, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

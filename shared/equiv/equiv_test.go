package equiv

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/sluice-dev/sluice/shared/blockmeta"
)

type smpl struct {
	t int64
	f float64
	h *histogram.Histogram
}

func (s smpl) T() int64                      { return s.t }
func (s smpl) ST() int64                     { return 0 }
func (s smpl) F() float64                    { return s.f }
func (s smpl) H() *histogram.Histogram       { return s.h }
func (s smpl) FH() *histogram.FloatHistogram { return nil }
func (s smpl) Copy() chunks.Sample           { return s }
func (s smpl) Type() chunkenc.ValueType {
	if s.h != nil {
		return chunkenc.ValHistogram
	}
	return chunkenc.ValFloat
}

// series is "name" → samples; name becomes __name__.
type series map[string][]smpl

func floats(ts ...int64) []smpl {
	var out []smpl
	for _, t := range ts {
		out = append(out, smpl{t: t, f: float64(t) / 10})
	}
	return out
}

func hist(t int64, count uint64) smpl {
	return smpl{t: t, h: &histogram.Histogram{
		Count: count, ZeroCount: 0, Sum: float64(count),
		PositiveSpans:   []histogram.Span{{Offset: 0, Length: 2}},
		PositiveBuckets: []int64{int64(count), -int64(count)}, // second bucket empty
	}}
}

func block(t *testing.T, s series) string {
	t.Helper()
	var list []storage.Series
	for name, samples := range s {
		cs := make([]chunks.Sample, len(samples))
		for i := range samples {
			cs[i] = samples[i]
		}
		list = append(list, storage.NewListSeries(labels.FromStrings("__name__", name, "job", "j"), cs))
	}
	dir, err := tsdb.CreateBlock(list, t.TempDir(), 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name                                       string
		inputs, outputs                            []series
		missing, extra, dup, inSamples, outSamples uint64
		example                                    string
	}{
		{
			name:      "identical",
			inputs:    []series{{"a": floats(1, 2, 3), "b": floats(1)}},
			outputs:   []series{{"a": floats(1, 2, 3), "b": floats(1)}},
			inSamples: 4, outSamples: 4,
		},
		{
			name:      "replicated inputs dedupe, split outputs union",
			inputs:    []series{{"a": floats(1, 2), "b": floats(5)}, {"a": floats(1, 2), "b": floats(5)}, {"a": floats(2, 3)}},
			outputs:   []series{{"a": floats(1, 2, 3)}, {"b": floats(5)}},
			inSamples: 4, outSamples: 4,
		},
		{
			name:    "missing sample",
			inputs:  []series{{"a": floats(1, 2, 3)}},
			outputs: []series{{"a": floats(1, 3)}},
			missing: 1, inSamples: 3, outSamples: 2, example: "missing {__name__=\"a\", job=\"j\"} t=2",
		},
		{
			name:    "missing series",
			inputs:  []series{{"a": floats(1), "b": floats(1, 2)}},
			outputs: []series{{"a": floats(1)}},
			missing: 2, inSamples: 3, outSamples: 1, example: "missing series {__name__=\"b\"",
		},
		{
			name:    "extra sample and series",
			inputs:  []series{{"a": floats(1)}},
			outputs: []series{{"a": floats(1, 2), "z": floats(7)}},
			extra:   2, inSamples: 1, outSamples: 3, example: "extra series",
		},
		{
			name:    "changed value is missing plus extra",
			inputs:  []series{{"a": {{t: 1, f: 1}}}},
			outputs: []series{{"a": {{t: 1, f: 2}}}},
			missing: 1, extra: 1, inSamples: 1, outSamples: 1,
		},
		{
			name:    "series in two outputs is duplicated",
			inputs:  []series{{"a": floats(1, 2)}},
			outputs: []series{{"a": floats(1, 2)}, {"a": floats(2)}},
			dup:     1, inSamples: 2, outSamples: 3, example: "duplicated",
		},
		{
			name:      "histograms equal",
			inputs:    []series{{"h": {hist(1, 3), hist(2, 5)}}, {"h": {hist(2, 5)}}},
			outputs:   []series{{"h": {hist(1, 3), hist(2, 5)}}},
			inSamples: 2, outSamples: 2,
		},
		{
			name:    "histogram changed",
			inputs:  []series{{"h": {hist(1, 3)}}},
			outputs: []series{{"h": {hist(1, 4)}}},
			missing: 1, extra: 1, inSamples: 1, outSamples: 1, example: "histogram",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in, out []string
			for _, s := range tc.inputs {
				in = append(in, block(t, s))
			}
			for _, s := range tc.outputs {
				out = append(out, block(t, s))
			}
			rep, err := Check(context.Background(), in, out, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Missing != tc.missing || rep.Extra != tc.extra || rep.DuplicatedInOutputs != tc.dup ||
				rep.InputSamples != tc.inSamples || rep.OutputSamples != tc.outSamples {
				t.Fatalf("report: %s", rep)
			}
			if rep.OK() != (tc.missing+tc.extra+tc.dup == 0) {
				t.Fatalf("OK() = %v for %s", rep.OK(), rep)
			}
			if tc.example != "" && !strings.Contains(strings.Join(rep.Examples, "\n"), tc.example) {
				t.Fatalf("examples %q lack %q", rep.Examples, tc.example)
			}
		})
	}
}

func TestHistogramKeyIgnoresLayoutAndHint(t *testing.T) {
	a := &histogram.FloatHistogram{Count: 3, Sum: 1, PositiveSpans: []histogram.Span{{Offset: 0, Length: 1}}, PositiveBuckets: []float64{3}}
	b := &histogram.FloatHistogram{Count: 3, Sum: 1, PositiveSpans: []histogram.Span{{Offset: 0, Length: 3}}, PositiveBuckets: []float64{3, 0, 0},
		CounterResetHint: histogram.NotCounterReset}
	if histogramKey(a, false) != histogramKey(b, false) {
		t.Fatal("empty buckets or hints changed the key")
	}
	c := b.Copy()
	c.PositiveBuckets[2] = 1
	if histogramKey(a, false) == histogramKey(c, false) {
		t.Fatal("different buckets, same key")
	}
	if histogramKey(a, false) == histogramKey(a, true) {
		t.Fatal("gauge and counter histograms must differ")
	}
}

func TestCheckBadBlock(t *testing.T) {
	if _, err := Check(context.Background(), []string{t.TempDir()}, nil, nil); err == nil || !strings.Contains(err.Error(), "inputs") {
		t.Fatalf("err = %v", err)
	}
}

// labelled gives a block the external labels a Prometheus server with
// external_labels (or a Thanos sidecar) writes into its meta.json.
func labelled(t *testing.T, dir string, lbls map[string]string) string {
	t.Helper()
	m, err := blockmeta.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Thanos = &blockmeta.Thanos{Labels: lbls, Source: "sidecar"}
	if err := m.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCheckByStream: samples of two Prometheus servers with the same
// series names are told apart by their external labels. The measured
// failure (issue: two clusters merged under one's labels) must fail the
// check; replicas that differ only in a replica label are one stream.
func TestCheckByStream(t *testing.T) {
	east := map[string]string{"cluster": "east"}
	west := map[string]string{"cluster": "west"}
	replica := func(l map[string]string, r string) map[string]string {
		out := map[string]string{"replica": r}
		for k, v := range l {
			out[k] = v
		}
		return out
	}
	eastData := series{"up": floats(1, 2, 3)}
	westData := series{"up": {{t: 1, f: 9}, {t: 2, f: 9}, {t: 3, f: 9}}}
	for _, tc := range []struct {
		name     string
		inputs   func(t *testing.T) []string
		outputs  func(t *testing.T) []string
		replicas []string
		ok       bool
		example  string
	}{
		{
			name: "two clusters kept apart",
			inputs: func(t *testing.T) []string {
				return []string{labelled(t, block(t, eastData), east), labelled(t, block(t, westData), west)}
			},
			outputs: func(t *testing.T) []string {
				return []string{labelled(t, block(t, eastData), east), labelled(t, block(t, westData), west)}
			},
			ok: true,
		},
		{
			name: "west merged into east's output",
			inputs: func(t *testing.T) []string {
				return []string{labelled(t, block(t, eastData), east), labelled(t, block(t, westData), west)}
			},
			// Same timestamps: the merge kept one value per sample, under
			// east's labels; west's samples are gone.
			outputs: func(t *testing.T) []string { return []string{labelled(t, block(t, eastData), east)} },
			example: `missing series {__name__="up", job="j"}`,
		},
		{
			name: "replicas deduplicated under the stream's labels",
			inputs: func(t *testing.T) []string {
				return []string{labelled(t, block(t, eastData), replica(east, "a")), labelled(t, block(t, eastData), replica(east, "b"))}
			},
			outputs:  func(t *testing.T) []string { return []string{labelled(t, block(t, eastData), east)} },
			replicas: []string{"replica"},
			ok:       true,
		},
		{
			name: "without the replica label configured, replicas are two streams",
			inputs: func(t *testing.T) []string {
				return []string{labelled(t, block(t, eastData), replica(east, "a")), labelled(t, block(t, eastData), replica(east, "b"))}
			},
			outputs: func(t *testing.T) []string { return []string{labelled(t, block(t, eastData), east)} },
			example: "missing series",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Check(context.Background(), tc.inputs(t), tc.outputs(t), tc.replicas)
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() != tc.ok {
				t.Fatalf("OK() = %v, want %v: %s", rep.OK(), tc.ok, rep)
			}
			if tc.example != "" && !strings.Contains(strings.Join(rep.Examples, "\n"), tc.example) {
				t.Fatalf("examples %q lack %q", rep.Examples, tc.example)
			}
		})
	}
}

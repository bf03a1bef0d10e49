package blockgen

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/sluice-dev/sluice/shared/blockmeta"
)

func TestGenerateReadableAndDeterministic(t *testing.T) {
	opts := Options{Tenant: "t1", Blocks: 2, Series: 300, ReplicationFactor: 2, Histograms: true, Seed: 7, ThanosFiles: true, ExternalLabels: map[string]string{"__org_id__": "t1"}}
	a, err := Generate(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 4 {
		t.Fatalf("got %d blocks, want 4", len(a))
	}
	ids := map[string]bool{}
	for i := range a {
		if a[i].Meta.ULID != b[i].Meta.ULID {
			t.Fatal("ULIDs not deterministic")
		}
		ids[a[i].Meta.ULID.String()] = true
		for _, f := range []string{"index", "chunks/000001", "meta.json"} {
			x, _ := os.ReadFile(filepath.Join(a[i].Dir, f))
			y, _ := os.ReadFile(filepath.Join(b[i].Dir, f))
			if len(x) == 0 || !bytes.Equal(x, y) {
				t.Fatalf("%s differs between runs", f)
			}
		}
		m := a[i].Meta
		if m.Stats.NumSeries != 300 || m.Stats.NumSamples != 300*120 || m.Stats.NumHistogramSamples == 0 {
			t.Fatalf("stats = %+v", m.Stats)
		}
		if m.MaxTime-m.MinTime != (2*time.Hour).Milliseconds() || len(m.Thanos.Files) != 3 || m.Thanos.Files[1].SizeBytes == 0 {
			t.Fatalf("meta = %+v %+v", m, m.Thanos)
		}
		if _, err := blockmeta.ReadDir(a[i].Dir); err != nil {
			t.Fatal(err)
		}
	}
	if len(ids) != 4 {
		t.Fatal("replicas must have distinct ULIDs")
	}
	// Replicas hold identical samples: their index and chunks are the same bytes.
	x, _ := os.ReadFile(filepath.Join(a[0].Dir, "chunks/000001"))
	y, _ := os.ReadFile(filepath.Join(a[1].Dir, "chunks/000001"))
	if !bytes.Equal(x, y) {
		t.Fatal("replicas differ")
	}

	// Prometheus opens the block and reads every sample.
	blk, err := tsdb.OpenBlock(nil, a[0].Dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer blk.Close()
	q, err := tsdb.NewBlockQuerier(blk, blk.MinTime(), blk.MaxTime())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ss := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
	var nSeries, nFloat, nHist int
	var it chunkenc.Iterator
	for ss.Next() {
		nSeries++
		s := ss.At()
		if s.Labels().Get("job") == "" || s.Labels().Get("instance") == "" {
			t.Fatalf("unrealistic labels %s", s.Labels())
		}
		it = s.Iterator(it)
		var last int64 = -1
		var lastV float64
		counter := len(s.Labels().Get("__name__")) > 6 && s.Labels().Get("__name__")[len(s.Labels().Get("__name__"))-6:] == "_total"
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			switch vt {
			case chunkenc.ValFloat:
				ts, v := it.At()
				if counter && last >= 0 && v < lastV {
					t.Fatalf("counter %s decreased", s.Labels())
				}
				last, lastV = ts, v
				nFloat++
			case chunkenc.ValHistogram:
				nHist++
			}
		}
		if it.Err() != nil {
			t.Fatal(it.Err())
		}
	}
	if ss.Err() != nil {
		t.Fatal(ss.Err())
	}
	if nSeries != 300 || nFloat+nHist != 300*120 || nHist == 0 {
		t.Fatalf("read %d series, %d float, %d histogram samples", nSeries, nFloat, nHist)
	}
}

func TestGeneratePlainPrometheusMeta(t *testing.T) {
	blocks, err := Generate(t.TempDir(), Options{Series: 5, SamplesPerSeries: 10})
	if err != nil {
		t.Fatal(err)
	}
	if blocks[0].Meta.Thanos != nil {
		t.Fatal("no Thanos section was asked for")
	}
	if blocks[0].Meta.MinTime != DefaultStart.UnixMilli() {
		t.Fatal("default start")
	}
}

func TestGenerateFast(t *testing.T) {
	// The demo's size: 2 tenants × 12 blocks × 500 series must take seconds.
	start := time.Now()
	for _, tenant := range []string{"a", "b"} {
		if _, err := Generate(t.TempDir(), Options{Tenant: tenant, Blocks: 12, Series: 500, Histograms: true}); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("took %s", d)
	}
	t.Logf("2 tenants × 12 blocks × 500 series: %s", time.Since(start))
}

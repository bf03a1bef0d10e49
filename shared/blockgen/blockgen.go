// Package blockgen writes synthetic Prometheus TSDB blocks for tests, the
// demo and benchmarks: realistic label sets (job, instance, method, code,
// ...), counters, gauges and native histograms, consecutive 2h blocks, and
// replicated copies of each block like the ones RF=3 Cortex/Mimir ingesters
// ship. Blocks are written with the Prometheus tsdb index and chunk writers,
// so every reader (Prometheus, Thanos, Cortex, promtool) opens them.
//
// Output is a pure function of Options: the same Options give the same
// ULIDs and byte-identical files.
package blockgen

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/index"

	"github.com/sluice-dev/sluice/shared/blockmeta"
)

// Defaults for zero Options fields.
const (
	DefaultBlockRange       = 2 * time.Hour
	DefaultSeries           = 100
	DefaultSamplesPerSeries = 120
	// samplesPerChunk is where a chunk is cut, as Prometheus' head does.
	samplesPerChunk = 120
)

// DefaultStart is used when Options.Start is zero: 2024-01-01T00:00:00Z.
var DefaultStart = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// Options describe the blocks to write. The zero value of every field means
// the documented default.
type Options struct {
	// Tenant seeds the ULIDs and the samples, so two tenants get different
	// blocks. It is not written into the series.
	Tenant string
	// Start of the first block, truncated to a multiple of BlockRange since
	// the epoch. Zero means DefaultStart.
	Start time.Time
	// BlockRange of each block; zero means 2h.
	BlockRange time.Duration
	// Blocks is the number of consecutive block ranges; zero means 1.
	Blocks int
	// Series per block; zero means 100. The same series appear in every block.
	Series int
	// SamplesPerSeries in each block; zero means 120. The scrape interval is
	// BlockRange / SamplesPerSeries.
	SamplesPerSeries int
	// ReplicationFactor writes this many copies of every block range, with
	// distinct ULIDs and identical samples, like replicated ingesters; zero
	// means 1.
	ReplicationFactor int
	// Histograms makes some series native histograms (integer counts).
	Histograms bool
	// Seed makes the samples and ULIDs deterministic; same Seed, same bytes.
	Seed int64
	// ThanosFiles writes thanos.files with sizes into meta.json, as the
	// Thanos shipper does.
	ThanosFiles bool
	// ExternalLabels become thanos.labels. A Thanos section is written when
	// ExternalLabels is non-nil or ThanosFiles is set; otherwise meta.json is
	// a plain Prometheus one.
	ExternalLabels map[string]string
	// Source is thanos.source; empty means "sidecar".
	Source string
	// ReplicaLabel, when set, gives each replica's blocks the external
	// label ReplicaLabel="<replica number>", as replicated Prometheus
	// servers (replica="0", "1") or Cortex ingesters (__ingester_id__)
	// write it.
	ReplicaLabel string
	// Resolution is thanos.downsample.resolution in ms (0: raw).
	Resolution int64
}

// Block is one written block.
type Block struct {
	// Dir is the block directory, <dir>/<ULID>.
	Dir  string
	Meta *blockmeta.Meta
	// Range is the index of the block range, 0 for the first.
	Range int
	// Replica is 0..ReplicationFactor-1.
	Replica int
}

func (o *Options) defaults() error {
	if o.BlockRange == 0 {
		o.BlockRange = DefaultBlockRange
	}
	if o.Start.IsZero() {
		o.Start = DefaultStart
	}
	if o.Blocks == 0 {
		o.Blocks = 1
	}
	if o.Series == 0 {
		o.Series = DefaultSeries
	}
	if o.SamplesPerSeries == 0 {
		o.SamplesPerSeries = DefaultSamplesPerSeries
	}
	if o.ReplicationFactor == 0 {
		o.ReplicationFactor = 1
	}
	if o.Source == "" {
		o.Source = "sidecar"
	}
	switch {
	case o.BlockRange < time.Millisecond:
		return fmt.Errorf("block range %s too short", o.BlockRange)
	case o.Blocks < 0, o.Series < 0, o.SamplesPerSeries < 0, o.ReplicationFactor < 0:
		return errors.New("negative count")
	case o.BlockRange.Milliseconds()/int64(o.SamplesPerSeries) < 1:
		return fmt.Errorf("%d samples do not fit in %s", o.SamplesPerSeries, o.BlockRange)
	}
	return nil
}

// Generate writes the blocks into dir (created if missing) as dir/<ULID>,
// in order of range, then replica.
func Generate(dir string, opts Options) ([]Block, error) {
	if err := opts.defaults(); err != nil {
		return nil, fmt.Errorf("blockgen: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	series := makeSeries(opts)
	symbols := symbolsOf(series)
	rangeMs := opts.BlockRange.Milliseconds()
	first := opts.Start.UnixMilli() / rangeMs * rangeMs
	var out []Block
	for r := 0; r < opts.Blocks; r++ {
		mint := first + int64(r)*rangeMs
		for rep := 0; rep < opts.ReplicationFactor; rep++ {
			id := blockULID(opts, r, rep, mint+rangeMs)
			o := opts
			if opts.ReplicaLabel != "" {
				o.ExternalLabels = map[string]string{opts.ReplicaLabel: strconv.Itoa(rep)}
				for k, v := range opts.ExternalLabels {
					o.ExternalLabels[k] = v
				}
			}
			b, err := writeBlock(dir, id, mint, mint+rangeMs, series, symbols, o)
			if err != nil {
				return out, fmt.Errorf("blockgen: block %s (range %d, replica %d): %w", id, r, rep, err)
			}
			b.Range, b.Replica = r, rep
			out = append(out, b)
		}
	}
	return out, nil
}

// blockULID is derived from (seed, tenant, range, replica); its time is the
// end of the range plus the replica number, as if cut right after it.
func blockULID(o Options, r, rep int, maxt int64) ulid.ULID {
	h := sha256.New()
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], uint64(o.Seed))
	h.Write(buf[:])
	h.Write([]byte(o.Tenant))
	binary.BigEndian.PutUint64(buf[:], uint64(r)<<32|uint64(rep))
	h.Write(buf[:])
	var id ulid.ULID
	if err := id.SetTime(uint64(maxt + int64(rep))); err != nil {
		panic(err)
	}
	if err := id.SetEntropy(h.Sum(nil)[:10]); err != nil {
		panic(err)
	}
	return id
}

func writeBlock(dir string, id ulid.ULID, mint, maxt int64, series []genSeries, symbols []string, o Options) (b Block, err error) {
	final := filepath.Join(dir, id.String())
	tmp := final + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return b, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return b, err
	}
	meta := &blockmeta.Meta{ULID: id, MinTime: mint, MaxTime: maxt, Version: blockmeta.TSDBVersion1}
	meta.Compaction.Level = 1
	meta.Compaction.Sources = []ulid.ULID{id}
	chunkw, err := chunks.NewWriter(filepath.Join(tmp, blockmeta.ChunksDirname))
	if err != nil {
		return b, err
	}
	indexw, err := index.NewWriter(context.Background(), filepath.Join(tmp, blockmeta.IndexFilename))
	if err != nil {
		_ = chunkw.Close()
		return b, err
	}
	if err := writeSeries(chunkw, indexw, symbols, series, mint, o, &meta.Stats); err != nil {
		_ = chunkw.Close()
		_ = indexw.Close()
		return b, err
	}
	// Each writer is closed exactly once: a second index.Writer.Close
	// unmaps its symbol file again, and golang.org/x/sys/unix keys mappings
	// by address, so that munmap can hit a mapping another goroutine made
	// at the same address since (seen as a stray "invalid argument" in a
	// parallel test).
	if err := chunkw.Close(); err != nil {
		_ = indexw.Close()
		return b, err
	}
	if err := indexw.Close(); err != nil {
		return b, err
	}
	if o.ThanosFiles || o.ExternalLabels != nil || o.Resolution != 0 {
		lbls := map[string]string{}
		for k, v := range o.ExternalLabels {
			lbls[k] = v
		}
		meta.Thanos = &blockmeta.Thanos{Labels: lbls, Source: o.Source, Downsample: blockmeta.Downsample{Resolution: o.Resolution}}
		if o.ThanosFiles {
			if meta.Thanos.Files, err = blockmeta.GatherFiles(tmp); err != nil {
				return b, err
			}
		}
	}
	if err := meta.WriteDir(tmp); err != nil {
		return b, err
	}
	if err := os.RemoveAll(final); err != nil {
		return b, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return b, err
	}
	return Block{Dir: final, Meta: meta}, nil
}

// writeSeries writes the symbols and every series' chunks, counting them
// into stats.
func writeSeries(chunkw *chunks.Writer, indexw *index.Writer, symbols []string, series []genSeries, mint int64, o Options, stats *blockmeta.Stats) error {
	for _, s := range symbols {
		if err := indexw.AddSymbol(s); err != nil {
			return err
		}
	}
	interval := o.BlockRange.Milliseconds() / int64(o.SamplesPerSeries)
	var chks []chunks.Meta
	for ref, s := range series {
		var err error
		chks, err = s.chunks(chks[:0], mint, interval, o.SamplesPerSeries)
		if err != nil {
			return fmt.Errorf("series %s: %w", s.lset, err)
		}
		if err := chunkw.WriteChunks(chks...); err != nil {
			return err
		}
		if err := indexw.AddSeries(storage.SeriesRef(ref), s.lset, chks...); err != nil {
			return err
		}
		stats.NumSeries++
		stats.NumChunks += uint64(len(chks))
		for _, c := range chks {
			n := uint64(c.Chunk.NumSamples())
			stats.NumSamples += n
			if s.kind == kindHistogram {
				stats.NumHistogramSamples += n
			} else {
				stats.NumFloatSamples += n
			}
		}
	}
	return nil
}

type kind uint8

const (
	kindCounter kind = iota
	kindGauge
	kindHistogram
)

type genSeries struct {
	lset labels.Labels
	kind kind
	seed uint64
}

type metricDef struct {
	name  string
	kind  kind
	extra func(i int) []string // extra label pairs
}

var (
	methods  = []string{"GET", "POST", "PUT", "DELETE"}
	codes    = []string{"200", "201", "204", "400", "404", "500", "503"}
	handlers = []string{"/api/v1/query", "/api/v1/query_range", "/api/v1/series", "/api/v1/labels", "/api/v1/push", "/-/ready", "/metrics"}
	devices  = []string{"eth0", "eth1", "lo", "docker0"}
	jobs     = []struct {
		name string
		port int
	}{{"api", 8080}, {"node-exporter", 9100}, {"postgres-exporter", 9187}, {"redis-exporter", 9121}, {"ingress-nginx", 10254}, {"kube-state-metrics", 8081}}

	floatMetrics = []metricDef{
		{"http_requests_total", kindCounter, func(i int) []string {
			return []string{"method", methods[i%len(methods)], "code", codes[(i/3)%len(codes)], "handler", handlers[(i/5)%len(handlers)]}
		}},
		{"process_cpu_seconds_total", kindCounter, nil},
		{"node_network_receive_bytes_total", kindCounter, func(i int) []string { return []string{"device", devices[i%len(devices)]} }},
		{"go_goroutines", kindGauge, nil},
		{"process_resident_memory_bytes", kindGauge, nil},
		{"node_memory_MemAvailable_bytes", kindGauge, nil},
		{"up", kindGauge, nil},
	}
	histogramMetrics = []metricDef{
		{"http_request_duration_seconds", kindHistogram, func(i int) []string {
			return []string{"handler", handlers[i%len(handlers)], "method", methods[(i/7)%len(methods)]}
		}},
		{"rpc_payload_size_bytes", kindHistogram, func(i int) []string { return []string{"service", fmt.Sprintf("svc-%d", i%13)} }},
	}
)

// makeSeries returns opts.Series distinct series sorted by labels. Series
// i is metric i%M of job (i/M)%J on instance i/(M*J): a bijection, so label
// sets are unique.
func makeSeries(o Options) []genSeries {
	metrics := floatMetrics
	if o.Histograms {
		// Two of nine metrics are native histograms.
		metrics = append(append([]metricDef{}, floatMetrics...), histogramMetrics...)
	}
	tenantSeed := mix(uint64(o.Seed), hashString(o.Tenant))
	out := make([]genSeries, o.Series)
	M, J := len(metrics), len(jobs)
	for i := range out {
		m := metrics[i%M]
		j := jobs[(i/M)%J]
		inst := i / (M * J)
		kv := []string{
			"__name__", m.name,
			"job", j.name,
			"instance", fmt.Sprintf("10.%d.%d.%d:%d", 16+(inst>>16)&0xff, (inst>>8)&0xff, inst&0xff, j.port),
			"namespace", fmt.Sprintf("team-%d", inst%7),
			"pod", fmt.Sprintf("%s-%x", j.name, mix(tenantSeed, uint64(inst))&0xffffff),
		}
		if m.extra != nil {
			kv = append(kv, m.extra(i/(M*J)+i)...)
		}
		lset := labels.FromStrings(kv...)
		out[i] = genSeries{lset: lset, kind: m.kind, seed: mix(tenantSeed, labels.StableHash(lset))}
	}
	sort.Slice(out, func(a, b int) bool { return labels.Compare(out[a].lset, out[b].lset) < 0 })
	return out
}

func symbolsOf(series []genSeries) []string {
	set := map[string]struct{}{}
	for _, s := range series {
		s.lset.Range(func(l labels.Label) {
			set[l.Name] = struct{}{}
			set[l.Value] = struct{}{}
		})
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// chunks encodes the series' samples in [mint, mint+n*interval), cut every
// samplesPerChunk samples. Values are a pure function of (seed, timestamp):
// every replica and every block agree, and counters keep rising across
// blocks.
func (s genSeries) chunks(dst []chunks.Meta, mint, interval int64, n int) ([]chunks.Meta, error) {
	offset := int64(s.seed % uint64(interval))
	var (
		cur chunkenc.Chunk
		app chunkenc.Appender
		err error
	)
	for i := 0; i < n; i++ {
		t := mint + offset + int64(i)*interval
		k := t / interval // global scrape number
		if i%samplesPerChunk == 0 {
			if s.kind == kindHistogram {
				cur = chunkenc.NewHistogramChunk()
			} else {
				cur = chunkenc.NewXORChunk()
			}
			if app, err = cur.Appender(); err != nil {
				return nil, err
			}
			dst = append(dst, chunks.Meta{Chunk: cur, MinTime: t})
		}
		switch s.kind {
		case kindHistogram:
			newChunk, recoded, napp, err := app.AppendHistogram(nil, 0, t, s.histogram(k), false)
			if err != nil {
				return nil, err
			}
			if newChunk != nil {
				if !recoded {
					return nil, fmt.Errorf("unexpected new histogram chunk at %d", t)
				}
				cur = newChunk
				dst[len(dst)-1].Chunk = cur
			}
			app = napp
		default:
			app.Append(0, t, s.float(k))
		}
		dst[len(dst)-1].MaxTime = t
	}
	return dst, nil
}

func (s genSeries) float(k int64) float64 {
	switch s.kind {
	case kindCounter:
		step := 1 + s.seed%97
		return float64(uint64(k)*step + mix(s.seed, uint64(k))%(step/2+1))
	default:
		if s.seed%11 == 0 { // "up"-like
			return 1
		}
		base := float64(s.seed%100000) * 10
		return math.Round(base+base*0.2*math.Sin(float64(k)/float64(20+s.seed%50))+float64(mix(s.seed, uint64(k))%100)) / 4
	}
}

// histogram is a native histogram (schema 0, 6 positive buckets, a zero
// bucket) whose counts only grow with k.
func (s genSeries) histogram(k int64) *histogram.Histogram {
	const nb = 6
	var counts [nb]int64
	var total int64
	for b := 0; b < nb; b++ {
		w := int64(1 + (s.seed>>(b*4))%5)
		counts[b] = k*w + int64(mix(s.seed, uint64(k*nb+int64(b)))%2)
		total += counts[b]
	}
	zero := uint64(k)
	deltas := make([]int64, nb)
	prev := int64(0)
	for b := 0; b < nb; b++ {
		deltas[b] = counts[b] - prev
		prev = counts[b]
	}
	return &histogram.Histogram{
		Schema:          0,
		ZeroThreshold:   1e-128,
		ZeroCount:       zero,
		Count:           uint64(total) + zero,
		Sum:             float64(k) * float64(1+s.seed%13) * 0.25,
		PositiveSpans:   []histogram.Span{{Offset: -3, Length: nb}},
		PositiveBuckets: deltas,
	}
}

func hashString(s string) uint64 {
	h := sha256.Sum256([]byte(s))
	return binary.BigEndian.Uint64(h[:8])
}

// mix is splitmix64 over a ^ b*golden: cheap, deterministic, well spread.
func mix(a, b uint64) uint64 {
	z := a ^ (b * 0x9e3779b97f4a7c15)
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

package compaction

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/encoding"
	"github.com/prometheus/prometheus/tsdb/fileutil"
	"github.com/prometheus/prometheus/tsdb/index"
)

// The partition filter reads every series entry of every source, once per
// partition job. index.Reader resolves a label value by walking up to 31
// entries of the symbol table from the nearest sampled offset, which made
// that pass several times slower than the compaction itself. fastLabels
// maps the same index file, records where every symbol's bytes are (8 bytes
// each), and decodes series entries (CRC-checked) with direct lookups. It
// applies to index format v2 files opened from a directory; anything else
// goes through IndexReader.Series (slowLabels).

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	indexMagic      = 0xBAAAD700
	seriesByteAlign = 16
)

// labelReader serves one source block's series labels to the populator.
type labelReader interface {
	// filter returns the refs of p whose series hash into one of the
	// partitions of n in parts (a bit per partition; all series when n ==
	// 1) and, when collect is set, remembers per partition the symbols its
	// series use, for usedSymbols.
	filter(ctx context.Context, p index.Postings, parts, n uint64, collect bool) ([]storage.SeriesRef, error)
	// usedSymbols iterates, sorted, the symbols filter collected for
	// partition part. The strings alias the index: valid until Close.
	usedSymbols(part int) index.StringIter
	// IndexReader returns the block's IndexReader with Series served by
	// this reader.
	IndexReader() tsdb.IndexReader
	Close() error
}

// newLabelReader returns the fast reader for a block directory's v2 index,
// or one over the IndexReader when that does not apply.
func newLabelReader(b tsdb.BlockReader, ir tsdb.IndexReader) (labelReader, error) {
	d, ok := b.(interface{ Dir() string })
	if !ok || !fastPathSafe {
		return &slowLabels{ir: ir}, nil
	}
	mf, err := fileutil.OpenMmapFile(filepath.Join(d.Dir(), "index"))
	if err != nil {
		return nil, fmt.Errorf("mmap index: %w", err)
	}
	r, err := newFastLabels(ir, mf.Bytes())
	if err != nil || r == nil {
		_ = mf.Close()
		if err != nil {
			return nil, err
		}
		return &slowLabels{ir: ir}, nil
	}
	r.mf = mf
	r.id = b.Meta().ULID.String()
	return r, nil
}

type byteSlice []byte

func (b byteSlice) Len() int                    { return len(b) }
func (b byteSlice) Range(start, end int) []byte { return b[start:end] }

type fastLabels struct {
	id   string // source block, for errors
	ir   tsdb.IndexReader
	mf   *fileutil.MmapFile
	b    byteSlice
	offs []uint32   // offset in b of the bytes of symbol i
	lens []uint32   // their length
	used [][]uint64 // per partition, a bitset over symbols, when collecting
	dec  index.Decoder
}

// newFastLabels returns nil, nil when b is not a v2 index it can serve.
func newFastLabels(ir tsdb.IndexReader, b []byte) (*fastLabels, error) {
	if len(b) < 5 || binary.BigEndian.Uint32(b) != indexMagic || b[4] != index.FormatV2 {
		return nil, nil
	}
	toc, err := index.NewTOCFromByteSlice(byteSlice(b))
	if err != nil {
		return nil, fmt.Errorf("read index TOC: %w", err)
	}
	if toc.Series > math.MaxUint32 {
		return nil, nil // symbol offsets would not fit 32 bits
	}
	d := encoding.NewDecbufAt(byteSlice(b), int(toc.Symbols), castagnoli)
	origLen := d.Len()
	cnt := d.Be32int()
	r := &fastLabels{ir: ir, b: b, offs: make([]uint32, 0, max(cnt, 0)), lens: make([]uint32, 0, max(cnt, 0))}
	base := int(toc.Symbols) + 4
	for d.Err() == nil && len(r.offs) < cnt {
		sym := d.UvarintBytes()
		end := base + origLen - d.Len()
		r.offs = append(r.offs, uint32(end-len(sym)))
		r.lens = append(r.lens, uint32(len(sym)))
	}
	if d.Err() != nil {
		return nil, fmt.Errorf("read symbol table: %w", d.Err())
	}
	r.dec.LookupSymbol = func(_ context.Context, o uint32) (string, error) {
		s, err := r.symbol(o)
		if err != nil {
			return "", err
		}
		return unsafe.String(unsafe.SliceData(s), len(s)), nil
	}
	return r, nil
}

// symbol returns the bytes of symbol o, aliasing the index.
func (r *fastLabels) symbol(o uint32) ([]byte, error) {
	if int(o) >= len(r.offs) {
		return nil, fmt.Errorf("unknown symbol %d", o)
	}
	off := r.offs[o]
	return r.b[off : off+r.lens[o]], nil
}

// entry returns the series entry at ref without checking its CRC. The
// filter pass uses it: every series is kept by exactly one partition,
// which reads the entry again through series (CRC-checked), so a damaged
// entry still fails the group, and a job does not checksum the entries of
// series it skips.
func (r *fastLabels) entry(ref storage.SeriesRef) (encoding.Decbuf, error) {
	off := uint64(ref) * seriesByteAlign
	if off >= uint64(len(r.b)) {
		return encoding.Decbuf{}, fmt.Errorf("offset beyond the index")
	}
	l, n := binary.Uvarint(r.b[off:])
	if n <= 0 || n > binary.MaxVarintLen32 || off+uint64(n)+l+4 > uint64(len(r.b)) {
		return encoding.Decbuf{}, fmt.Errorf("bad series entry length")
	}
	start := off + uint64(n)
	return encoding.Decbuf{B: r.b[start : start+l]}, nil
}

// filter decodes only the symbol references of each series entry and hashes the name/value bytes exactly as
// labels.StableHash does: xxhash64 over name, 0xff, value, 0xff, ...
// (TestStableHashCompatible holds it to that).
func (r *fastLabels) filter(ctx context.Context, p index.Postings, parts, n uint64, collect bool) ([]storage.SeriesRef, error) {
	var (
		kept  []storage.SeriesRef
		buf   []byte
		refs  []uint32
		count int
	)
	if collect && r.used == nil {
		r.used = make([][]uint64, n)
		for part := range n {
			if parts&(1<<part) != 0 {
				r.used[part] = make([]uint64, (len(r.offs)+63)/64)
			}
		}
	}
	for p.Next() {
		if count++; count%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		ref := p.At()
		d, err := r.entry(ref)
		if err != nil {
			return nil, fmt.Errorf("read series %d: %w", ref, err)
		}
		k := d.Uvarint()
		refs = refs[:0]
		for i := 0; i < 2*k && d.Err() == nil; i++ {
			refs = append(refs, uint32(d.Uvarint()))
		}
		if err := d.Err(); err != nil {
			return nil, fmt.Errorf("read series %d: %w", ref, err)
		}
		part := uint64(0)
		if n > 1 {
			buf = buf[:0]
			for _, o := range refs {
				s, err := r.symbol(o)
				if err != nil {
					return nil, fmt.Errorf("read series %d: %w", ref, err)
				}
				buf = append(buf, s...)
				buf = append(buf, '\xff')
			}
			if part = xxhash.Sum64(buf) % n; parts&(1<<part) == 0 {
				continue
			}
		}
		kept = append(kept, ref)
		if collect {
			used := r.used[part]
			for _, o := range refs {
				if int(o) >= len(r.offs) {
					return nil, fmt.Errorf("read series %d: unknown symbol %d", ref, o)
				}
				used[o/64] |= 1 << (o % 64)
			}
		}
	}
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("iterate postings: %w", err)
	}
	return kept, nil
}

// usedSymbols walks the block reader's own symbol iterator alongside the
// bitset, so the strings handed to the index writer alias the block's
// mapping (open until the block is closed, after the writer is), exactly
// like the symbols tsdb.DefaultBlockPopulator passes.
func (r *fastLabels) usedSymbols(part int) index.StringIter {
	var used []uint64
	if part < len(r.used) {
		used = r.used[part]
	}
	return &bitsetIter{r: r, used: used, lib: r.ir.Symbols(), i: -1}
}

// bitsetIter yields the symbols whose bit is set, in table (sorted) order.
type bitsetIter struct {
	r    *fastLabels
	used []uint64
	lib  index.StringIter
	i    int
	err  error
}

func (it *bitsetIter) Next() bool {
	for it.lib.Next() {
		it.i++
		if it.i >= len(it.r.offs) {
			it.err = fmt.Errorf("index lists more than %d symbols", len(it.r.offs))
			return false
		}
		if it.used != nil && it.used[it.i/64]&(1<<(it.i%64)) != 0 {
			return true
		}
	}
	return false
}
func (it *bitsetIter) At() string { return it.lib.At() }
func (it *bitsetIter) Err() error {
	if it.err != nil {
		return it.err
	}
	return it.lib.Err()
}

func (r *fastLabels) series(ref storage.SeriesRef, b *labels.ScratchBuilder, chks *[]chunks.Meta) error {
	off := uint64(ref) * seriesByteAlign
	if off >= uint64(len(r.b)) {
		return fmt.Errorf("source block %s: series %d: offset beyond the index", r.id, ref)
	}
	d := encoding.NewDecbufUvarintAt(r.b, int(off), castagnoli)
	if d.Err() != nil {
		return fmt.Errorf("source block %s: series %d: %w", r.id, ref, d.Err())
	}
	b.Reset()
	if err := r.dec.Series(d.Get(), b, chks); err != nil {
		return fmt.Errorf("source block %s: series %d: %w", r.id, ref, err)
	}
	return nil
}

func (r *fastLabels) IndexReader() tsdb.IndexReader { return fastIndexReader{r.ir, r} }

func (r *fastLabels) Close() error {
	if r.mf == nil {
		return nil
	}
	// Once only: a second munmap could hit a mapping made since at the
	// same address (see blockgen's writer close).
	mf := r.mf
	r.mf = nil
	return mf.Close()
}

// fastIndexReader is an IndexReader whose Series decodes with direct symbol
// lookups; everything else is the block's own reader.
type fastIndexReader struct {
	tsdb.IndexReader
	fl *fastLabels
}

func (f fastIndexReader) Series(ref storage.SeriesRef, b *labels.ScratchBuilder, chks *[]chunks.Meta) error {
	return f.fl.series(ref, b, chks)
}

// slowLabels serves blocks fastLabels cannot: through IndexReader.Series.
type slowLabels struct {
	ir      tsdb.IndexReader
	symbols []map[string]struct{} // per partition, when collecting
}

func (s *slowLabels) filter(ctx context.Context, p index.Postings, parts, n uint64, collect bool) ([]storage.SeriesRef, error) {
	var (
		kept    []storage.SeriesRef
		builder labels.ScratchBuilder
		lset    labels.Labels
		count   int
	)
	if collect && s.symbols == nil {
		s.symbols = make([]map[string]struct{}, n)
		for part := range n {
			if parts&(1<<part) != 0 {
				s.symbols[part] = map[string]struct{}{}
			}
		}
	}
	for p.Next() {
		if count++; count%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		ref := p.At()
		if err := s.ir.Series(ref, &builder, nil); err != nil {
			return nil, fmt.Errorf("read series %d: %w", ref, err)
		}
		builder.Overwrite(&lset)
		part := uint64(0)
		if n > 1 {
			if part = labels.StableHash(lset) % n; parts&(1<<part) == 0 {
				continue
			}
		}
		kept = append(kept, ref)
		if collect {
			// lset aliases builder memory that the next series
			// overwrites: clone what goes into the map.
			syms := s.symbols[part]
			lset.Range(func(l labels.Label) {
				if _, ok := syms[l.Name]; !ok {
					syms[strings.Clone(l.Name)] = struct{}{}
				}
				if _, ok := syms[l.Value]; !ok {
					syms[strings.Clone(l.Value)] = struct{}{}
				}
			})
		}
	}
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("iterate postings: %w", err)
	}
	return kept, nil
}

func (s *slowLabels) usedSymbols(part int) index.StringIter {
	var used map[string]struct{}
	if part < len(s.symbols) {
		used = s.symbols[part]
	}
	syms := make([]string, 0, len(used))
	for k := range used {
		syms = append(syms, k)
	}
	slices.Sort(syms)
	return index.NewStringListIter(syms)
}

func (s *slowLabels) IndexReader() tsdb.IndexReader { return s.ir }
func (*slowLabels) Close() error                    { return nil }

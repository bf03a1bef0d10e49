package compaction

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/encoding"
	"github.com/prometheus/prometheus/tsdb/fileutil"
	"github.com/prometheus/prometheus/tsdb/index"
)

// The partition filter reads the labels of every series of every source,
// once per partition job. index.Reader resolves a label value by walking up
// to 31 entries of the symbol table from the nearest sampled offset, which
// makes that pass several times slower than it needs to be. seriesLabels
// decodes the same series entries (CRC-checked, with the library's
// index.Decoder) against the whole symbol table held as a slice, so each
// lookup is an index operation. It applies to index format v2 files opened
// from a directory; anything else uses IndexReader.Series.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	indexMagic      = 0xBAAAD700
	seriesByteAlign = 16
)

type labelReader interface {
	// filter returns the refs of p whose series hash into partition part
	// of n and, when collect is set, adds their symbols to symbols.
	filter(ctx context.Context, p index.Postings, part, n uint64, symbols map[string]struct{}) ([]storage.SeriesRef, error)
	// IndexReader returns ir with Series served by this reader.
	IndexReader() tsdb.IndexReader
	Close() error
}

type slowLabels struct{ ir tsdb.IndexReader }

func (s slowLabels) filter(ctx context.Context, p index.Postings, part, n uint64, symbols map[string]struct{}) ([]storage.SeriesRef, error) {
	var (
		kept    []storage.SeriesRef
		builder labels.ScratchBuilder
		lset    labels.Labels
		count   int
	)
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
		if n > 1 && labels.StableHash(lset)%n != part {
			continue
		}
		kept = append(kept, ref)
		if symbols != nil {
			// lset aliases builder memory that the next series overwrites:
			// clone what goes into the map.
			lset.Range(func(l labels.Label) {
				if _, ok := symbols[l.Name]; !ok {
					symbols[strings.Clone(l.Name)] = struct{}{}
				}
				if _, ok := symbols[l.Value]; !ok {
					symbols[strings.Clone(l.Value)] = struct{}{}
				}
			})
		}
	}
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("iterate postings: %w", err)
	}
	return kept, nil
}
func (s slowLabels) IndexReader() tsdb.IndexReader { return s.ir }
func (slowLabels) Close() error                    { return nil }

type byteSlice []byte

func (b byteSlice) Len() int                    { return len(b) }
func (b byteSlice) Range(start, end int) []byte { return b[start:end] }

type fastLabels struct {
	ir   tsdb.IndexReader
	mf   *fileutil.MmapFile
	b    byteSlice
	syms []string
	dec  index.Decoder
}

// newLabelReader returns the fast reader for a block directory's v2 index,
// or the IndexReader itself when that does not apply. The symbol strings
// alias ir's memory: the reader must not outlive ir.
func newLabelReader(b tsdb.BlockReader, ir tsdb.IndexReader) (labelReader, error) {
	d, ok := b.(interface{ Dir() string })
	if !ok {
		return slowLabels{ir}, nil
	}
	mf, err := fileutil.OpenMmapFile(filepath.Join(d.Dir(), "index"))
	if err != nil {
		return nil, fmt.Errorf("mmap index: %w", err)
	}
	bs := mf.Bytes()
	if len(bs) < 5 || binary.BigEndian.Uint32(bs) != indexMagic || bs[4] != index.FormatV2 {
		_ = mf.Close()
		return slowLabels{ir}, nil
	}
	r := &fastLabels{ir: ir, mf: mf, b: bs}
	it := ir.Symbols()
	for it.Next() {
		r.syms = append(r.syms, it.At())
	}
	if err := it.Err(); err != nil {
		_ = mf.Close()
		return nil, fmt.Errorf("read symbols: %w", err)
	}
	r.dec.LookupSymbol = func(_ context.Context, o uint32) (string, error) {
		if int(o) >= len(r.syms) {
			return "", fmt.Errorf("unknown symbol %d", o)
		}
		return r.syms[o], nil
	}
	return r, nil
}

// filter decodes only the symbol references of each series entry (after
// its CRC check), hashes name/value pairs exactly as labels.StableHash does
// (xxhash64 over name, 0xff, value, 0xff, ...; TestStableHashCompatible
// holds it to that) and marks used symbols in a bitmap.
func (r *fastLabels) filter(ctx context.Context, p index.Postings, part, n uint64, symbols map[string]struct{}) ([]storage.SeriesRef, error) {
	var (
		kept  []storage.SeriesRef
		buf   []byte
		refs  []uint32
		used  []bool
		count int
	)
	if symbols != nil {
		used = make([]bool, len(r.syms))
	}
	for p.Next() {
		if count++; count%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		ref := p.At()
		off := uint64(ref) * seriesByteAlign
		if off >= uint64(len(r.b)) {
			return nil, fmt.Errorf("read series %d: offset beyond the index", ref)
		}
		d := encoding.NewDecbufUvarintAt(r.b, int(off), castagnoli)
		k := d.Uvarint()
		refs = refs[:0]
		for i := 0; i < 2*k && d.Err() == nil; i++ {
			refs = append(refs, uint32(d.Uvarint()))
		}
		if err := d.Err(); err != nil {
			return nil, fmt.Errorf("read series %d: %w", ref, err)
		}
		for _, o := range refs {
			if int(o) >= len(r.syms) {
				return nil, fmt.Errorf("read series %d: unknown symbol %d", ref, o)
			}
		}
		if n > 1 {
			buf = buf[:0]
			for _, o := range refs {
				buf = append(buf, r.syms[o]...)
				buf = append(buf, '\xff')
			}
			if xxhash.Sum64(buf)%n != part {
				continue
			}
		}
		kept = append(kept, ref)
		if used != nil {
			for _, o := range refs {
				used[o] = true
			}
		}
	}
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("iterate postings: %w", err)
	}
	for o, u := range used {
		if u {
			if _, ok := symbols[r.syms[o]]; !ok {
				symbols[strings.Clone(r.syms[o])] = struct{}{}
			}
		}
	}
	return kept, nil
}

func (r *fastLabels) series(ref storage.SeriesRef, b *labels.ScratchBuilder, chks *[]chunks.Meta) error {
	off := uint64(ref) * seriesByteAlign
	if off >= uint64(len(r.b)) {
		return fmt.Errorf("series %d: offset beyond the index", ref)
	}
	d := encoding.NewDecbufUvarintAt(r.b, int(off), castagnoli)
	if d.Err() != nil {
		return d.Err()
	}
	b.Reset()
	if err := r.dec.Series(d.Get(), b, chks); err != nil {
		return fmt.Errorf("read series: %w", err)
	}
	return nil
}

// IndexReader returns the block's IndexReader with Series decoded by r.
func (r *fastLabels) IndexReader() tsdb.IndexReader { return fastIndexReader{r.ir, r} }

// fastIndexReader is an IndexReader whose Series uses the in-memory symbol
// table; everything else is the block's own reader.
type fastIndexReader struct {
	tsdb.IndexReader
	fl *fastLabels
}

func (f fastIndexReader) Series(ref storage.SeriesRef, b *labels.ScratchBuilder, chks *[]chunks.Meta) error {
	return f.fl.series(ref, b, chks)
}

func (r *fastLabels) Close() error { return r.mf.Close() }

package compaction

import (
	"fmt"
	"slices"

	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

// aggregateMerge joins one series' chunks from several downsampled
// sources. Their aggregate chunks cannot be merged sample by sample (the
// compacting merger would decode them to nothing), so they are carried
// over whole, in time order; chunks that overlap — replicas of one
// downsampled range — are refused with an error instead of losing data.
func aggregateMerge(series ...storage.ChunkSeries) storage.ChunkSeries {
	if len(series) == 1 {
		return series[0]
	}
	return &storage.ChunkSeriesEntry{
		Lset: series[0].Labels(),
		ChunkIteratorFn: func(chunks.Iterator) chunks.Iterator {
			var all []chunks.Meta
			for _, s := range series {
				// A fresh iterator per source: the chunks of one are held
				// while the next is read.
				it := s.Iterator(nil)
				for it.Next() {
					all = append(all, it.At())
				}
				if err := it.Err(); err != nil {
					return errChunks{err}
				}
			}
			slices.SortStableFunc(all, func(a, b chunks.Meta) int { return cmpInt64(a.MinTime, b.MinTime) })
			for i := 1; i < len(all); i++ {
				if all[i].MinTime <= all[i-1].MaxTime {
					return errChunks{fmt.Errorf("series %s: downsampled chunks %d–%d and %d–%d overlap; aggregate chunks cannot be merged (are two replicas of one range in this group?)",
						series[0].Labels(), all[i-1].MinTime, all[i-1].MaxTime, all[i].MinTime, all[i].MaxTime)}
				}
			}
			return storage.NewListChunkSeriesIterator(all...)
		},
	}
}

// errChunks is a chunk iterator that only fails.
type errChunks struct{ err error }

func (e errChunks) At() chunks.Meta { return chunks.Meta{} }
func (e errChunks) Next() bool      { return false }
func (e errChunks) Err() error      { return e.err }

// Package retention says which blocks are past their retention and which
// is next: the pure part of the cleaner's retention pass, which `sluice
// status` shows as well.
package retention

import (
	"sort"
	"time"

	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

// Expiry is one block past its retention, or the next to be.
type Expiry struct {
	Block     records.Block
	Retention time.Duration
	// At is when the block's retention ends: its maxTime plus the
	// retention of its resolution.
	At time.Time
	// Downsample is the resolution the block is due a downsample at (0:
	// none): it expires only with that downsample recorded, by a write
	// whose condition demands it (records.ExpireDownsampled).
	Downsample int64
}

// DownsampleTo is planning.Policy.DownsampleTo: the resolution a block of
// resolution res over [minT, maxT) is downsampled to, false when none.
type DownsampleTo func(res, minT, maxT int64) (int64, bool)

// Expiries lists, for the blocks of one tenant, those whose retention
// ends by now (due) and the first one whose retention ends after now
// (next; ok false when none). Only LIVE, published, unclaimed blocks
// expire: a block a version claims waits for what the version makes of
// it, which is expired in turn once it is old enough. A block due a
// downsample (downsampleTo; nil: none is) whose downsample is not
// recorded yet is held: never due nor next, whatever its age — raw data
// is never deleted before its downsample is published (Thanos #3716,
// #5664); held lists those that would be due.
func Expiries(r config.Retention, blocks []records.Block, resolution map[string]int64, downsampleTo DownsampleTo, now time.Time) (due, held []Expiry, next Expiry, ok bool) {
	var later []Expiry
	for _, b := range blocks {
		if b.State != protocol.BlockLive || !b.Published || b.ClaimedBy != "" {
			continue
		}
		keep := r.Of(resolution[b.Stream])
		if keep <= 0 {
			continue
		}
		e := Expiry{Block: b, Retention: keep, At: time.UnixMilli(b.MaxT).Add(keep)}
		if downsampleTo != nil {
			if to, due := downsampleTo(resolution[b.Stream], b.MinT, b.MaxT); due {
				e.Downsample = to
				if b.Downsampled < to {
					if !e.At.After(now) {
						held = append(held, e)
					}
					continue
				}
			}
		}
		if !e.At.After(now) {
			due = append(due, e)
		} else {
			later = append(later, e)
		}
	}
	sort.SliceStable(due, func(i, j int) bool { return due[i].At.Before(due[j].At) })
	sort.SliceStable(later, func(i, j int) bool { return later[i].At.Before(later[j].At) })
	if len(later) > 0 {
		return due, held, later[0], true
	}
	return due, held, Expiry{}, false
}

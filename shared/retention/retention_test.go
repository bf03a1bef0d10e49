package retention

import (
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

func TestExpiries(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	ended := func(ago time.Duration) int64 { return now.Add(-ago).UnixMilli() }
	live := func(id, stream string, ago time.Duration) records.Block {
		return records.Block{ID: id, Stream: stream, State: protocol.BlockLive, Published: true, MaxT: ended(ago)}
	}
	res := map[string]int64{"raw": 0, "5m": 5 * 60 * 1000, "odd": 7}
	claimed := live("claimed", "raw", 40*day)
	claimed.State, claimed.ClaimedBy = protocol.BlockClaimed, "acme/g@v1"
	unpublished := live("unpublished", "raw", 40*day)
	unpublished.Published = false
	retiring := live("retiring", "raw", 40*day)
	retiring.State = protocol.BlockRetiring
	noCompact := live("no-compact", "raw", 35*day)
	noCompact.NoCompact = true
	long := func(id string, downsampled int64) records.Block {
		b := live(id, "raw", 40*day)
		b.MinT, b.Downsampled = b.MaxT-(48*time.Hour).Milliseconds(), downsampled
		return b
	}
	short := live("short", "raw", 40*day)
	short.MinT = short.MaxT - (2 * time.Hour).Milliseconds()
	fiveMinutes := int64(5 * 60 * 1000)
	downsampleTo := func(res, minT, maxT int64) (int64, bool) {
		return fiveMinutes, res == 0 && maxT-minT >= (40*time.Hour).Milliseconds()
	}

	tests := []struct {
		name     string
		r        config.Retention
		blocks   []records.Block
		to       DownsampleTo
		wantHeld []string
		wantDue  []string
		wantNext string
	}{
		{
			name:     "a block due a downsample waits for it",
			r:        config.Retention{Raw: 30 * day},
			blocks:   []records.Block{long("not-downsampled", 0), long("downsampled", fiveMinutes), short},
			to:       downsampleTo,
			wantDue:  []string{"downsampled", "short"},
			wantHeld: []string{"not-downsampled"},
		},
		{name: "no retention keeps everything", blocks: []records.Block{live("a", "raw", 400*day)}},
		{
			name: "raw blocks past 30d, oldest first; the next is the youngest's",
			r:    config.Retention{Raw: 30 * day},
			blocks: []records.Block{live("b", "raw", 31*day), live("a", "raw", 45*day), live("young", "raw", day),
				live("younger", "raw", time.Hour), noCompact},
			wantDue: []string{"a", "no-compact", "b"}, wantNext: "young",
		},
		{
			name:   "exactly at its end is due",
			r:      config.Retention{Raw: 30 * day},
			blocks: []records.Block{live("edge", "raw", 30*day)}, wantDue: []string{"edge"},
		},
		{
			name:    "claimed, unpublished and retiring blocks wait",
			r:       config.Retention{Raw: 30 * day},
			blocks:  []records.Block{claimed, unpublished, retiring, live("a", "raw", 31*day)},
			wantDue: []string{"a"},
		},
		{
			name:    "each resolution its own retention; an unknown one is kept",
			r:       config.Retention{Raw: 10 * day, FiveMinutes: 90 * day},
			blocks:  []records.Block{live("raw", "raw", 20*day), live("5m-young", "5m", 20*day), live("5m-old", "5m", 120*day), live("odd", "odd", 400*day)},
			wantDue: []string{"5m-old", "raw"}, wantNext: "5m-young",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			due, held, next, ok := Expiries(tt.r, tt.blocks, res, tt.to, now)
			var heldIDs []string
			for _, e := range held {
				heldIDs = append(heldIDs, e.Block.ID)
			}
			if !slices.Equal(heldIDs, tt.wantHeld) {
				t.Errorf("held = %v, want %v", heldIDs, tt.wantHeld)
			}
			var got []string
			for _, e := range due {
				got = append(got, e.Block.ID)
				if want := tt.to != nil && e.Block.ID == "downsampled"; want != (e.Downsample > 0) {
					t.Errorf("%s: expiry conditioned on its downsample: %v, want %v", e.Block.ID, e.Downsample > 0, want)
				}
				if e.At.After(now) {
					t.Errorf("%s is due but its retention ends at %v, after now", e.Block.ID, e.At)
				}
			}
			if !slices.Equal(got, tt.wantDue) {
				t.Errorf("due = %v, want %v", got, tt.wantDue)
			}
			if ok != (tt.wantNext != "") || next.Block.ID != tt.wantNext {
				t.Errorf("next = %q (ok %v), want %q", next.Block.ID, ok, tt.wantNext)
			}
			if ok && !next.At.Equal(time.UnixMilli(next.Block.MaxT).Add(next.Retention)) {
				t.Errorf("next at %v, want its end plus %v", next.At, next.Retention)
			}
		})
	}
}

package testworld

import (
	"sync/atomic"
	"time"
)

// Clock is a handler clock that a test moves forward: wall time plus an
// offset. Lease expiry, re-drives, supersedes, deletion and orphan delays are
// reached by advancing it instead of sleeping. The zero value is wall time.
type Clock struct{ offset atomic.Int64 }

// Now is the clock's time; pass it as Deps.Now / localrun.Options.Now.
func (c *Clock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// Offset is how far the clock is ahead of wall time.
func (c *Clock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// Skewed is a clock that runs d ahead of c: a handler on another machine
// whose clock is off (d > 0 makes leases of others look expired).
func (c *Clock) Skewed(d time.Duration) func() time.Time {
	return func() time.Time { return c.Now().Add(d) }
}

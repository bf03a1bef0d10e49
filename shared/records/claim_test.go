package records

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/shared/protocol"
)

// TestClaimAbandoned: a version is abandoned only while it is CLAIMING and
// only once its planner's invocation has ended — at its recorded
// ClaimUntil, or Lambda's longest invocation after its creation when it
// records none.
func TestClaimAbandoned(t *testing.T) {
	created := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	until := created.Add(time.Minute)
	for _, c := range []struct {
		name  string
		state protocol.GroupState
		until time.Time // zero: recorded without one
		now   time.Time
		want  bool
	}{
		{"claiming within its planner's invocation", protocol.GroupClaiming, until, until, false},
		{"claiming after its planner's invocation", protocol.GroupClaiming, until, until.Add(time.Millisecond), true},
		{"planned after its planner's invocation", protocol.GroupPlanned, until, until.Add(time.Hour), false},
		{"superseded after its planner's invocation", protocol.GroupSuperseded, until, until.Add(time.Hour), false},
		{"claiming, no deadline recorded, within Lambda's longest", protocol.GroupClaiming, time.Time{}, created.Add(MaxInvocation), false},
		{"claiming, no deadline recorded, after Lambda's longest", protocol.GroupClaiming, time.Time{}, created.Add(MaxInvocation + time.Millisecond), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := Group{State: c.state, CreatedAt: created.UnixMilli()}
			if !c.until.IsZero() {
				g.ClaimUntil = c.until.UnixMilli()
			}
			if got := g.ClaimAbandoned(c.now); got != c.want {
				t.Errorf("ClaimAbandoned(%v) = %v, want %v", c.now, got, c.want)
			}
		})
	}
}

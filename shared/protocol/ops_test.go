package protocol

import (
	"testing"

	"github.com/sluice-dev/sluice/shared/messages"
)

func TestOpActs(t *testing.T) {
	tests := []struct {
		name      string
		op        messages.OpKind
		opGen     int64
		state     BlockState
		gen       int64
		acts      bool
		notJudged bool
	}{
		{name: "publish at its gen", op: messages.OpPublish, opGen: 3, state: BlockLive, gen: 3, acts: true},
		{name: "publish after a claim", op: messages.OpPublish, opGen: 3, state: BlockClaimed, gen: 4},
		{name: "publish at a later gen in its state", op: messages.OpPublish, opGen: 3, state: BlockLive, gen: 5},
		{name: "mark at its gen", op: messages.OpMark, opGen: 2, state: BlockRetiring, gen: 2, acts: true},
		{name: "mark of a deleted block", op: messages.OpMark, opGen: 2, state: BlockDeleted, gen: 3},
		{name: "delete of a deleted block", op: messages.OpDelete, opGen: 4, state: BlockDeleted, gen: 4, acts: true},
		{name: "delete of a discarded output", op: messages.OpDelete, opGen: 2, state: BlockDiscarded, gen: 2, acts: true},
		{name: "no-compact of a quarantined block", op: messages.OpNoCompact, opGen: 3, state: BlockQuarantined, gen: 3, acts: true},
		{name: "no-compact after the release", op: messages.OpNoCompact, opGen: 3, state: BlockLive, gen: 4},
		{name: "unmark at the release's gen", op: messages.OpUnmarkNoCompact, opGen: 4, state: BlockLive, gen: 4, acts: true},
		{name: "unmark after the release's planning claimed the block", op: messages.OpUnmarkNoCompact, opGen: 4, state: BlockClaimed, gen: 5, acts: true},
		{name: "unmark after a claim was released", op: messages.OpUnmarkNoCompact, opGen: 4, state: BlockLive, gen: 6, acts: true},
		{name: "unmark of a block quarantined again", op: messages.OpUnmarkNoCompact, opGen: 4, state: BlockQuarantined, gen: 6},
		{name: "unmark of a retiring block", op: messages.OpUnmarkNoCompact, opGen: 4, state: BlockRetiring, gen: 6},
		{name: "unmark of a deleted block", op: messages.OpUnmarkNoCompact, opGen: 4, state: BlockDeleted, gen: 7},
		{name: "unmark older than its record's gen", op: messages.OpUnmarkNoCompact, opGen: 4, state: BlockLive, gen: 3},
		{name: "delete stray is judged per version", op: messages.OpDeleteStray, opGen: 0, state: BlockLive, gen: 3, notJudged: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			acts, judged := OpActs(tc.op, tc.opGen, tc.state, tc.gen)
			if acts != tc.acts || judged == tc.notJudged {
				t.Errorf("OpActs(%s at gen %d, record %s at gen %d) = %v, judged %v; want %v, judged %v",
					tc.op, tc.opGen, tc.state, tc.gen, acts, judged, tc.acts, !tc.notJudged)
			}
		})
	}
}

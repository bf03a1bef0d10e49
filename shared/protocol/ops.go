package protocol

import (
	"slices"

	"github.com/sluice-dev/sluice/shared/messages"
)

// OpActs reports whether a block op sent for the block at gen opGen acts
// on the block's record, read in state at gen; a stale op is dropped.
// judged is false for DELETE_STRAY, which names versions no record names
// and is judged per version instead.
//
// Every op acts only at its own gen, in the states it is for, except
// UNMARK_NO_COMPACT. The release that sends it is followed at once by the
// planning of the block's range, which may claim the block (a new gen)
// before the uploader gets to the op: held to its gen, the op was stale
// then and Sluice's no-compact mark stayed in the bucket until the block
// was deleted. So it acts at its gen or any later one while the block is
// LIVE or CLAIMED. Safe, because Sluice writes its mark only for a
// QUARANTINED block, and in neither state does any quarantine want one: a
// later quarantine leaves QUARANTINED only by a release, whose own removal
// the older op merely does first. It never acts on a QUARANTINED block.
//
// A NO_COMPACT op that does not act still deletes the mark of Sluice's an
// earlier delivery of it may have written before the block moved on, if
// the record does not name it: judged per version, as DELETE_STRAY is.
func OpActs(op messages.OpKind, opGen int64, state BlockState, gen int64) (acts, judged bool) {
	var in []BlockState
	switch op {
	case messages.OpPublish:
		in = []BlockState{BlockLive}
	case messages.OpMark:
		in = []BlockState{BlockRetiring}
	case messages.OpDelete:
		in = []BlockState{BlockDeleted, BlockDiscarded}
	case messages.OpNoCompact:
		in = []BlockState{BlockQuarantined}
	case messages.OpUnmarkNoCompact:
		return gen >= opGen && slices.Contains([]BlockState{BlockLive, BlockClaimed}, state), true
	default:
		return false, false
	}
	return gen == opGen && slices.Contains(in, state), true
}

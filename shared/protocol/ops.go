package protocol

import "github.com/sluice-dev/sluice/shared/messages"

// OpActsIn is the block states in which a block op acts (at its gen); in
// any other it is stale and dropped. ok is false for DELETE_STRAY, which
// names versions no record names and is judged per version instead.
func OpActsIn(op messages.OpKind) (states []BlockState, ok bool) {
	switch op {
	case messages.OpPublish:
		return []BlockState{BlockLive}, true
	case messages.OpMark:
		return []BlockState{BlockRetiring}, true
	case messages.OpDelete:
		return []BlockState{BlockDeleted, BlockDiscarded}, true
	case messages.OpNoCompact:
		return []BlockState{BlockQuarantined}, true
	case messages.OpUnmarkNoCompact:
		return []BlockState{BlockLive}, true
	}
	return nil, false
}

package pipeline

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/shared/compaction"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/records"
)

func timeMs(ms int64) time.Time { return time.UnixMilli(ms) }

// outputULID is the output block of partition p of version g: derived from
// (tenant, group, version, partition) and the version's creation time, so
// every attempt writes the same keys.
func outputULID(g records.Group, p int) ulid.ULID {
	return compaction.OutputULID(time.UnixMilli(g.CreatedAt), g.Tenant, g.Key.String(), int(g.Version), p)
}

// strayNonce names a set of stray versions for an op's dedup id: the same
// set sent twice is one op, a different set another.
func strayNonce(vs []messages.StrayVersion) string {
	h := fnv.New64a()
	for _, v := range vs {
		h.Write([]byte(v.RelPath + "\x00" + v.VersionID + "\x00"))
	}
	return fmt.Sprintf("s%016x", h.Sum64())
}

// sendStray sends DELETE_STRAY ops for the versions vs of one block, at
// most messages.MaxStrayPerOp per op. The uploader never deletes a version
// the block's record names, whatever an op says.
func sendStray(ctx context.Context, send messages.Sender, tenant, block string, gen int64, vs []messages.StrayVersion) error {
	for start := 0; start < len(vs); start += messages.MaxStrayPerOp {
		part := vs[start:min(start+messages.MaxStrayPerOp, len(vs))]
		if err := send.Op(ctx, messages.BlockOp{Op: messages.OpDeleteStray, Tenant: tenant, Block: block, Gen: gen,
			Stray: part, Nonce: strayNonce(part)}); err != nil {
			return err
		}
	}
	return nil
}

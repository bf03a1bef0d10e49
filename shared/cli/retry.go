package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

func init() {
	register(&command{
		name:    "retry",
		summary: "release a quarantined block or group so Sluice tries it again",
		usage:   "--tenant T BLOCK|GROUP",
		aws:     true,
		help: `Sluice quarantines what it failed to compact three times (SLUICE_MAX_JOB_ATTEMPTS):
the source block the failures blamed — a corrupt index or chunk, a file
deleted behind its back — or, when no block was to blame, the group.
'sluice status' lists them with the reason.

BLOCK is a quarantined block's ULID. Fix it first — re-upload its files
under the same ULID if you can repair them — then retry: the planner reads
the block again as it is in the bucket now, checks it as at registration,
deletes the no-compact mark Sluice wrote for it and plans its group. A
block that still fails the checks stays quarantined (the planner logs why).

GROUP is a quarantined group's key as 'sluice status --json' shows it
(<stream>#<level>#<range start>): the version is superseded with its
failures forgotten, its sources are released and the group is planned
afresh.

retry sends the request to the planner's queue and returns; 'sluice status'
shows what came of it.`,
		setup: func(fs *flag.FlagSet) runFunc {
			tenant := fs.String("tenant", "", "the tenant (required)")
			return func(ctx context.Context, e *Env, args []string) error {
				if len(args) != 1 {
					return usagef("want exactly one BLOCK or GROUP, got %d arguments", len(args))
				}
				if *tenant == "" {
					return usagef("--tenant is required")
				}
				if err := blockkey.ValidateTenant(*tenant); err != nil {
					return usagef("tenant %q: %v", *tenant, err)
				}
				req := messages.RetryRequest{Tenant: *tenant, Nonce: nonce()}
				if _, err := ulid.ParseStrict(args[0]); err == nil {
					req.Block = args[0]
				} else if _, err := planning.ParseGroupKey(args[0]); err == nil {
					req.Group = args[0]
				} else {
					return usagef("%q is neither a block ULID nor a group key (<stream>#<level>#<start>)", args[0])
				}
				d, err := e.openDeployment(ctx)
				if err != nil {
					return err
				}
				what, err := Retry(ctx, d.store, messages.Sender{SQS: d.clients.SQS, Queues: d.cfg.Queues}, req)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.Stdout, "retry of %s sent to the planner; 'sluice status' shows what came of it\n", what)
				return nil
			}
		},
	})
}

// Retry checks that the block or group a request names is quarantined,
// then sends the request to the planner, which releases it. It returns
// what it names, for the user.
func Retry(ctx context.Context, st *records.Store, send messages.Sender, req messages.RetryRequest) (string, error) {
	if req.Block != "" {
		b, ok, err := st.GetBlock(ctx, req.Tenant, req.Block)
		if err != nil {
			return "", err
		}
		if !ok {
			return "", fmt.Errorf("block %s/%s is not known to Sluice", req.Tenant, req.Block)
		}
		if b.State != protocol.BlockQuarantined {
			return "", fmt.Errorf("block %s is %s, not quarantined: nothing to retry", b.Key(), b.State)
		}
		return fmt.Sprintf("quarantined block %s (%s)", b.Key(), b.Reason), send.Retry(ctx, req)
	}
	g, err := planning.ParseGroupKey(req.Group)
	if err != nil {
		return "", err
	}
	head, ok, err := st.GetGroup(ctx, req.Tenant, g)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("group %s/%s is not known to Sluice", req.Tenant, req.Group)
	}
	if head.State != protocol.GroupQuarantined {
		return "", fmt.Errorf("group %s is %s, not quarantined: nothing to retry", head.Ref(), head.State)
	}
	return fmt.Sprintf("quarantined group %s (%s)", head.Ref(), head.Reason), send.Retry(ctx, req)
}

func nonce() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

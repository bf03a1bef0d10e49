package messages

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// SQS is the part of the SQS client a Sender uses.
type SQS interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// Queues are the queue URLs a sender may use; a function gets only those
// it feeds (an empty URL is a wiring error reported on send).
type Queues struct {
	BlockEvents    string
	CompactionJobs string
	CleanerEvents  string
	BlockOps       string
}

// MaxBodyBytes is SQS's limit on a message body (256 KiB). Senders keep
// far below it (a DELETE_STRAY op names at most MaxStrayPerOp versions);
// a body over it fails the send instead of being cut.
const MaxBodyBytes = 256 * 1024

// Sender sends messages with their FIFO group and dedup ids.
type Sender struct {
	SQS    SQS
	Queues Queues
}

// Job sends a compaction job; its FIFO group is the output block key and
// its dedup id names the version, partition and resend count.
func (s Sender) Job(ctx context.Context, j Job) error {
	return s.send(ctx, s.Queues.CompactionJobs, j, j.Tenant+"/"+j.Output,
		fmt.Sprintf("job.%s.%s.v%d.p%d.r%d", j.Tenant, j.Group, j.Version, j.Partition, j.Resend))
}

// Cleaner sends a cleaner note; its FIFO group is tenant/group.
func (s Sender) Cleaner(ctx context.Context, c CleanerNote) error {
	return s.send(ctx, s.Queues.CleanerEvents, c, c.Tenant+"/"+c.Group,
		fmt.Sprintf("cl.%s.%s.v%d.%s.%s", c.Tenant, c.Group, c.Version, c.Why, c.Nonce))
}

// Op sends a block op; its FIFO group is the block key, so every op of one
// key runs in order (the Neon lesson), and its dedup id names op and gen.
func (s Sender) Op(ctx context.Context, o BlockOp) error {
	return s.send(ctx, s.Queues.BlockOps, o, o.Tenant+"/"+o.Block,
		fmt.Sprintf("op.%s.%s.%s.g%d.%s", o.Op, o.Tenant, o.Block, o.Gen, o.Nonce))
}

// IndexGroup is the FIFO group of a tenant's bucket index writes: one
// writer at a time, in order.
func IndexGroup(tenant string) string { return tenant + "/bucket-index.json.gz" }

// Index sends a bucket index request to the block-ops queue, in the
// tenant's index group; dedup names the occasion (a version, a pass), so
// a re-drive of the same one is dropped.
func (s Sender) Index(ctx context.Context, r IndexRequest, dedup string) error {
	return s.send(ctx, s.Queues.BlockOps, r, IndexGroup(r.Tenant), "index."+r.Tenant+"."+dedup)
}

// Plan sends a plan request to the planner's (standard) queue.
func (s Sender) Plan(ctx context.Context, p PlanRequest) error {
	return s.send(ctx, s.Queues.BlockEvents, p, "", "")
}

// Retry sends a retry request to the planner's (standard) queue.
func (s Sender) Retry(ctx context.Context, r RetryRequest) error {
	return s.send(ctx, s.Queues.BlockEvents, r, "", "")
}

func (s Sender) send(ctx context.Context, url string, m any, group, dedup string) error {
	if url == "" {
		return fmt.Errorf("send %T: queue URL not configured", m)
	}
	body, err := Encode(m)
	if err != nil {
		return err
	}
	if len(body) > MaxBodyBytes {
		return fmt.Errorf("send %T: body of %d bytes exceeds SQS's %d", m, len(body), MaxBodyBytes)
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}
	if group != "" {
		in.MessageGroupId = aws.String(groupID(group))
		in.MessageDeduplicationId = aws.String(dedupID(dedup))
	}
	if _, err := s.SQS.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("send %T to %s: %w", m, url, err)
	}
	return nil
}

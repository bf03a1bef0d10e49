package messages

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SQS is the part of the SQS client a Sender uses.
type SQS interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// BatchSQS is an SQS client that also sends up to ten messages in one
// request. A Sender whose client is one sends several messages for one
// queue that way (the SDK's client is; a client that is not sends them one
// by one, in the same order).
type BatchSQS interface {
	SQS
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// Batch limits of SendMessageBatch.
const (
	MaxBatchEntries = 10
	MaxBatchBytes   = MaxBodyBytes
)

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
func (s Sender) Job(ctx context.Context, j Job) error { return s.Jobs(ctx, []Job{j}) }

// Cleaner sends a cleaner note; its FIFO group is tenant/group.
func (s Sender) Cleaner(ctx context.Context, c CleanerNote) error {
	return s.send(ctx, s.Queues.CleanerEvents, c, c.Tenant+"/"+c.Group,
		fmt.Sprintf("cl.%s.%s.v%d.%s.%s", c.Tenant, c.Group, c.Version, c.Why, c.Nonce))
}

// Op sends a block op; its FIFO group is the block key, so every op of one
// key runs in order (the Neon lesson), and its dedup id names op and gen.
func (s Sender) Op(ctx context.Context, o BlockOp) error { return s.Ops(ctx, []BlockOp{o}) }

// Ops sends block ops in order, batched (an op's order within its block
// key's FIFO group is kept within a batch as between batches).
func (s Sender) Ops(ctx context.Context, ops []BlockOp) error {
	out := make([]outgoing, len(ops))
	for i, o := range ops {
		out[i] = outgoing{o, o.Tenant + "/" + o.Block, fmt.Sprintf("op.%s.%s.%s.g%d.%s", o.Op, o.Tenant, o.Block, o.Gen, o.Nonce)}
	}
	return s.sendAll(ctx, s.Queues.BlockOps, out)
}

// Jobs sends compaction jobs, batched.
func (s Sender) Jobs(ctx context.Context, jobs []Job) error {
	out := make([]outgoing, len(jobs))
	for i, j := range jobs {
		out[i] = outgoing{j, j.Tenant + "/" + j.Output, fmt.Sprintf("job.%s.%s.v%d.p%d.r%d", j.Tenant, j.Group, j.Version, j.Partition, j.Resend)}
	}
	return s.sendAll(ctx, s.Queues.CompactionJobs, out)
}

// Plans sends plan requests, batched.
func (s Sender) Plans(ctx context.Context, ps []PlanRequest) error {
	out := make([]outgoing, len(ps))
	for i, p := range ps {
		out[i] = outgoing{m: p}
	}
	return s.sendAll(ctx, s.Queues.BlockEvents, out)
}

// IndexGroup is the FIFO group of a tenant's bucket index writes: one
// writer at a time, in order.
func IndexGroup(tenant string) string { return tenant + "/bucket-index.json.gz" }

// Index sends a bucket index request to the block-ops queue, in the
// tenant's index group; dedup names the occasion (a version, a pass), so
// a re-drive of the same one is dropped.
func (s Sender) Index(ctx context.Context, r IndexRequest, dedup string) error {
	return s.Indexes(ctx, []IndexRequest{r}, dedup)
}

// Indexes sends several tenants' bucket index requests, batched, each as
// Index does.
func (s Sender) Indexes(ctx context.Context, rs []IndexRequest, dedup string) error {
	out := make([]outgoing, len(rs))
	for i, r := range rs {
		out[i] = outgoing{r, IndexGroup(r.Tenant), "index." + r.Tenant + "." + dedup}
	}
	return s.sendAll(ctx, s.Queues.BlockOps, out)
}

// Plan sends a plan request to the planner's (standard) queue.
func (s Sender) Plan(ctx context.Context, p PlanRequest) error { return s.Plans(ctx, []PlanRequest{p}) }

// Retry sends a retry request to the planner's (standard) queue.
func (s Sender) Retry(ctx context.Context, r RetryRequest) error {
	return s.send(ctx, s.Queues.BlockEvents, r, "", "")
}

// outgoing is one message of a batch: group and dedup ids are "" on a
// standard queue.
type outgoing struct {
	m            any
	group, dedup string
}

// sendAll sends msgs to url in order: with SendMessageBatch, ten at a time
// and at most MaxBatchBytes a request, when the client can; one by one
// otherwise. A batch with a failed entry fails the whole send, naming the
// entry: its caller's work is retried, and the entries that went out are
// sent again (deduplicated on a FIFO queue, harmless on the standard one).
func (s Sender) sendAll(ctx context.Context, url string, msgs []outgoing) error {
	b, batching := s.SQS.(BatchSQS)
	if !batching || len(msgs) == 1 {
		for _, o := range msgs {
			if err := s.send(ctx, url, o.m, o.group, o.dedup); err != nil {
				return err
			}
		}
		return nil
	}
	if url == "" {
		return fmt.Errorf("send %d messages: queue URL not configured", len(msgs))
	}
	var (
		entries []types.SendMessageBatchRequestEntry
		size    int
		groups  = map[string]bool{}
	)
	flush := func() error {
		if len(entries) == 0 {
			return nil
		}
		out, err := b.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		n := len(entries)
		entries, size, groups = nil, 0, map[string]bool{}
		if err != nil {
			return fmt.Errorf("send %d messages to %s: %w", n, url, err)
		}
		if len(out.Failed) > 0 {
			f := out.Failed[0]
			return fmt.Errorf("send %d messages to %s: %d failed, the first (entry %s): %s: %s", n, url, len(out.Failed),
				aws.ToString(f.Id), aws.ToString(f.Code), aws.ToString(f.Message))
		}
		return nil
	}
	for i, o := range msgs {
		body, err := Encode(o.m)
		if err != nil {
			return err
		}
		if len(body) > MaxBodyBytes {
			return fmt.Errorf("send %T: body of %d bytes exceeds SQS's %d", o.m, len(body), MaxBodyBytes)
		}
		// A batch holds one message of a FIFO group at most: one that
		// partly fails and is sent again cannot overtake its group's order.
		if len(entries) == MaxBatchEntries || size+len(body) > MaxBatchBytes || (o.group != "" && groups[o.group]) {
			if err := flush(); err != nil {
				return err
			}
		}
		groups[o.group] = o.group != ""
		e := types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(body)}
		if o.group != "" {
			e.MessageGroupId = aws.String(groupID(o.group))
			e.MessageDeduplicationId = aws.String(dedupID(o.dedup))
		}
		entries = append(entries, e)
		size += len(body)
	}
	return flush()
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

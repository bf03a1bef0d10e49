package e2e

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/spec"
	"github.com/sluice-dev/sluice/shared/stream"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// A batch of uploads into one range is planned once, after every block of
// the batch is registered: one version over all six blocks, one Query of
// the range's members, where planning per message made six (five of them
// to find the range not covered yet). When that one planning fails, every
// message that asked for it is handed back to SQS, and the redelivered
// batch (each block recognised as registered) plans the group.
func TestABatchPlansItsRangeOnce(t *testing.T) {
	t.Parallel()
	var failCreate atomic.Int32
	hook := func(_ context.Context, step pipeline.Step, _ string) error {
		if step == "planner.before-create" && failCreate.Add(-1) >= 0 {
			return errors.New("injected: the planner's invocation fails before creating the version")
		}
		return nil
	}
	w := testworld.New(t, testworld.Options{Pipeline: localrun.Options{Hook: hook}})
	ctx := context.Background()
	halfDay(ctx, w, "acme", 3)
	batch := receiveBlockEvents(t, w, 6)
	planner := pipeline.Planner{Deps: w.Pipeline.Deps}
	g := planning.GroupKey{Stream: stream.Stream{}.ID(), Level: 1, RangeStart: day().UnixMilli()}

	failCreate.Store(1)
	resp, err := planner.Handle(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, f := range resp.BatchItemFailures {
		failed = append(failed, f.ItemIdentifier)
	}
	var all []string
	for _, m := range batch.Records {
		all = append(all, m.MessageId)
	}
	slices.Sort(failed)
	slices.Sort(all)
	if !slices.Equal(failed, all) {
		t.Fatalf("a failed planning handed back messages %v; want every message that asked for it: %v", failed, all)
	}
	live := 0
	for _, b := range w.Blocks(ctx, "acme") {
		if b.State == protocol.BlockLive {
			live++
		}
	}
	if _, ok, err := w.Store.GetGroup(ctx, "acme", g); err != nil || ok || live != 6 {
		t.Fatalf("after the failed planning: group exists %v (%v), %d blocks LIVE; want no group and 6 blocks registered LIVE", ok, err, live)
	}

	queries := w.Requests.Get("DynamoDB Query")
	resp, err = planner.Handle(ctx, batch)
	if err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("redelivered batch: %v, failures %v", err, resp.BatchItemFailures)
	}
	if n := w.Requests.Get("DynamoDB Query") - queries; n != 1 {
		t.Errorf("the batch queried %d times; want once, for the range's members", n)
	}
	head, ok, err := w.Store.GetGroup(ctx, "acme", g)
	if err != nil || !ok || head.Version != 1 || head.State != protocol.GroupPlanned || len(head.Sources) != 6 {
		t.Fatalf("group after the batch: version %d %s, %d sources (%v, %v); want version 1 PLANNED over the 6 blocks", head.Version, head.State, len(head.Sources), ok, err)
	}
	deleteMessages(t, w, batch)
	settle(t, w, "acme")
	if head, _, err = w.Store.GetGroup(ctx, "acme", g); err != nil || head.Version != 1 || head.State != protocol.GroupRetired {
		t.Fatalf("group after settling: version %d %s (%v); want version 1 RETIRED", head.Version, head.State, err)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// A batch planning both a range and big blocks of it that are due to be
// split plans the splits first: a cleaner's re-plan of the range, in the
// same batch as the uploads (and ahead of them), would otherwise take the
// blocks whole into the range's version, and every one of its jobs would
// read them whole. Each block is claimed by its own split; the range waits
// for the partitions, and the pipeline then settles with nothing lost.
func TestABatchSplitsBeforeItsRange(t *testing.T) {
	t.Parallel()
	w := testworld.New(t, testworld.Options{Configure: func(c *config.Config) {
		c.Policy.Ranges = []time.Duration{12 * time.Hour}
		c.Policy.MaxSeriesPerPartition = 20
		c.Policy.SplitBytes = 1
	}})
	ctx := context.Background()
	halfDay(ctx, w, "acme", 82)
	uploads := receiveBlockEvents(t, w, 6)
	g := planning.GroupKey{Stream: stream.Stream{}.ID(), Level: 1, RangeStart: day().UnixMilli()}
	body, err := messages.Encode(messages.PlanRequest{Tenant: "acme", Group: g.String(), Why: "a cleaner's re-plan"})
	if err != nil {
		t.Fatal(err)
	}
	batch := events.SQSEvent{Records: append([]events.SQSMessage{{MessageId: "plan-request", Body: body, EventSource: "aws:sqs"}}, uploads.Records...)}
	resp, err := pipeline.Planner{Deps: w.Pipeline.Deps}.Handle(ctx, batch)
	if err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("batch: %v, failures %v", err, resp.BatchItemFailures)
	}
	deleteMessages(t, w, uploads)
	if head, ok, err := w.Store.GetGroup(ctx, "acme", g); err != nil || (ok && head.Version > 0) {
		t.Fatalf("the range planned version %d (%s, %d sources) before its blocks were split (%v)", head.Version, head.State, len(head.Sources), err)
	}
	for _, b := range w.Blocks(ctx, "acme") {
		ref, err := protocol.ParseVersionRef(b.ClaimedBy)
		if b.State != protocol.BlockClaimed || err != nil || !ref.Group.IsSplit() || ref.Group.Block != b.ID {
			t.Errorf("upload %s is %s claimed by %q; want CLAIMED by its own split", b.ID, b.State, b.ClaimedBy)
		}
	}
	settle(t, w, "acme")
	if head, _, err := w.Store.GetGroup(ctx, "acme", g); err != nil || head.State != protocol.GroupRetired {
		t.Fatalf("range after settling: version %d %s (%v); want RETIRED", head.Version, head.State, err)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// receiveBlockEvents takes n messages off the block-events queue and hands
// them back as the event source would give them to the planner: one batch.
func receiveBlockEvents(t *testing.T, w *testworld.World, n int) events.SQSEvent {
	t.Helper()
	var ev events.SQSEvent
	url := w.Env.Deployment.QueueURLs[spec.BlockEvents]
	for deadline := time.Now().Add(time.Minute); len(ev.Records) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d block events in a minute", len(ev.Records), n)
		}
		out, err := w.Env.Clients.SQS.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: int32(n - len(ev.Records)),
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			ev.Records = append(ev.Records, events.SQSMessage{
				MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
				Body: aws.ToString(m.Body), Attributes: m.Attributes, EventSource: "aws:sqs",
			})
		}
	}
	return ev
}

// deleteMessages deletes a batch handled in full, as the event source does.
func deleteMessages(t *testing.T, w *testworld.World, ev events.SQSEvent) {
	t.Helper()
	for _, m := range ev.Records {
		if _, err := w.Env.Clients.SQS.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{
			QueueUrl: aws.String(w.Env.Deployment.QueueURLs[spec.BlockEvents]), ReceiptHandle: aws.String(m.ReceiptHandle),
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// A redelivered deletion mark of another tool asks for its range to be
// planned again. The first delivery honours the mark (the block RETIRING)
// and asks for the range, whose planning fails: SQS hands the message
// back. The redelivery finds the mark honoured already; it must still ask,
// or nothing plans the range until its next event (before, it asked
// nothing, and the five other blocks waited LIVE). So too when the block
// is deleted before the redelivery: a mark older than the deletion delay
// is due at once, and the sweep's deletion plans nothing.
func TestARedeliveredMarkPlansAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// markAge: how old the other tool's mark is when it lands.
		markAge time.Duration
		// swept: the sweep deletes the block between the two deliveries.
		swept bool
	}{
		{name: "retiring"},
		{name: "deleted before its redelivery", markAge: time.Hour, swept: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			redeliveredMarkPlansAgain(t, tc.markAge, tc.swept)
		})
	}
}

func redeliveredMarkPlansAgain(t *testing.T, markAge time.Duration, swept bool) {
	var failCreate atomic.Int32
	hook := func(_ context.Context, step pipeline.Step, _ string) error {
		if step == "planner.before-create" && failCreate.Add(-1) >= 0 {
			return errors.New("injected: the planner's invocation fails before creating the version")
		}
		return nil
	}
	// The range, its marked block gone, is planned at once with a gap.
	w := testworld.New(t, testworld.Options{Pipeline: localrun.Options{Hook: hook},
		Configure: func(c *config.Config) { c.Policy.CloseDelay = time.Millisecond }})
	ctx := context.Background()
	blocks := halfDay(ctx, w, "acme", 5)
	uploads := receiveBlockEvents(t, w, 6)
	planner := pipeline.Planner{Deps: w.Pipeline.Deps}
	g := planning.GroupKey{Stream: stream.Stream{}.ID(), Level: 1, RangeStart: day().UnixMilli()}
	failCreate.Store(1)
	if resp, err := planner.Handle(ctx, uploads); err != nil || len(resp.BatchItemFailures) != 6 {
		t.Fatalf("uploads' batch: %v, %d failures; want all 6 handed back", err, len(resp.BatchItemFailures))
	}

	marked := blocks[1].Meta.ULID.String()
	putMark(t, w, "acme", marked, blockkey.DeletionMarkFile, time.Now().Add(-markAge))
	mark := receiveBlockEvents(t, w, 1)
	failCreate.Store(1)
	resp, err := planner.Handle(ctx, mark)
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("mark's first delivery: %v, failures %v; want the message handed back", err, resp.BatchItemFailures)
	}
	if b, _, err := w.Store.GetBlock(ctx, "acme", marked); err != nil || b.State != protocol.BlockRetiring || !b.NoCompact {
		t.Fatalf("marked block after the first delivery: %s noCompact %v (%v); want the mark honoured, RETIRING", b.State, b.NoCompact, err)
	}
	if _, ok, err := w.Store.GetGroup(ctx, "acme", g); err != nil || ok {
		t.Fatalf("the range has a group after the failed planning (%v)", err)
	}
	if swept {
		if err := (pipeline.Cleaner{Deps: w.Pipeline.Deps}).Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		if b, _, err := w.Store.GetBlock(ctx, "acme", marked); err != nil || b.State != protocol.BlockDeleted {
			t.Fatalf("marked block after the sweep: %s (%v); want DELETED, its mark older than the deletion delay", b.State, err)
		}
		if _, ok, err := w.Store.GetGroup(ctx, "acme", g); err != nil || ok {
			t.Fatalf("the sweep planned the range (%v); this case wants only the redelivery to", err)
		}
	}

	if resp, err := planner.Handle(ctx, mark); err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("mark's redelivery: %v, failures %v", err, resp.BatchItemFailures)
	}
	head, ok, err := w.Store.GetGroup(ctx, "acme", g)
	if err != nil || !ok || head.Version != 1 || len(head.Sources) != 5 || slices.Contains(head.Sources, marked) {
		t.Fatalf("range after the mark's redelivery: version %d %s over %v (%v, %v); want version 1 over the 5 unmarked blocks",
			head.Version, head.State, head.Sources, ok, err)
	}

	if resp, err := planner.Handle(ctx, uploads); err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("uploads' redelivery: %v, failures %v", err, resp.BatchItemFailures)
	}
	deleteMessages(t, w, mark)
	deleteMessages(t, w, uploads)
	dropUpload(w, "acme", blocks[1])
	settleUntil(t, w, func(ctx context.Context) (bool, error) {
		b, _, err := w.Store.GetBlock(ctx, "acme", marked)
		return b.State == protocol.BlockDeleted, err
	}, "acme")
	if head, _, err = w.Store.GetGroup(ctx, "acme", g); err != nil || head.Version != 1 || head.State != protocol.GroupRetired {
		t.Fatalf("range after settling: version %d %s (%v); want version 1 RETIRED", head.Version, head.State, err)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

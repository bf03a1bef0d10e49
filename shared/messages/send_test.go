package messages

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// batchSQS records what it is sent; it fails the entries whose body
// contains fail.
type batchSQS struct {
	singles int
	batches [][]types.SendMessageBatchRequestEntry
	fail    string
}

func (b *batchSQS) SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	b.singles++
	return &sqs.SendMessageOutput{}, nil
}

func (b *batchSQS) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	b.batches = append(b.batches, in.Entries)
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		if b.fail != "" && strings.Contains(aws.ToString(e.MessageBody), b.fail) {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), Message: aws.String("boom")})
			continue
		}
		out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

// Ops go ten to a request, in order, with one message of a FIFO group per
// batch at most; one op goes alone; a failed entry fails the send.
func TestSendOpsInBatches(t *testing.T) {
	b := &batchSQS{}
	s := Sender{SQS: b, Queues: Queues{BlockOps: "ops.fifo"}}
	var ops []BlockOp
	for i := range 23 {
		ops = append(ops, BlockOp{Op: OpMark, Tenant: "acme", Block: fmt.Sprintf("01HK3QGM00JS67MS0A0DFMS%03d", i), Gen: 2})
	}
	// A second op of block 4: it must not share a batch with the first.
	ops = append(ops[:5], append([]BlockOp{{Op: OpDelete, Tenant: "acme", Block: ops[4].Block, Gen: 3}}, ops[5:]...)...)
	if err := s.Ops(context.Background(), ops); err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, batch := range b.batches {
		if len(batch) > MaxBatchEntries {
			t.Errorf("batch %d holds %d messages", i, len(batch))
		}
		groups := map[string]bool{}
		for _, e := range batch {
			g := aws.ToString(e.MessageGroupId)
			if groups[g] {
				t.Errorf("batch %d holds two messages of group %s", i, g)
			}
			groups[g] = true
			got = append(got, aws.ToString(e.MessageDeduplicationId))
		}
	}
	if len(got) != len(ops) || b.singles != 0 || len(b.batches) != 3 {
		t.Fatalf("%d messages in %d batches and %d single sends; want %d in 3 batches (5, 10, 9)", len(got), len(b.batches), b.singles, len(ops))
	}
	for i, o := range ops {
		if want := fmt.Sprintf("op.%s.%s.%s.g%d.", o.Op, o.Tenant, o.Block, o.Gen); got[i] != want {
			t.Fatalf("message %d is %s, want %s: the order changed", i, got[i], want)
		}
	}
	if err := s.Op(context.Background(), ops[0]); err != nil || b.singles != 1 {
		t.Fatalf("one op: %v, %d single sends; want it sent alone", err, b.singles)
	}
	b.fail = ops[7].Block
	if err := s.Ops(context.Background(), ops); err == nil || !strings.Contains(err.Error(), "InternalError") {
		t.Fatalf("a failed entry: %v; want the send to fail naming it", err)
	}
}

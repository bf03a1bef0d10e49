package awslimits

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

type okSQS struct{ sent int }

func (o *okSQS) SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	o.sent++
	return &sqs.SendMessageOutput{}, nil
}

func TestSQSLimits(t *testing.T) {
	inner := &okSQS{}
	refused := &Refusals{}
	s := SQS{SQSSender: inner, Refused: refused}
	for _, tc := range []struct {
		name string
		in   *sqs.SendMessageInput
		ok   bool
	}{
		{"fits", &sqs.SendMessageInput{MessageBody: aws.String("x"), MessageGroupId: aws.String(strings.Repeat("g", 128))}, true},
		{"group id of 129", &sqs.SendMessageInput{MessageBody: aws.String("x"), MessageGroupId: aws.String(strings.Repeat("g", 129))}, false},
		{"dedup id of 129", &sqs.SendMessageInput{MessageBody: aws.String("x"), MessageDeduplicationId: aws.String(strings.Repeat("d", 129))}, false},
		{"body of 256 KiB", &sqs.SendMessageInput{MessageBody: aws.String(strings.Repeat("b", 256*1024))}, true},
		{"body of 256 KiB + 1", &sqs.SendMessageInput{MessageBody: aws.String(strings.Repeat("b", 256*1024+1))}, false},
	} {
		_, err := s.SendMessage(context.Background(), tc.in)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrLimit)) {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if inner.sent != 2 || refused.N() != 3 {
		t.Errorf("sent %d, refused %d; want 2 and 3", inner.sent, refused.N())
	}
}

func TestItemSizeAndTransactions(t *testing.T) {
	big := map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "p"}, "meta": &types.AttributeValueMemberS{Value: strings.Repeat("m", MaxItemBytes)}}
	if err := CheckPut(big); !errors.Is(err, ErrLimit) {
		t.Errorf("a %d-byte item passed", ItemSize(big))
	}
	small := map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "p"}, "n": &types.AttributeValueMemberN{Value: "12345"},
		"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberBOOL{Value: true}}}}
	if got, want := ItemSize(small), (2+1)+(1+4)+(1+3+1+1); got != want {
		t.Errorf("ItemSize = %d, want %d", got, want)
	}
	var items []types.TransactWriteItem
	for range 101 {
		items = append(items, types.TransactWriteItem{Put: &types.Put{Item: small}})
	}
	if err := CheckTransaction(items); !errors.Is(err, ErrLimit) {
		t.Error("a transaction of 101 items passed")
	}
	if err := CheckTransaction(items[:100]); err != nil {
		t.Errorf("a transaction of 100 small items: %v", err)
	}
	var heavy []types.TransactWriteItem
	half := map[string]types.AttributeValue{"meta": &types.AttributeValueMemberS{Value: strings.Repeat("m", 350*1024)}}
	for range 12 {
		heavy = append(heavy, types.TransactWriteItem{Put: &types.Put{Item: half}})
	}
	if err := CheckTransaction(heavy); !errors.Is(err, ErrLimit) {
		t.Error("a transaction of 4.2 MB passed")
	}
	d := DynamoDB{Refused: &Refusals{}}
	if _, err := d.PutItem(context.Background(), &dynamodb.PutItemInput{Item: big}); !errors.Is(err, ErrLimit) || d.Refused.N() != 1 {
		t.Errorf("PutItem of a big item: %v", err)
	}
}

// failingSQS fails its second SendMessage.
type failingSQS struct{ okSQS }

func (f *failingSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if f.sent == 1 {
		f.sent++
		return nil, errors.New("connection reset")
	}
	return f.okSQS.SendMessage(ctx, in, o...)
}

func entries(n, body int) []sqstypes.SendMessageBatchRequestEntry {
	var out []sqstypes.SendMessageBatchRequestEntry
	for i := range n {
		out = append(out, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(strings.Repeat("b", body))})
	}
	return out
}

// A batch is held to SQS's limits (ten entries, 256 KiB in all, each
// entry as a single message); beneath a client that cannot batch it is
// sent entry by entry, and nothing after a failed entry goes out.
func TestSQSBatchLimits(t *testing.T) {
	refused := &Refusals{}
	inner := &okSQS{}
	s := SQS{SQSSender: inner, Refused: refused}
	for _, tc := range []struct {
		name string
		in   []sqstypes.SendMessageBatchRequestEntry
		ok   bool
	}{
		{"ten", entries(10, 100), true},
		{"eleven", entries(11, 100), false},
		{"none", nil, false},
		{"256 KiB in all", entries(4, 64*1024), true},
		{"over 256 KiB in all", entries(5, 64*1024), false},
		{"a group id of 129", append(entries(1, 1), sqstypes.SendMessageBatchRequestEntry{Id: aws.String("g"), MessageBody: aws.String("x"), MessageGroupId: aws.String(strings.Repeat("g", 129))}), false},
	} {
		out, err := s.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String("q"), Entries: tc.in})
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrLimit)) {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err == nil && (len(out.Successful) != len(tc.in) || len(out.Failed) != 0) {
			t.Errorf("%s: %d sent, %d failed; want all %d sent", tc.name, len(out.Successful), len(out.Failed), len(tc.in))
		}
	}
	if inner.sent != 14 || refused.N() != 4 {
		t.Errorf("sent %d one by one, refused %d batches; want 14 and 4", inner.sent, refused.N())
	}
	f := &failingSQS{}
	out, err := SendBatch(context.Background(), f, &sqs.SendMessageBatchInput{QueueUrl: aws.String("q"), Entries: entries(4, 1)})
	if err != nil || len(out.Successful) != 1 || len(out.Failed) != 3 || f.sent != 2 {
		t.Errorf("the second of 4 failing: %d sent, %d failed, %d tried (%v); want 1 sent, the rest failed, 2 tried", len(out.Successful), len(out.Failed), f.sent, err)
	}
}

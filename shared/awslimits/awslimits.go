// Package awslimits enforces, in front of the emulator, the AWS limits
// that moto and LocalStack do not: an SQS message's group and
// deduplication ids of at most 128 characters and its body of at most
// 256 KiB; a DynamoDB item of at most 400 KB, a transaction of at most 100
// items and 4 MB. Tests, the chaos run and `sluice run` put these wrappers
// between the pipeline and the emulator, so a write that AWS would refuse
// fails there too, with the limit it broke.
package awslimits

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// The limits, as AWS documents them.
const (
	MaxGroupIDLength = 128
	MaxDedupIDLength = 128
	MaxBodyBytes     = 256 * 1024
	MaxBatchEntries  = 10
	// MaxBatchWriteItems is BatchWriteItem's limit.
	MaxBatchWriteItems = 25
	MaxItemBytes       = 400 * 1024
	MaxTransactItems   = 100
	MaxTransactBytes   = 4 * 1024 * 1024
	maxNumberEncoding  = 21 // DynamoDB stores a number in at most 21 bytes
)

// ErrLimit is wrapped by every refusal.
var ErrLimit = errors.New("AWS limit exceeded")

// Refusals counts what the wrappers refused, for tests to assert on.
type Refusals struct{ n atomic.Int64 }

// N is how many requests were refused.
func (r *Refusals) N() int64 {
	if r == nil {
		return 0
	}
	return r.n.Load()
}

func (r *Refusals) refuse(format string, args ...any) error {
	if r != nil {
		r.n.Add(1)
	}
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrLimit)
}

// SQSSender is the part of an SQS client that sends.
type SQSSender interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// SQS checks every message sent through it.
type SQS struct {
	SQSSender
	Refused *Refusals
}

// SendMessage refuses a message SQS would refuse, else sends it.
func (s SQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if g := deref(in.MessageGroupId); len(g) > MaxGroupIDLength {
		return nil, s.Refused.refuse("SQS: MessageGroupId of %d characters (at most %d): %.40q…", len(g), MaxGroupIDLength, g)
	}
	if d := deref(in.MessageDeduplicationId); len(d) > MaxDedupIDLength {
		return nil, s.Refused.refuse("SQS: MessageDeduplicationId of %d characters (at most %d)", len(d), MaxDedupIDLength)
	}
	if b := deref(in.MessageBody); len(b) > MaxBodyBytes {
		return nil, s.Refused.refuse("SQS: message body of %d bytes (at most %d)", len(b), MaxBodyBytes)
	}
	return s.SQSSender.SendMessage(ctx, in, opts...)
}

// SendMessageBatch refuses a batch SQS would refuse (more than ten
// entries, more than 256 KiB in all, an entry SendMessage would refuse),
// else sends it: as one batch when the client beneath can, else entry by
// entry.
func (s SQS) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	if len(in.Entries) == 0 || len(in.Entries) > MaxBatchEntries {
		return nil, s.Refused.refuse("SQS: a batch of %d messages (1 to %d)", len(in.Entries), MaxBatchEntries)
	}
	total := 0
	for _, e := range in.Entries {
		if g := deref(e.MessageGroupId); len(g) > MaxGroupIDLength {
			return nil, s.Refused.refuse("SQS: MessageGroupId of %d characters (at most %d): %.40q…", len(g), MaxGroupIDLength, g)
		}
		if d := deref(e.MessageDeduplicationId); len(d) > MaxDedupIDLength {
			return nil, s.Refused.refuse("SQS: MessageDeduplicationId of %d characters (at most %d)", len(d), MaxDedupIDLength)
		}
		total += len(deref(e.MessageBody))
	}
	if total > MaxBodyBytes {
		return nil, s.Refused.refuse("SQS: a batch of %d bytes (at most %d)", total, MaxBodyBytes)
	}
	return SendBatch(ctx, s.SQSSender, in, opts...)
}

// SendBatch sends in through c: as one SendMessageBatch when c can, else
// each entry with SendMessage, in order, up to the first that fails; the
// failed one and the rest are reported as the batch API reports failures.
func SendBatch(ctx context.Context, c SQSSender, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	if b, ok := c.(interface {
		SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	}); ok {
		return b.SendMessageBatch(ctx, in, opts...)
	}
	out := &sqs.SendMessageBatchOutput{}
	var failed error
	for _, e := range in.Entries {
		if failed != nil {
			// What follows a failed entry is not sent: its group's order holds.
			out.Failed = append(out.Failed, sqstypes.BatchResultErrorEntry{Id: e.Id, Code: aws.String("NotSent"), Message: aws.String("an earlier entry failed: " + failed.Error())})
			continue
		}
		res, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: in.QueueUrl, MessageBody: e.MessageBody,
			MessageGroupId: e.MessageGroupId, MessageDeduplicationId: e.MessageDeduplicationId, DelaySeconds: e.DelaySeconds,
			MessageAttributes: e.MessageAttributes})
		if err != nil {
			failed = err
			out.Failed = append(out.Failed, sqstypes.BatchResultErrorEntry{Id: e.Id, Code: aws.String("SendMessage"), Message: aws.String(err.Error()), SenderFault: true})
			continue
		}
		out.Successful = append(out.Successful, sqstypes.SendMessageBatchResultEntry{Id: e.Id, MessageId: res.MessageId, MD5OfMessageBody: res.MD5OfMessageBody})
	}
	return out, nil
}

// DynamoDBWriter is the part of a DynamoDB client that writes.
type DynamoDBWriter interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// CheckPut reports an item DynamoDB would refuse.
func CheckPut(item map[string]types.AttributeValue) error {
	if n := ItemSize(item); n > MaxItemBytes {
		return fmt.Errorf("DynamoDB: item of %d bytes (at most %d): %w", n, MaxItemBytes, ErrLimit)
	}
	return nil
}

// CheckTransaction reports a transaction DynamoDB would refuse: too many
// items, too many bytes, or an item put that is too large. (An update's
// result size is not known before it runs; updates here write small
// attributes.)
func CheckTransaction(items []types.TransactWriteItem) error {
	if len(items) > MaxTransactItems {
		return fmt.Errorf("DynamoDB: transaction of %d items (at most %d): %w", len(items), MaxTransactItems, ErrLimit)
	}
	total := 0
	for _, it := range items {
		switch {
		case it.Put != nil:
			if err := CheckPut(it.Put.Item); err != nil {
				return err
			}
			total += ItemSize(it.Put.Item)
		case it.Update != nil:
			total += ItemSize(it.Update.Key) + ItemSize(it.Update.ExpressionAttributeValues)
		case it.Delete != nil:
			total += ItemSize(it.Delete.Key)
		case it.ConditionCheck != nil:
			total += ItemSize(it.ConditionCheck.Key)
		}
	}
	if total > MaxTransactBytes {
		return fmt.Errorf("DynamoDB: transaction of %d bytes (at most %d): %w", total, MaxTransactBytes, ErrLimit)
	}
	return nil
}

// ItemSize is an item's size as DynamoDB counts it: attribute names plus
// values (strings and binaries by length, numbers up to 21 bytes, 3 bytes
// of overhead per list or map and 1 per element).
func ItemSize(item map[string]types.AttributeValue) int {
	n := 0
	for k, v := range item {
		n += len(k) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return len(x.Value)
	case *types.AttributeValueMemberN:
		return min(len(x.Value)/2+2, maxNumberEncoding)
	case *types.AttributeValueMemberB:
		return len(x.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		n := 0
		for _, s := range x.Value {
			n += len(s)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, s := range x.Value {
			n += min(len(s)/2+2, maxNumberEncoding)
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, b := range x.Value {
			n += len(b)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range x.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range x.Value {
			n += 1 + len(k) + valueSize(e)
		}
		return n
	}
	return 0
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// DynamoDBAPI is the DynamoDB client a records.Store uses.
type DynamoDBAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// DynamoDB checks every write made through it.
type DynamoDB struct {
	DynamoDBAPI
	Refused *Refusals
}

// BatchWriteItem refuses a batch DynamoDB would refuse (more than 25
// requests, an item over 400 KB), else writes it.
func (d DynamoDB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	n := 0
	for _, reqs := range in.RequestItems {
		for _, r := range reqs {
			n++
			if r.PutRequest != nil {
				if err := CheckPut(r.PutRequest.Item); err != nil {
					return nil, d.Refused.refuse("%v", err)
				}
			}
		}
	}
	if n == 0 || n > MaxBatchWriteItems {
		return nil, d.Refused.refuse("DynamoDB: a batch write of %d requests (1 to %d)", n, MaxBatchWriteItems)
	}
	return d.DynamoDBAPI.BatchWriteItem(ctx, in, opts...)
}

// PutItem refuses an item DynamoDB would refuse, else puts it.
func (d DynamoDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if err := CheckPut(in.Item); err != nil {
		return nil, d.Refused.refuse("%v", err)
	}
	return d.DynamoDBAPI.PutItem(ctx, in, opts...)
}

// TransactWriteItems refuses a transaction DynamoDB would refuse, else
// runs it.
func (d DynamoDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if err := CheckTransaction(in.TransactItems); err != nil {
		return nil, d.Refused.refuse("%v", err)
	}
	return d.DynamoDBAPI.TransactWriteItems(ctx, in, opts...)
}

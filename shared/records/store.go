package records

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DynamoDB is the part of the DynamoDB client the store uses.
type DynamoDB interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Store reads and transitions records in one table.
type Store struct {
	db     DynamoDB
	table  string
	logger *slog.Logger
	// conflictRetries bounds retries of transactions that failed on a
	// conflict (not on a condition) or on throttling.
	conflictRetries int
	// legacyAgendaEmpty is set once DueAll found nothing left under the
	// unsharded agenda key of earlier releases.
	legacyAgendaEmpty atomic.Bool
}

// NewStore returns a store over table.
func NewStore(db DynamoDB, table string, logger *slog.Logger) *Store {
	if logger == nil {
		logger = slog.Default()
	}
	return &Store{db: db, table: table, logger: logger, conflictRetries: 8}
}

// ConditionLostError is the expected outcome of a transition whose
// condition did not hold: another actor got there first. Current holds the
// item as it was when the condition failed, where DynamoDB returned it.
type ConditionLostError struct {
	Op      string // what was attempted, e.g. "claim acme/B#01H…"
	Item    string // PK/SK of the item whose condition failed
	Current map[string]types.AttributeValue
}

func (e *ConditionLostError) Error() string {
	s := fmt.Sprintf("%s: condition lost on %s", e.Op, e.Item)
	if st, ok := e.Current["state"].(*types.AttributeValueMemberS); ok {
		s += " (state " + st.Value
		if v, ok := e.Current["version"].(*types.AttributeValueMemberN); ok {
			s += ", version " + v.Value
		}
		if v, ok := e.Current["gen"].(*types.AttributeValueMemberN); ok {
			s += ", gen " + v.Value
		}
		s += ")"
	}
	return s
}

// IsConditionLost reports whether err is (or wraps) a lost condition.
func IsConditionLost(err error) bool {
	var c *ConditionLostError
	return errors.As(err, &c)
}

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"PK": &types.AttributeValueMemberS{Value: pk},
		"SK": &types.AttributeValueMemberS{Value: sk},
	}
}

func itemName(k map[string]types.AttributeValue) string {
	pk, _ := k["PK"].(*types.AttributeValueMemberS)
	sk, _ := k["SK"].(*types.AttributeValueMemberS)
	if pk == nil || sk == nil {
		return "?"
	}
	return pk.Value + "/" + sk.Value
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func n(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: fmt.Sprint(v)}
}

// newToken returns a fresh ClientRequestToken. One token is used per
// attempt: the SDK's own retries of that attempt (timeouts, 5xx) resend it,
// so DynamoDB applies a retried write once; a new attempt after a conflict
// gets a new token. A token derived from the write's identity would be
// wrong: two actors making the same transition with different values
// (timestamps) would get IdempotentParameterMismatch instead of a lost
// condition.
func newToken() string {
	var b [18]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// marshalItem marshals v and adds its key.
func marshalItem(v any, pk, sk string) (map[string]types.AttributeValue, error) {
	item, err := attributevalue.MarshalMap(v)
	if err != nil {
		return nil, fmt.Errorf("marshal %s/%s: %w", pk, sk, err)
	}
	item["PK"] = s(pk)
	item["SK"] = s(sk)
	return item, nil
}

// retryable reports a failure that is worth retrying as is: a transaction
// conflict (another transaction touched one of our items), throttling, or
// an idempotent transaction still in progress.
func retryable(err error) bool {
	var tc *types.TransactionCanceledException
	if errors.As(err, &tc) {
		retry := false
		for _, r := range tc.CancellationReasons {
			switch aws.ToString(r.Code) {
			case "ConditionalCheckFailed":
				return false
			case "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded":
				retry = true
			}
		}
		return retry || len(tc.CancellationReasons) == 0
	}
	var tip *types.TransactionInProgressException
	var thr *types.ProvisionedThroughputExceededException
	var lim *types.RequestLimitExceeded
	var tce *types.TransactionConflictException
	return errors.As(err, &tip) || errors.As(err, &thr) || errors.As(err, &lim) || errors.As(err, &tce)
}

// classify turns a failed condition into *ConditionLostError; items are
// the transaction's items in order, so a cancellation reason points at one.
func classify(op string, err error, items []types.TransactWriteItem) error {
	var tc *types.TransactionCanceledException
	if errors.As(err, &tc) {
		for i, r := range tc.CancellationReasons {
			if aws.ToString(r.Code) != "ConditionalCheckFailed" {
				continue
			}
			name := fmt.Sprintf("item %d", i)
			if i < len(items) {
				name = itemName(transactKey(items[i]))
			}
			return &ConditionLostError{Op: op, Item: name, Current: r.Item}
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

func transactKey(it types.TransactWriteItem) map[string]types.AttributeValue {
	switch {
	case it.Put != nil:
		return it.Put.Item
	case it.Update != nil:
		return it.Update.Key
	case it.Delete != nil:
		return it.Delete.Key
	case it.ConditionCheck != nil:
		return it.ConditionCheck.Key
	}
	return nil
}

// transact runs one transaction, retrying conflicts and throttling with
// jittered backoff; a failed condition is returned at once as
// *ConditionLostError.
func (st *Store) transact(ctx context.Context, op string, items []types.TransactWriteItem) error {
	if len(items) > maxTransactItems {
		return fmt.Errorf("%s: %d items, more than a DynamoDB transaction takes (%d)", op, len(items), maxTransactItems)
	}
	for i := range items {
		setTable(&items[i], st.table)
	}
	return st.retry(ctx, op, func() error {
		in := &dynamodb.TransactWriteItemsInput{TransactItems: items, ClientRequestToken: aws.String(newToken())}
		_, err := st.db.TransactWriteItems(ctx, in)
		if err != nil && !retryable(err) {
			return classify(op, err, items)
		}
		return err
	})
}

func setTable(it *types.TransactWriteItem, table string) {
	switch {
	case it.Put != nil:
		it.Put.TableName = aws.String(table)
		it.Put.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	case it.Update != nil:
		it.Update.TableName = aws.String(table)
		it.Update.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	case it.Delete != nil:
		it.Delete.TableName = aws.String(table)
	case it.ConditionCheck != nil:
		it.ConditionCheck.TableName = aws.String(table)
		it.ConditionCheck.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	}
}

// retry runs fn until it succeeds, fails with a non-retryable error, or
// the retry budget is spent.
func (st *Store) retry(ctx context.Context, op string, fn func() error) error {
	backoff := 20 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || !retryable(err) {
			return err
		}
		if attempt >= st.conflictRetries {
			return fmt.Errorf("%s: gave up after %d conflicts: %w", op, attempt+1, err)
		}
		st.logger.DebugContext(ctx, "retrying after conflict", "op", op, "attempt", attempt+1, "err", err)
		d := backoff + rand.N(backoff)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", op, ctx.Err())
		case <-time.After(d):
		}
		if backoff < time.Second {
			backoff *= 2
		}
	}
}

// get reads one item with a strongly consistent read.
func (st *Store) get(ctx context.Context, pk, sk string, out any) (bool, error) {
	var res *dynamodb.GetItemOutput
	err := st.retry(ctx, "get "+pk+"/"+sk, func() error {
		var err error
		res, err = st.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(st.table), Key: key(pk, sk), ConsistentRead: aws.Bool(true),
		})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("get %s/%s: %w", pk, sk, err)
	}
	if len(res.Item) == 0 {
		return false, nil
	}
	if err := attributevalue.UnmarshalMap(res.Item, out); err != nil {
		return false, fmt.Errorf("decode %s/%s: %w", pk, sk, err)
	}
	return true, nil
}

// query returns every item of pk whose SK starts with prefix (strongly
// consistent, all pages).
func (st *Store) query(ctx context.Context, pk, prefix string) ([]map[string]types.AttributeValue, error) {
	return st.queryRange(ctx, pk, prefix, "")
}

// queryRange returns items of pk with prefix ≤ SK < upTo ("" = prefix only).
func (st *Store) queryRange(ctx context.Context, pk, prefix, upTo string) ([]map[string]types.AttributeValue, error) {
	in := &dynamodb.QueryInput{
		TableName:      aws.String(st.table),
		ConsistentRead: aws.Bool(true),
	}
	switch {
	case prefix == "" && upTo == "":
		in.KeyConditionExpression = aws.String("PK = :pk")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":pk": s(pk)}
	case upTo == "":
		in.KeyConditionExpression = aws.String("PK = :pk AND begins_with(SK, :p)")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":pk": s(pk), ":p": s(prefix)}
	default:
		in.KeyConditionExpression = aws.String("PK = :pk AND SK BETWEEN :a AND :b")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":pk": s(pk), ":a": s(prefix), ":b": s(upTo)}
	}
	var out []map[string]types.AttributeValue
	for {
		var res *dynamodb.QueryOutput
		err := st.retry(ctx, "query "+pk, func() error {
			var err error
			res, err = st.db.Query(ctx, in)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("query %s/%s*: %w", pk, prefix, err)
		}
		out = append(out, res.Items...)
		if len(res.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}

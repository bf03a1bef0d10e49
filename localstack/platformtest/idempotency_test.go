package platformtest

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-dev/sluice/localstack/envtest"
)

// TestTransactionTokenIsIdempotent: a TransactWriteItems resent with its
// ClientRequestToken (the SDK retries a request whose answer it did not
// get) succeeds without applying twice, as in DynamoDB; the same token with
// another request is IdempotentParameterMismatch. moto ignores tokens;
// moto_serial.py honours them, or a retried commit whose first try landed
// would report a lost condition against its own write.
func TestTransactionTokenIsIdempotent(t *testing.T) {
	t.Parallel()
	env := envtest.New(t)
	ddb, table := env.Clients.DynamoDB, env.Deployment.Table
	ctx := t.Context()
	put := func(pk, token string) error {
		_, err := ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
			ClientRequestToken: aws.String(token),
			TransactItems: []ddbtypes.TransactWriteItem{{Put: &ddbtypes.Put{
				TableName: aws.String(table),
				Item: map[string]ddbtypes.AttributeValue{
					"PK": &ddbtypes.AttributeValueMemberS{Value: pk}, "SK": &ddbtypes.AttributeValueMemberS{Value: "x"},
				},
				ConditionExpression: aws.String("attribute_not_exists(PK)"),
			}}},
		})
		return err
	}
	// Tokens unique to this run: the emulator may outlive it (`make up`),
	// and it remembers tokens as DynamoDB does, across tables.
	token1, token2 := table+"-token-1", table+"-token-2"
	if err := put("A", token1); err != nil {
		t.Fatalf("first: %v", err)
	}
	if err := put("A", token1); err != nil {
		t.Fatalf("the same request with the same token must succeed again: %v", err)
	}
	var cancelled *ddbtypes.TransactionCanceledException
	if err := put("A", token2); !errors.As(err, &cancelled) {
		t.Fatalf("a new token must evaluate the condition again: %v", err)
	}
	var mismatch *ddbtypes.IdempotentParameterMismatchException
	if err := put("B", token1); !errors.As(err, &mismatch) {
		t.Fatalf("the token with another request: %v, want IdempotentParameterMismatch", err)
	}
}

// TestTransactionTokenIgnoresKeyOrder: the AWS SDK for Go serialises an
// item's attributes (a Go map) in map iteration order, so a retry of the
// very same TransactWriteItems can reach the emulator with its JSON keys in
// another order. DynamoDB compares requests, not bytes: the retry must
// succeed, not fail with IdempotentParameterMismatch. The requests here are
// rewritten on the wire into each order of their keys (every object's keys
// sorted, then reversed), so the test does not depend on the map order the
// SDK happened to pick.
func TestTransactionTokenIgnoresKeyOrder(t *testing.T) {
	t.Parallel()
	env := envtest.New(t)
	table := env.Deployment.Table
	ctx := t.Context()
	clientIn := func(order keyOrder) *dynamodb.Client {
		return dynamodb.New(env.Clients.DynamoDB.Options(), func(o *dynamodb.Options) {
			o.HTTPClient = &reorderingClient{next: o.HTTPClient, order: order}
			o.RetryMaxAttempts = 1
		})
	}
	in := func(token string) *dynamodb.TransactWriteItemsInput {
		return &dynamodb.TransactWriteItemsInput{
			ClientRequestToken: aws.String(token),
			TransactItems: []ddbtypes.TransactWriteItem{{Put: &ddbtypes.Put{
				TableName: aws.String(table),
				Item: map[string]ddbtypes.AttributeValue{
					"PK": &ddbtypes.AttributeValueMemberS{Value: "A"}, "SK": &ddbtypes.AttributeValueMemberS{Value: "x"},
					"a": &ddbtypes.AttributeValueMemberN{Value: "1"}, "b": &ddbtypes.AttributeValueMemberS{Value: "2"},
					"c": &ddbtypes.AttributeValueMemberM{Value: map[string]ddbtypes.AttributeValue{
						"x": &ddbtypes.AttributeValueMemberS{Value: "3"}, "y": &ddbtypes.AttributeValueMemberS{Value: "4"},
					}},
				},
				ConditionExpression: aws.String("attribute_not_exists(PK)"),
			}}},
		}
	}
	token := table + "-reordered"
	sorted, reversed := clientIn(keysSorted), clientIn(keysReversed)
	if _, err := sorted.TransactWriteItems(ctx, in(token)); err != nil {
		t.Fatalf("first: %v", err)
	}
	for i, c := range []*dynamodb.Client{reversed, sorted, reversed} {
		if _, err := c.TransactWriteItems(ctx, in(token)); err != nil {
			t.Fatalf("retry %d of the same request, keys in another order: %v", i+1, err)
		}
	}
	sent := sorted.Options().HTTPClient.(*reorderingClient).bodies
	back := reversed.Options().HTTPClient.(*reorderingClient).bodies
	if len(sent) == 0 || len(back) == 0 || sent[0] == back[0] {
		t.Fatalf("the two clients did not send differently ordered bodies:\n%s\n%s", first(sent), first(back))
	}
}

func first(ss []string) string {
	if len(ss) == 0 {
		return "(none)"
	}
	return ss[0]
}

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

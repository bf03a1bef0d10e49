package platformtest

import (
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/sluice-dev/sluice/localstack/envtest"
)

// TestCancelledTransactionChangesNothing: when one condition of a
// transaction fails, none of its writes — put, update, delete — remain,
// and items it did not name are untouched; when all hold, all apply.
// moto_serial.py replaces moto's whole-table rollback with an undo of the
// transaction's own items, so this is what proves that undo exact.
func TestCancelledTransactionChangesNothing(t *testing.T) {
	t.Parallel()
	env := envtest.New(t)
	ddb, table := env.Clients.DynamoDB, env.Deployment.Table
	ctx := t.Context()
	key := func(pk string) map[string]ddbtypes.AttributeValue {
		return map[string]ddbtypes.AttributeValue{
			"PK": &ddbtypes.AttributeValueMemberS{Value: pk},
			"SK": &ddbtypes.AttributeValueMemberS{Value: "x"},
		}
	}
	item := func(pk, v string) map[string]ddbtypes.AttributeValue {
		m := key(pk)
		m["v"] = &ddbtypes.AttributeValueMemberS{Value: v}
		return m
	}
	for _, pk := range []string{"B", "C", "other"} {
		if _, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item(pk, "1")}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(pk string) string {
		t.Helper()
		out, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key(pk), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		if out.Item == nil {
			return "absent"
		}
		return out.Item["v"].(*ddbtypes.AttributeValueMemberS).Value
	}
	tx := func(checkPK string) error {
		_, err := ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
			{Put: &ddbtypes.Put{TableName: aws.String(table), Item: item("A", "new"), ConditionExpression: aws.String("attribute_not_exists(PK)")}},
			{Update: &ddbtypes.Update{TableName: aws.String(table), Key: key("B"), UpdateExpression: aws.String("SET v = :v"),
				ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":v": &ddbtypes.AttributeValueMemberS{Value: "2"}}}},
			{Delete: &ddbtypes.Delete{TableName: aws.String(table), Key: key("C")}},
			{ConditionCheck: &ddbtypes.ConditionCheck{TableName: aws.String(table), Key: key(checkPK), ConditionExpression: aws.String("attribute_exists(PK)")}},
		}})
		return err
	}

	// The condition on D fails last, after the put, update and delete ran.
	err := tx("D")
	var cancelled *ddbtypes.TransactionCanceledException
	if !errors.As(err, &cancelled) {
		t.Fatalf("transaction with a failing condition: %v, want TransactionCanceledException", err)
	}
	for pk, want := range map[string]string{"A": "absent", "B": "1", "C": "1", "other": "1"} {
		if got := get(pk); got != want {
			t.Errorf("after the cancelled transaction %s = %s, want %s", pk, got, want)
		}
	}

	// Two operations on one item: rejected as a whole.
	_, err = ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
		{Put: &ddbtypes.Put{TableName: aws.String(table), Item: item("A", "new")}},
		{Delete: &ddbtypes.Delete{TableName: aws.String(table), Key: key("A")}},
	}})
	if err == nil {
		t.Fatal("a transaction naming one item twice succeeded")
	}
	if got := get("A"); got != "absent" {
		t.Errorf("after the rejected transaction A = %s, want absent", got)
	}

	if err := tx("other"); err != nil {
		t.Fatalf("transaction whose conditions hold: %v", err)
	}
	for pk, want := range map[string]string{"A": "new", "B": "2", "C": "absent", "other": "1"} {
		if got := get(pk); got != want {
			t.Errorf("after the committed transaction %s = %s, want %s", pk, got, want)
		}
	}
}

package memdynamo_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-dev/sluice/localstack/memaws/memdynamo"
)

// TestSnapshotRestore: a restored server holds exactly what it held at the
// snapshot — whatever was updated, added or deleted since — and a snapshot
// can be restored again after the server changed once more (nothing a
// write did reached into it).
func TestSnapshotRestore(t *testing.T) {
	srv := memdynamo.New(memdynamo.Options{})
	c := newClient(t, srv)
	ctx := t.Context()
	put := func(pk, sk string, v int) {
		t.Helper()
		if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: withAttrs(pk, sk, map[string]types.AttributeValue{"v": n(v)})}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(pk, sk string) string {
		t.Helper()
		out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key(pk, sk), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		if out.Item == nil {
			return "absent"
		}
		return out.Item["v"].(*types.AttributeValueMemberN).Value
	}
	put("a", "1", 1)
	put("a", "2", 2)
	snap := srv.Snapshot()

	change := func() {
		t.Helper()
		if _, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key("a", "1"),
			UpdateExpression: aws.String("SET v = v + :one"), ExpressionAttributeValues: map[string]types.AttributeValue{":one": n(10)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: key("a", "2")}); err != nil {
			t.Fatal(err)
		}
		put("a", "3", 3)
	}
	for round := 1; round <= 2; round++ {
		change()
		if got := [3]string{get("a", "1"), get("a", "2"), get("a", "3")}; got != [3]string{"11", "absent", "3"} {
			t.Fatalf("round %d, after the changes: %v", round, got)
		}
		srv.Restore(snap)
		if got := [3]string{get("a", "1"), get("a", "2"), get("a", "3")}; got != [3]string{"1", "2", "absent"} {
			t.Errorf("round %d, restored: %v, want the state at the snapshot", round, got)
		}
		if n := srv.ItemCount(table); n != 2 {
			t.Errorf("round %d, restored: %d items, want 2", round, n)
		}
	}
}

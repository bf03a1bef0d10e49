package memdynamo_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/sluice-dev/sluice/localstack/memaws/memdynamo"
)

// inProcess hands every request to the server without a socket.
type inProcess struct{ h http.Handler }

func (c inProcess) Do(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	c.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

const table = "records"

func newClient(t *testing.T, srv *memdynamo.Server) *dynamodb.Client {
	t.Helper()
	c := dynamodb.NewFromConfig(aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:   inProcess{srv},
		BaseEndpoint: aws.String("http://dynamodb.memaws.local"),
	}, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	_, err := c.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName: aws.String(table),
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("PK"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("SK"), KeyType: types.KeyTypeRange},
		},
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("PK"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("SK"), AttributeType: types.ScalarAttributeTypeS},
		},
		BillingMode: types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatalf("create table: %v", err)
	}
	return c
}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v int) types.AttributeValue    { return &types.AttributeValueMemberN{Value: strconv.Itoa(v)} }

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"PK": s(pk), "SK": s(sk)}
}

func withAttrs(pk, sk string, attrs map[string]types.AttributeValue) map[string]types.AttributeValue {
	it := key(pk, sk)
	for k, v := range attrs {
		it[k] = v
	}
	return it
}

func errorCode(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return ""
}

func get(t *testing.T, c *dynamodb.Client, pk, sk string) map[string]types.AttributeValue {
	t.Helper()
	out, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key(pk, sk), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("get %s/%s: %v", pk, sk, err)
	}
	return out.Item
}

// TestConditions evaluates the condition grammar the way DynamoDB does,
// against one stored item.
func TestConditions(t *testing.T) {
	srv := memdynamo.New(memdynamo.Options{})
	c := newClient(t, srv)
	ctx := context.Background()
	stored := withAttrs("g", "head", map[string]types.AttributeValue{
		"state":    s("PLANNED"),
		"version":  n(3),
		"failures": n(1),
		"tags":     &types.AttributeValueMemberSS{Value: []string{"a", "b"}},
		"doc": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"elems": &types.AttributeValueMemberL{Value: []types.AttributeValue{s("x"), n(7)}},
		}},
	})
	if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: stored}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cond   string
		names  map[string]string
		values map[string]types.AttributeValue
		want   string // "" holds, ConditionalCheckFailedException, or ValidationException
	}{
		{"version = :v AND #st = :st", map[string]string{"#st": "state"}, map[string]types.AttributeValue{":v": n(3), ":st": s("PLANNED")}, ""},
		{"version = :v AND #st = :st", map[string]string{"#st": "state"}, map[string]types.AttributeValue{":v": n(4), ":st": s("PLANNED")}, "ConditionalCheckFailedException"},
		{"version = :v", nil, map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: "3.0"}}, ""},
		{"version = :v", nil, map[string]types.AttributeValue{":v": s("3")}, "ConditionalCheckFailedException"},
		{"attribute_not_exists(failures) OR failures < :max", nil, map[string]types.AttributeValue{":max": n(2)}, ""},
		{"attribute_not_exists(failures) OR failures < :max", nil, map[string]types.AttributeValue{":max": n(1)}, "ConditionalCheckFailedException"},
		{"attribute_not_exists(nothere) AND NOT (version > :v)", nil, map[string]types.AttributeValue{":v": n(3)}, ""},
		{"nothere <> :v", nil, map[string]types.AttributeValue{":v": n(3)}, "ConditionalCheckFailedException"},
		{"version BETWEEN :a AND :b", nil, map[string]types.AttributeValue{":a": n(1), ":b": n(3)}, ""},
		{"version IN (:a, :b)", nil, map[string]types.AttributeValue{":a": n(1), ":b": n(3)}, ""},
		{"begins_with(SK, :p)", nil, map[string]types.AttributeValue{":p": s("he")}, ""},
		{"contains(tags, :t) AND size(tags) = :two", nil, map[string]types.AttributeValue{":t": s("b"), ":two": n(2)}, ""},
		{"doc.elems[1] = :seven AND attribute_type(doc.elems, :l)", nil, map[string]types.AttributeValue{":seven": n(7), ":l": s("L")}, ""},
		{"#st = :st", nil, map[string]types.AttributeValue{":st": s("x")}, "ValidationException"},                               // undefined name
		{"version = :v", nil, map[string]types.AttributeValue{":v": n(3), ":unused": n(1)}, "ValidationException"},              // unused value
		{"version = :v", map[string]string{"#st": "state"}, map[string]types.AttributeValue{":v": n(3)}, "ValidationException"}, // unused name
		{"state = :st", nil, map[string]types.AttributeValue{":st": s("PLANNED")}, "ValidationException"},                       // reserved word
		{"version = = :v", nil, map[string]types.AttributeValue{":v": n(3)}, "ValidationException"},                             // syntax
		{"version BETWEEN :b AND :a", nil, map[string]types.AttributeValue{":a": n(1), ":b": n(3)}, "ValidationException"},      // bounds reversed
		{"failures < :max OR attribute_not_exists(failures)", nil, map[string]types.AttributeValue{":max": n(9)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.cond, func(t *testing.T) {
			_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName: aws.String(table), Key: key("g", "head"),
				ConditionExpression:       aws.String(tc.cond),
				UpdateExpression:          aws.String("SET touched = :touched"),
				ExpressionAttributeNames:  tc.names,
				ExpressionAttributeValues: withValue(tc.values, ":touched", n(1)),
			})
			got := ""
			if err != nil {
				got = errorCode(err)
			}
			if got != tc.want {
				t.Fatalf("condition %q: got %q (%v), want %q", tc.cond, got, err, tc.want)
			}
		})
	}
}

func withValue(m map[string]types.AttributeValue, k string, v types.AttributeValue) map[string]types.AttributeValue {
	out := map[string]types.AttributeValue{k: v}
	for kk, vv := range m {
		out[kk] = vv
	}
	return out
}

// TestUpdateExpressions applies SET (with arithmetic, if_not_exists and
// list_append), REMOVE, ADD and DELETE and reads back what DynamoDB would
// store.
func TestUpdateExpressions(t *testing.T) {
	srv := memdynamo.New(memdynamo.Options{})
	c := newClient(t, srv)
	ctx := context.Background()
	update := func(expr string, values map[string]types.AttributeValue, rv types.ReturnValue) (*dynamodb.UpdateItemOutput, error) {
		return c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(table), Key: key("p", "1"), UpdateExpression: aws.String(expr),
			ExpressionAttributeNames: map[string]string{"#st": "state"}, ExpressionAttributeValues: values, ReturnValues: rv,
		})
	}
	if _, err := update("SET #st = :pending, failures = if_not_exists(failures, :zero) + :one, hist = list_append(if_not_exists(hist, :empty), :h)",
		map[string]types.AttributeValue{":pending": s("PENDING"), ":zero": n(0), ":one": n(1),
			":empty": &types.AttributeValueMemberL{}, ":h": &types.AttributeValueMemberL{Value: []types.AttributeValue{s("v1")}}}, ""); err != nil {
		t.Fatal(err)
	}
	out, err := update("SET #st = :running, failures = failures + :one, hist = list_append(hist, :h) ADD tags :tags REMOVE gone",
		map[string]types.AttributeValue{":running": s("RUNNING"), ":one": n(1),
			":h": &types.AttributeValueMemberL{Value: []types.AttributeValue{s("v2")}}, ":tags": &types.AttributeValueMemberSS{Value: []string{"x", "y"}}},
		types.ReturnValueAllNew)
	if err != nil {
		t.Fatal(err)
	}
	it := out.Attributes
	if got := it["state"].(*types.AttributeValueMemberS).Value; got != "RUNNING" {
		t.Errorf("state = %s", got)
	}
	if got := it["failures"].(*types.AttributeValueMemberN).Value; got != "2" {
		t.Errorf("failures = %s, want 2", got)
	}
	if got := it["hist"].(*types.AttributeValueMemberL).Value; len(got) != 2 || got[1].(*types.AttributeValueMemberS).Value != "v2" {
		t.Errorf("hist = %v", got)
	}
	if _, err := update("DELETE tags :x", map[string]types.AttributeValue{":x": &types.AttributeValueMemberSS{Value: []string{"x"}}}, ""); errorCode(err) != "ValidationException" {
		t.Errorf("an update with an unused #name must be refused: %v", err)
	}
	if _, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key("p", "1"),
		UpdateExpression: aws.String("DELETE tags :x"), ExpressionAttributeValues: map[string]types.AttributeValue{":x": &types.AttributeValueMemberSS{Value: []string{"x"}}}}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, c, "p", "1")["tags"].(*types.AttributeValueMemberSS).Value; len(got) != 1 || got[0] != "y" {
		t.Errorf("tags after DELETE = %v, want [y]", got)
	}
	for expr, want := range map[string]string{
		"SET PK = :v":           "ValidationException", // a key attribute
		"SET a = :v, a = :v":    "ValidationException", // overlapping paths
		"SET a = nothere + :v":  "ValidationException", // an operand that does not exist
		"SET a.b = :v":          "ValidationException", // a missing parent
		"REMOVE x SET y = :v":   "",
		"SET z = :v REMOVE z.q": "ValidationException",
	} {
		_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key("p", "1"),
			UpdateExpression: aws.String(expr), ExpressionAttributeValues: map[string]types.AttributeValue{":v": n(1)}})
		if got := errorCode(err); got != want {
			t.Errorf("%q: got %q (%v), want %q", expr, got, err, want)
		}
	}
}

// TestTransactionsAreAllOrNothing: one failed condition cancels every
// write, with a reason per item in order and the old item where asked.
func TestTransactionsAreAllOrNothing(t *testing.T) {
	srv := memdynamo.New(memdynamo.Options{})
	c := newClient(t, srv)
	ctx := context.Background()
	if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: withAttrs("b", "1", map[string]types.AttributeValue{"v": n(1)})}); err != nil {
		t.Fatal(err)
	}
	tx := func(cond string) error {
		_, err := c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: aws.String(table), Item: key("a", "1"), ConditionExpression: aws.String("attribute_not_exists(PK)")}},
			{Update: &types.Update{TableName: aws.String(table), Key: key("b", "1"), UpdateExpression: aws.String("SET v = v + :one"),
				ConditionExpression: aws.String(cond), ExpressionAttributeValues: map[string]types.AttributeValue{":one": n(1)},
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
		}})
		return err
	}
	err := tx("v > :one")
	var cancelled *types.TransactionCanceledException
	if !errors.As(err, &cancelled) {
		t.Fatalf("want TransactionCanceledException, got %v", err)
	}
	reasons := cancelled.CancellationReasons
	if len(reasons) != 2 || aws.ToString(reasons[0].Code) != "None" || aws.ToString(reasons[1].Code) != "ConditionalCheckFailed" {
		t.Fatalf("reasons = %+v", reasons)
	}
	if reasons[1].Item["v"].(*types.AttributeValueMemberN).Value != "1" {
		t.Errorf("the failed item's old value is not returned: %v", reasons[1].Item)
	}
	if get(t, c, "a", "1") != nil {
		t.Fatal("a cancelled transaction's put remained")
	}
	if err := tx("v = :one"); err != nil {
		t.Fatal(err)
	}
	if get(t, c, "a", "1") == nil || get(t, c, "b", "1")["v"].(*types.AttributeValueMemberN).Value != "2" {
		t.Fatal("a successful transaction did not apply every write")
	}
	_, err = c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(table), Item: key("c", "1")}},
		{Delete: &types.Delete{TableName: aws.String(table), Key: key("c", "1")}},
	}})
	if errorCode(err) != "ValidationException" {
		t.Errorf("two actions on one item: %v, want ValidationException", err)
	}
	var many []types.TransactWriteItem
	for i := range 101 {
		many = append(many, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(table), Item: key("m", strconv.Itoa(i))}})
	}
	if _, err := c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: many}); errorCode(err) != "ValidationException" {
		t.Errorf("101 items: %v, want ValidationException", err)
	}
}

// TestClientRequestToken: a resent transaction is answered without being
// applied again; the token with another request is a mismatch.
func TestClientRequestToken(t *testing.T) {
	srv := memdynamo.New(memdynamo.Options{})
	c := newClient(t, srv)
	ctx := context.Background()
	put := func(pk, token string) error {
		_, err := c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{ClientRequestToken: aws.String(token),
			TransactItems: []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String(table), Item: key(pk, "x"),
				ConditionExpression: aws.String("attribute_not_exists(PK)")}}}})
		return err
	}
	if err := put("A", "t1"); err != nil {
		t.Fatal(err)
	}
	if err := put("A", "t1"); err != nil {
		t.Fatalf("resend: %v", err)
	}
	if err := put("A", "t2"); errorCode(err) != "TransactionCanceledException" {
		t.Fatalf("new token: %v", err)
	}
	if err := put("B", "t1"); errorCode(err) != "IdempotentParameterMismatchException" {
		t.Fatalf("other request, same token: %v", err)
	}
}

// TestQueryPages: key conditions, order, Limit and the 1 MB page, with
// LastEvaluatedKey leading through every item exactly once.
func TestQueryPages(t *testing.T) {
	srv := memdynamo.New(memdynamo.Options{})
	c := newClient(t, srv)
	ctx := context.Background()
	big := strings.Repeat("x", 100_000)
	for i := range 25 {
		if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table),
			Item: withAttrs("t", fmt.Sprintf("B#%02d", i), map[string]types.AttributeValue{"pad": s(big)})}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: key("t", "G#1")}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		cond    string
		values  map[string]types.AttributeValue
		limit   int32
		forward bool
		want    int
		pages   int
	}{
		{"prefix, 1 MB pages", "PK = :pk AND begins_with(SK, :p)", map[string]types.AttributeValue{":pk": s("t"), ":p": s("B#")}, 0, true, 25, 3},
		{"limit", "PK = :pk AND begins_with(SK, :p)", map[string]types.AttributeValue{":pk": s("t"), ":p": s("B#")}, 10, true, 25, 3},
		{"between, backwards", "PK = :pk AND SK BETWEEN :a AND :b", map[string]types.AttributeValue{":pk": s("t"), ":a": s("B#05"), ":b": s("B#07")}, 1, false, 3, 4},
		{"whole partition", "PK = :pk", map[string]types.AttributeValue{":pk": s("t")}, 0, true, 26, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &dynamodb.QueryInput{TableName: aws.String(table), KeyConditionExpression: aws.String(tc.cond),
				ExpressionAttributeValues: tc.values, ScanIndexForward: aws.Bool(tc.forward)}
			if tc.limit > 0 {
				in.Limit = aws.Int32(tc.limit)
			}
			var sks []string
			pages := 0
			for p := dynamodb.NewQueryPaginator(c, in); p.HasMorePages(); {
				out, err := p.NextPage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				pages++
				for _, it := range out.Items {
					sks = append(sks, it["SK"].(*types.AttributeValueMemberS).Value)
				}
			}
			if len(sks) != tc.want || pages != tc.pages {
				t.Fatalf("got %d items in %d pages, want %d in %d: %v", len(sks), pages, tc.want, tc.pages, sks)
			}
			for i := 1; i < len(sks); i++ {
				if (sks[i-1] < sks[i]) != tc.forward {
					t.Fatalf("out of order: %v", sks)
				}
			}
		})
	}
	if _, err := c.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(table), KeyConditionExpression: aws.String("SK = :a"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":a": s("x")}}); errorCode(err) != "ValidationException" {
		t.Errorf("a key condition without the partition key: %v", err)
	}
}

// TestLimits refuses what DynamoDB refuses and the emulator does not: items
// over 400 KB, empty key strings, batches over their size.
func TestLimits(t *testing.T) {
	srv := memdynamo.New(memdynamo.Options{})
	c := newClient(t, srv)
	ctx := context.Background()
	if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table),
		Item: withAttrs("a", "1", map[string]types.AttributeValue{"pad": s(strings.Repeat("x", 400*1024))})}); errorCode(err) != "ValidationException" {
		t.Errorf("an item over 400 KB: %v", err)
	}
	if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: key("", "1")}); errorCode(err) != "ValidationException" {
		t.Errorf("an empty key: %v", err)
	}
	if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("nope"), Item: key("a", "1")}); errorCode(err) != "ResourceNotFoundException" {
		t.Errorf("unknown table: %v", err)
	}
	var keys []map[string]types.AttributeValue
	for i := range 101 {
		keys = append(keys, key("a", strconv.Itoa(i)))
	}
	if _, err := c.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{table: {Keys: keys}}}); errorCode(err) != "ValidationException" {
		t.Errorf("101 keys: %v", err)
	}
	out, err := c.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{table: {Keys: keys[:100]}}})
	if err != nil || len(out.Responses[table]) != 0 {
		t.Errorf("100 absent keys: %v, %v", out, err)
	}
}

// TestConditionalPutHasOneWinner: 32 writers race on each key; exactly one
// attribute_not_exists put wins and its item is what is stored.
func TestConditionalPutHasOneWinner(t *testing.T) {
	srv := memdynamo.New(memdynamo.Options{})
	c := newClient(t, srv)
	ctx := context.Background()
	const racers, keys = 32, 50
	var wins [keys]atomic.Int32
	var winner [keys]atomic.Int32
	var wg sync.WaitGroup
	for r := range racers {
		wg.Go(func() {
			for k := range keys {
				_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table),
					Item:                withAttrs("k", strconv.Itoa(k), map[string]types.AttributeValue{"winner": n(r)}),
					ConditionExpression: aws.String("attribute_not_exists(PK)")})
				switch code := errorCode(err); code {
				case "":
					wins[k].Add(1)
					winner[k].Store(int32(r))
				case "ConditionalCheckFailedException":
				default:
					t.Errorf("put: %v", err)
				}
			}
		})
	}
	wg.Wait()
	for k := range keys {
		if wins[k].Load() != 1 {
			t.Fatalf("key %d: %d winners", k, wins[k].Load())
		}
		if got := get(t, c, "k", strconv.Itoa(k))["winner"].(*types.AttributeValueMemberN).Value; got != strconv.Itoa(int(winner[k].Load())) {
			t.Fatalf("key %d stores winner %s, but %d won", k, got, winner[k].Load())
		}
	}
}

// TestDigest: equal for equal histories, different after one more write.
func TestDigest(t *testing.T) {
	digest := func(extra bool) [32]byte {
		srv := memdynamo.New(memdynamo.Options{})
		c := newClient(t, srv)
		for i := range 5 {
			if _, err := c.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table),
				Item: withAttrs("d", strconv.Itoa(i), map[string]types.AttributeValue{"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"a": n(i), "b": s("x")}}})}); err != nil {
				t.Fatal(err)
			}
		}
		if extra {
			if _, err := c.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: key("d", "0")}); err != nil {
				t.Fatal(err)
			}
		}
		h := sha256.New()
		srv.Digest(h)
		var out [32]byte
		copy(out[:], h.Sum(nil))
		return out
	}
	a, b := digest(false), digest(false)
	if a != b {
		t.Fatal("two servers fed the same requests differ")
	}
	if a == digest(true) {
		t.Fatal("a delete did not change the digest")
	}
}

// TestFault answers a request with the failure a test asks for.
func TestFault(t *testing.T) {
	srv := memdynamo.New(memdynamo.Options{})
	c := newClient(t, srv)
	srv.SetFault(func(op, tbl string) *memdynamo.Failure {
		if op == "PutItem" && tbl == table {
			return &memdynamo.Failure{Status: 400, Type: "ProvisionedThroughputExceededException", Message: "slow down"}
		}
		return nil
	})
	_, err := c.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: key("a", "1")})
	var throttled *types.ProvisionedThroughputExceededException
	if !errors.As(err, &throttled) {
		t.Fatalf("want ProvisionedThroughputExceededException, got %v", err)
	}
	srv.SetFault(nil)
	if _, err := c.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: key("a", "1")}); err != nil {
		t.Fatal(err)
	}
	if srv.ItemCount(table) != 1 {
		t.Fatalf("items = %d, want 1", srv.ItemCount(table))
	}
}

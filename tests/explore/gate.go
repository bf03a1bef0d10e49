package explore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/pipeline"
	"github.com/sluice-dev/sluice/shared/records"
)

// errCrashed is what every call of a crashed delivery returns: the
// handler stops having effects at the call where the explorer crashed it.
var errCrashed = errors.New("explore: the invocation crashed here")

// deliveryStuckAfter bounds how long a delivery may run between two calls before
// the explorer calls it stuck (a handler that blocks on something other
// than an AWS call, which would make the schedule meaningless).
const deliveryStuckAfter = 2 * time.Minute

// resource is what one call reads or writes: a DynamoDB item
// ("ddb:PK/SK"), every item under a key prefix (a Query), an S3 object
// ("s3:key") or every object under a prefix (a LIST), a queue group
// ("sqs:queue/group").
type resource struct {
	name   string
	prefix bool
	write  bool
}

// call is one request a delivery is about to make.
type call struct {
	op        string // "DynamoDB.TransactWriteItems", "S3.GetObject", "SQS.SendMessage"
	resources []resource
}

func (c call) writes() bool {
	for _, r := range c.resources {
		if r.write {
			return true
		}
	}
	return false
}

func (c call) String() string {
	var names []string
	for _, r := range c.resources {
		names = append(names, r.name)
	}
	return c.op + " " + strings.Join(names, ",")
}

// conflicts reports whether the order of a and b can matter: they touch a
// common resource and one of them writes it.
func conflicts(a, b call) bool {
	for _, x := range a.resources {
		for _, y := range b.resources {
			if !x.write && !y.write {
				continue
			}
			if overlap(x, y) {
				return true
			}
		}
	}
	return false
}

func overlap(x, y resource) bool {
	switch {
	case x.prefix && y.prefix:
		return strings.HasPrefix(x.name, y.name) || strings.HasPrefix(y.name, x.name)
	case x.prefix:
		return strings.HasPrefix(y.name, x.name)
	case y.prefix:
		return strings.HasPrefix(x.name, y.name)
	}
	return x.name == y.name
}

// event is what a running delivery tells the explorer: it is about to
// make a call (and waits for the verdict), or it has returned.
type event struct {
	call *call
	done bool
	err  error
}

// run is one delivery in flight: a handler invocation on its own
// goroutine that stops before each call until the explorer lets it go on.
type run struct {
	events  chan event
	verdict chan bool // true: make the call; false: crash here
	dead    bool      // only touched by the delivery's goroutine
}

type runKey struct{}

func runFrom(ctx context.Context) *run {
	r, _ := ctx.Value(runKey{}).(*run)
	return r
}

// enter is called by every gated client before a request. Outside a
// delivery (the explorer's own reads) it does nothing.
func enter(ctx context.Context, c call) error {
	r := runFrom(ctx)
	if r == nil {
		return nil
	}
	if r.dead {
		return errCrashed
	}
	r.events <- event{call: &c}
	if !<-r.verdict {
		r.dead = true
		return errCrashed
	}
	return nil
}

// start runs fn as a delivery; the first event it sends is its first call
// or its return.
func start(ctx context.Context, fn func(ctx context.Context) error) *run {
	r := &run{events: make(chan event), verdict: make(chan bool)}
	ctx = context.WithValue(ctx, runKey{}, r)
	go func() {
		err := fn(ctx)
		r.events <- event{done: true, err: err}
	}()
	return r
}

// next waits for the delivery's next event.
func (r *run) next() (event, error) {
	select {
	case ev := <-r.events:
		return ev, nil
	case <-time.After(deliveryStuckAfter):
		return event{}, fmt.Errorf("a delivery made no call and did not return for %v", deliveryStuckAfter)
	}
}

// --- gated clients ---

func itemName(key map[string]types.AttributeValue) string {
	pk, _ := key["PK"].(*types.AttributeValueMemberS)
	sk, _ := key["SK"].(*types.AttributeValueMemberS)
	if pk == nil || sk == nil {
		return "ddb:?"
	}
	return "ddb:" + pk.Value + "/" + sk.Value
}

// gatedDB stops before every DynamoDB request.
type gatedDB struct{ db records.DynamoDB }

func (g gatedDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if err := enter(ctx, call{op: "DynamoDB.GetItem", resources: []resource{{name: itemName(in.Key)}}}); err != nil {
		return nil, err
	}
	return g.db.GetItem(ctx, in, o...)
}

func (g gatedDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if err := enter(ctx, call{op: "DynamoDB.PutItem", resources: []resource{{name: itemName(in.Item), write: true}}}); err != nil {
		return nil, err
	}
	return g.db.PutItem(ctx, in, o...)
}

func (g gatedDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := enter(ctx, call{op: "DynamoDB.UpdateItem", resources: []resource{{name: itemName(in.Key), write: true}}}); err != nil {
		return nil, err
	}
	return g.db.UpdateItem(ctx, in, o...)
}

func (g gatedDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if err := enter(ctx, call{op: "DynamoDB.DeleteItem", resources: []resource{{name: itemName(in.Key), write: true}}}); err != nil {
		return nil, err
	}
	return g.db.DeleteItem(ctx, in, o...)
}

func (g gatedDB) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	// The store's queries are "PK = :pk [AND begins_with(SK, :p) | SK
	// BETWEEN :a AND :b]": the partition plus the common prefix of the
	// bounds is what they read.
	pk, _ := in.ExpressionAttributeValues[":pk"].(*types.AttributeValueMemberS)
	prefix := ""
	if p, ok := in.ExpressionAttributeValues[":p"].(*types.AttributeValueMemberS); ok {
		prefix = p.Value
	} else if a, ok := in.ExpressionAttributeValues[":a"].(*types.AttributeValueMemberS); ok {
		if b, ok := in.ExpressionAttributeValues[":b"].(*types.AttributeValueMemberS); ok {
			prefix = commonPrefix(a.Value, b.Value)
		}
	}
	name := "ddb:?"
	if pk != nil {
		name = "ddb:" + pk.Value + "/" + prefix
	}
	if err := enter(ctx, call{op: "DynamoDB.Query", resources: []resource{{name: name, prefix: true}}}); err != nil {
		return nil, err
	}
	return g.db.Query(ctx, in, o...)
}

func commonPrefix(a, b string) string {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return a[:n]
}

func (g gatedDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	var rs []resource
	for _, ka := range in.RequestItems {
		for _, k := range ka.Keys {
			rs = append(rs, resource{name: itemName(k)})
		}
	}
	if err := enter(ctx, call{op: "DynamoDB.BatchGetItem", resources: rs}); err != nil {
		return nil, err
	}
	return g.db.BatchGetItem(ctx, in, o...)
}

func (g gatedDB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	var rs []resource
	for _, reqs := range in.RequestItems {
		for _, r := range reqs {
			if r.DeleteRequest != nil {
				rs = append(rs, resource{name: itemName(r.DeleteRequest.Key), write: true})
			} else if r.PutRequest != nil {
				rs = append(rs, resource{name: itemName(r.PutRequest.Item), write: true})
			}
		}
	}
	if err := enter(ctx, call{op: "DynamoDB.BatchWriteItem", resources: rs}); err != nil {
		return nil, err
	}
	return g.db.BatchWriteItem(ctx, in, o...)
}

func (g gatedDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	var rs []resource
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			rs = append(rs, resource{name: itemName(it.Put.Item), write: true})
		case it.Update != nil:
			rs = append(rs, resource{name: itemName(it.Update.Key), write: true})
		case it.Delete != nil:
			rs = append(rs, resource{name: itemName(it.Delete.Key), write: true})
		case it.ConditionCheck != nil:
			rs = append(rs, resource{name: itemName(it.ConditionCheck.Key)})
		}
	}
	if err := enter(ctx, call{op: "DynamoDB.TransactWriteItems", resources: rs}); err != nil {
		return nil, err
	}
	return g.db.TransactWriteItems(ctx, in, o...)
}

// gatedS3 stops before every S3 request.
type gatedS3 struct{ s3 pipeline.S3 }

func object(key *string, write bool) []resource {
	return []resource{{name: "s3:" + aws.ToString(key), write: write}}
}

func (g gatedS3) GetObject(ctx context.Context, in *s3.GetObjectInput, o ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	if err := enter(ctx, call{op: "S3.GetObject", resources: object(in.Key, false)}); err != nil {
		return nil, err
	}
	return g.s3.GetObject(ctx, in, o...)
}

func (g gatedS3) HeadObject(ctx context.Context, in *s3.HeadObjectInput, o ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	if err := enter(ctx, call{op: "S3.HeadObject", resources: object(in.Key, false)}); err != nil {
		return nil, err
	}
	return g.s3.HeadObject(ctx, in, o...)
}

func (g gatedS3) PutObject(ctx context.Context, in *s3.PutObjectInput, o ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	if err := enter(ctx, call{op: "S3.PutObject", resources: object(in.Key, true)}); err != nil {
		return nil, err
	}
	return g.s3.PutObject(ctx, in, o...)
}

func (g gatedS3) DeleteObjects(ctx context.Context, in *s3.DeleteObjectsInput, o ...func(*s3.Options)) (*s3.DeleteObjectsOutput, error) {
	var rs []resource
	if in.Delete != nil {
		for _, id := range in.Delete.Objects {
			rs = append(rs, object(id.Key, true)...)
		}
	}
	if err := enter(ctx, call{op: "S3.DeleteObjects", resources: rs}); err != nil {
		return nil, err
	}
	return g.s3.DeleteObjects(ctx, in, o...)
}

func (g gatedS3) ListObjectVersions(ctx context.Context, in *s3.ListObjectVersionsInput, o ...func(*s3.Options)) (*s3.ListObjectVersionsOutput, error) {
	if err := enter(ctx, call{op: "S3.ListObjectVersions", resources: []resource{{name: "s3:" + aws.ToString(in.Prefix), prefix: true}}}); err != nil {
		return nil, err
	}
	return g.s3.ListObjectVersions(ctx, in, o...)
}

func (g gatedS3) CreateMultipartUpload(ctx context.Context, in *s3.CreateMultipartUploadInput, o ...func(*s3.Options)) (*s3.CreateMultipartUploadOutput, error) {
	if err := enter(ctx, call{op: "S3.CreateMultipartUpload", resources: object(in.Key, false)}); err != nil {
		return nil, err
	}
	return g.s3.CreateMultipartUpload(ctx, in, o...)
}

func (g gatedS3) UploadPart(ctx context.Context, in *s3.UploadPartInput, o ...func(*s3.Options)) (*s3.UploadPartOutput, error) {
	if err := enter(ctx, call{op: "S3.UploadPart", resources: object(in.Key, false)}); err != nil {
		return nil, err
	}
	return g.s3.UploadPart(ctx, in, o...)
}

func (g gatedS3) CompleteMultipartUpload(ctx context.Context, in *s3.CompleteMultipartUploadInput, o ...func(*s3.Options)) (*s3.CompleteMultipartUploadOutput, error) {
	if err := enter(ctx, call{op: "S3.CompleteMultipartUpload", resources: object(in.Key, true)}); err != nil {
		return nil, err
	}
	return g.s3.CompleteMultipartUpload(ctx, in, o...)
}

func (g gatedS3) AbortMultipartUpload(ctx context.Context, in *s3.AbortMultipartUploadInput, o ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error) {
	if err := enter(ctx, call{op: "S3.AbortMultipartUpload", resources: object(in.Key, false)}); err != nil {
		return nil, err
	}
	return g.s3.AbortMultipartUpload(ctx, in, o...)
}

// gatedSQS stops before every send.
type gatedSQS struct{ sqs messages.SQS }

func (g gatedSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	name := "sqs:" + aws.ToString(in.QueueUrl) + "/" + aws.ToString(in.MessageGroupId)
	if err := enter(ctx, call{op: "SQS.SendMessage", resources: []resource{{name: name, write: true}}}); err != nil {
		return nil, err
	}
	return g.sqs.SendMessage(ctx, in, o...)
}

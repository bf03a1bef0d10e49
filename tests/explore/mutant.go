package explore

import (
	"context"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-dev/sluice/shared/records"
)

// Mutant is a protocol bug made on purpose: every condition a write sends
// to DynamoDB has From replaced by To (a condition check left with no
// condition is dropped from its transaction). An exploration of a mutant
// must find a violation — if it does not, either the condition is not
// needed or the explorer cannot see what it protects.
type Mutant struct {
	Name     string
	From, To string
}

func (m Mutant) rewrite(cond *string) *string {
	if cond == nil || !strings.Contains(*cond, m.From) {
		return cond
	}
	c := strings.TrimSpace(strings.ReplaceAll(*cond, m.From, m.To))
	if c == "" {
		return nil
	}
	return aws.String(c)
}

// prune drops the placeholders no expression uses any more: DynamoDB
// refuses a request that defines one it does not use.
func prune(names map[string]string, vals map[string]types.AttributeValue, exprs ...*string) (map[string]string, map[string]types.AttributeValue) {
	var all strings.Builder
	for _, e := range exprs {
		all.WriteString(aws.ToString(e))
		all.WriteString(" ")
	}
	used := func(p string) bool {
		s := all.String()
		for i := strings.Index(s, p); i >= 0; {
			end := i + len(p)
			if end == len(s) || !isNameChar(s[end]) {
				return true
			}
			j := strings.Index(s[end:], p)
			if j < 0 {
				break
			}
			i = end + j
		}
		return false
	}
	var ns map[string]string
	for k, v := range names {
		if used(k) {
			if ns == nil {
				ns = map[string]string{}
			}
			ns[k] = v
		}
	}
	var vs map[string]types.AttributeValue
	for k, v := range vals {
		if used(k) {
			if vs == nil {
				vs = map[string]types.AttributeValue{}
			}
			vs[k] = v
		}
	}
	return ns, vs
}

func isNameChar(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// mutatedDB applies a Mutant to every write.
type mutatedDB struct {
	records.DynamoDB
	m Mutant
}

func (d mutatedDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c := *in
	c.ConditionExpression = d.m.rewrite(in.ConditionExpression)
	c.ExpressionAttributeNames, c.ExpressionAttributeValues = prune(in.ExpressionAttributeNames, in.ExpressionAttributeValues, c.ConditionExpression)
	return d.DynamoDB.PutItem(ctx, &c, o...)
}

func (d mutatedDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c := *in
	c.ConditionExpression = d.m.rewrite(in.ConditionExpression)
	c.ExpressionAttributeNames, c.ExpressionAttributeValues = prune(in.ExpressionAttributeNames, in.ExpressionAttributeValues, c.ConditionExpression, c.UpdateExpression)
	return d.DynamoDB.UpdateItem(ctx, &c, o...)
}

func (d mutatedDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	c := *in
	c.ConditionExpression = d.m.rewrite(in.ConditionExpression)
	c.ExpressionAttributeNames, c.ExpressionAttributeValues = prune(in.ExpressionAttributeNames, in.ExpressionAttributeValues, c.ConditionExpression)
	return d.DynamoDB.DeleteItem(ctx, &c, o...)
}

func (d mutatedDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c := *in
	c.TransactItems = nil
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			p := *it.Put
			p.ConditionExpression = d.m.rewrite(p.ConditionExpression)
			p.ExpressionAttributeNames, p.ExpressionAttributeValues = prune(p.ExpressionAttributeNames, p.ExpressionAttributeValues, p.ConditionExpression)
			it.Put = &p
		case it.Update != nil:
			u := *it.Update
			u.ConditionExpression = d.m.rewrite(u.ConditionExpression)
			u.ExpressionAttributeNames, u.ExpressionAttributeValues = prune(u.ExpressionAttributeNames, u.ExpressionAttributeValues, u.ConditionExpression, u.UpdateExpression)
			it.Update = &u
		case it.Delete != nil:
			x := *it.Delete
			x.ConditionExpression = d.m.rewrite(x.ConditionExpression)
			x.ExpressionAttributeNames, x.ExpressionAttributeValues = prune(x.ExpressionAttributeNames, x.ExpressionAttributeValues, x.ConditionExpression)
			it.Delete = &x
		case it.ConditionCheck != nil:
			k := *it.ConditionCheck
			k.ConditionExpression = d.m.rewrite(k.ConditionExpression)
			if k.ConditionExpression == nil {
				continue
			}
			k.ExpressionAttributeNames, k.ExpressionAttributeValues = prune(k.ExpressionAttributeNames, k.ExpressionAttributeValues, k.ConditionExpression)
			it.ConditionCheck = &k
		}
		c.TransactItems = append(c.TransactItems, it)
	}
	return d.DynamoDB.TransactWriteItems(ctx, &c, o...)
}

package cli

import (
	"context"
	"fmt"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-dev/sluice/shared/records"
)

// TableQuerier is the part of the DynamoDB client listTenants needs.
type TableQuerier interface {
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// listTenants lists every tenant that registered a block, sorted.
//
// records.Store.Tenants queries with begins_with(SK, ""), which DynamoDB
// (and moto) reject; until it is fixed this falls back to the same Query
// without the SK condition. The "TENANTS" partition key is records'
// (keys.go: tenantsPK).
func listTenants(ctx context.Context, st *records.Store, db TableQuerier, table string) ([]string, error) {
	ts, err := st.Tenants(ctx)
	if err != nil {
		in := &dynamodb.QueryInput{
			TableName:                 aws.String(table),
			ConsistentRead:            aws.Bool(true),
			KeyConditionExpression:    aws.String("PK = :pk"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: "TENANTS"}},
		}
		ts = nil
		for {
			res, qerr := db.Query(ctx, in)
			if qerr != nil {
				return nil, fmt.Errorf("list tenants: %w (and %v)", qerr, err)
			}
			for _, it := range res.Items {
				if t, ok := it["tenant"].(*types.AttributeValueMemberS); ok {
					ts = append(ts, t.Value)
				}
			}
			if len(res.LastEvaluatedKey) == 0 {
				break
			}
			in.ExclusiveStartKey = res.LastEvaluatedKey
		}
	}
	sort.Strings(ts)
	return ts, nil
}

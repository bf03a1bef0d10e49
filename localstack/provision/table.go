package provision

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/sluice-dev/sluice/shared/spec"
)

// tableActiveWait bounds the wait for a new table to become ACTIVE (the
// emulators make it ACTIVE at once; real DynamoDB takes seconds).
const tableActiveWait = 2 * time.Minute

// provisionTable converges the table (PK/SK strings, on demand) and its
// TTL. It reports whether TTL is enabled; an emulator that does not
// implement TTL is not an error.
func provisionTable(ctx context.Context, c *dynamodb.Client, r spec.Resources) (bool, error) {
	name := r.TableName()
	t := r.Table
	_, err := c.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{
			{AttributeName: aws.String(t.PartitionKey), AttributeType: ddbtypes.ScalarAttributeTypeS},
			{AttributeName: aws.String(t.SortKey), AttributeType: ddbtypes.ScalarAttributeTypeS},
		},
		KeySchema: []ddbtypes.KeySchemaElement{
			{AttributeName: aws.String(t.PartitionKey), KeyType: ddbtypes.KeyTypeHash},
			{AttributeName: aws.String(t.SortKey), KeyType: ddbtypes.KeyTypeRange},
		},
	})
	var inUse *ddbtypes.ResourceInUseException
	switch {
	case err == nil:
	case errors.As(err, &inUse):
		if err := checkKeySchema(ctx, c, name, t); err != nil {
			return false, err
		}
	default:
		return false, fmt.Errorf("table %s: create: %w", name, err)
	}
	w := dynamodb.NewTableExistsWaiter(c, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 100 * time.Millisecond })
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, tableActiveWait); err != nil {
		return false, fmt.Errorf("table %s: wait until active: %w", name, err)
	}
	if t.TTLAttribute == "" {
		return false, nil
	}
	return ensureTTL(ctx, c, name, t.TTLAttribute)
}

// checkKeySchema refuses an existing table whose keys differ from the
// spec: every record key would be wrong, and that cannot be changed.
func checkKeySchema(ctx context.Context, c *dynamodb.Client, name string, t spec.Table) error {
	out, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err != nil {
		return fmt.Errorf("table %s: describe: %w", name, err)
	}
	keys := map[ddbtypes.KeyType]string{}
	for _, k := range out.Table.KeySchema {
		keys[k.KeyType] = aws.ToString(k.AttributeName)
	}
	if keys[ddbtypes.KeyTypeHash] != t.PartitionKey || keys[ddbtypes.KeyTypeRange] != t.SortKey {
		return fmt.Errorf("table %s exists with keys %s/%s, the spec wants %s/%s",
			name, keys[ddbtypes.KeyTypeHash], keys[ddbtypes.KeyTypeRange], t.PartitionKey, t.SortKey)
	}
	return nil
}

func ensureTTL(ctx context.Context, c *dynamodb.Client, name, attr string) (bool, error) {
	cur, err := c.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
	if err != nil {
		if unsupported(err) {
			return false, nil
		}
		return false, fmt.Errorf("table %s: describe TTL: %w", name, err)
	}
	if d := cur.TimeToLiveDescription; d != nil && aws.ToString(d.AttributeName) == attr &&
		(d.TimeToLiveStatus == ddbtypes.TimeToLiveStatusEnabled || d.TimeToLiveStatus == ddbtypes.TimeToLiveStatusEnabling) {
		return true, nil
	}
	_, err = c.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(name),
		TimeToLiveSpecification: &ddbtypes.TimeToLiveSpecification{AttributeName: aws.String(attr), Enabled: aws.Bool(true)},
	})
	if err != nil {
		if unsupported(err) {
			return false, nil
		}
		return false, fmt.Errorf("table %s: enable TTL on %s: %w", name, attr, err)
	}
	return true, nil
}

// unsupported reports an emulator's "not implemented" answer.
func unsupported(err error) bool {
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotImplemented {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "UnknownOperationException", "NotImplemented":
			return true
		}
	}
	return false
}

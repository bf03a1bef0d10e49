package platformtest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/sluice-dev/sluice/localstack/envtest"
)

const (
	racers = 32
	keys   = 200
)

// TestConditionalPutHasOneWinner races `racers` writers on each of `keys`
// keys with an attribute_not_exists put, as Sluice's claims, leases and
// commits do, and checks that every key has exactly one winner and that
// the stored item is the winner's. moto's threaded server alone fails this
// (docs/design.md §7); moto_serial.py must make it pass.
func TestConditionalPutHasOneWinner(t *testing.T) {
	env := envtest.New(t)
	ddb, table := env.Clients.DynamoDB, env.Deployment.Table

	variants := []struct {
		name string
		put  func(ctx context.Context, item map[string]ddbtypes.AttributeValue) error
	}{
		{"TransactWriteItems", func(ctx context.Context, item map[string]ddbtypes.AttributeValue) error {
			_, err := ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
				TransactItems: []ddbtypes.TransactWriteItem{{Put: &ddbtypes.Put{
					TableName:           aws.String(table),
					Item:                item,
					ConditionExpression: aws.String("attribute_not_exists(PK)"),
				}}},
			})
			return err
		}},
		{"PutItem", func(ctx context.Context, item map[string]ddbtypes.AttributeValue) error {
			_, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{
				TableName:           aws.String(table),
				Item:                item,
				ConditionExpression: aws.String("attribute_not_exists(PK)"),
			})
			return err
		}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var wins [keys]atomic.Int32
			var winner [keys]atomic.Int32
			var losses atomic.Int64
			start := time.Now()
			var wg sync.WaitGroup
			for r := range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := range keys {
						item := map[string]ddbtypes.AttributeValue{
							"PK":     &ddbtypes.AttributeValueMemberS{Value: fmt.Sprintf("%s#%d", v.name, k)},
							"SK":     &ddbtypes.AttributeValueMemberS{Value: "claim"},
							"winner": &ddbtypes.AttributeValueMemberN{Value: strconv.Itoa(r)},
						}
						err := v.put(ctx, item)
						switch {
						case err == nil:
							wins[k].Add(1)
							winner[k].Store(int32(r))
						case lostCondition(err):
							losses.Add(1)
						default:
							t.Errorf("key %d, racer %d: %v", k, r, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			doubles := 0
			for k := range keys {
				n := wins[k].Load()
				if n != 1 {
					doubles++
					t.Errorf("key %d: %d winners, want exactly 1", k, n)
					continue
				}
				got, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{
					TableName:      aws.String(table),
					ConsistentRead: aws.Bool(true),
					Key: map[string]ddbtypes.AttributeValue{
						"PK": &ddbtypes.AttributeValueMemberS{Value: fmt.Sprintf("%s#%d", v.name, k)},
						"SK": &ddbtypes.AttributeValueMemberS{Value: "claim"},
					},
				})
				if err != nil {
					t.Fatalf("key %d: get: %v", k, err)
				}
				stored, _ := got.Item["winner"].(*ddbtypes.AttributeValueMemberN)
				if stored == nil || stored.Value != strconv.Itoa(int(winner[k].Load())) {
					t.Errorf("key %d: stored item %v is not the winner's (%d)", k, got.Item["winner"], winner[k].Load())
				}
			}
			t.Logf("%s: %d keys × %d racers in %v: %d keys with more than one winner, %d lost conditions",
				v.name, keys, racers, time.Since(start).Round(time.Millisecond), doubles, losses.Load())
		})
	}
}

// lostCondition reports the expected outcome of losing the race.
func lostCondition(err error) bool {
	var ccf *ddbtypes.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return true
	}
	var tce *ddbtypes.TransactionCanceledException
	if errors.As(err, &tce) {
		for _, r := range tce.CancellationReasons {
			if aws.ToString(r.Code) == "ConditionalCheckFailed" {
				return true
			}
		}
	}
	return false
}

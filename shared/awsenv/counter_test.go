package awsenv

import (
	"context"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/localstack/memaws"
)

func TestIsBlockPrefix(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		want   bool
	}{
		{"acme/01ARZ3NDEKTSV4RRFFQ69G5FAV/", true},
		{"blocks/acme/01ARZ3NDEKTSV4RRFFQ69G5FAV/", true},
		{"01ARZ3NDEKTSV4RRFFQ69G5FAV/", true},
		{"acme/01ARZ3NDEKTSV4RRFFQ69G5FAV", false}, // no slash: also matches ...FAVX/
		{"acme/", false},
		{"", false},
		{"acme/not-a-ulid/", false},
		{"acme/01ARZ3NDEKTSV4RRFFQ69G5FAV/chunks/", false},
	} {
		if got := isBlockPrefix(tc.prefix); got != tc.want {
			t.Errorf("isBlockPrefix(%q) = %v, want %v", tc.prefix, got, tc.want)
		}
	}
}

// Requests are counted per caller as well as per operation: a handler's
// context names it, and what no context names counts under "".
func TestCounterByCaller(t *testing.T) {
	cloud := memaws.New(memaws.Options{})
	counter := NewRequestCounter()
	c, err := Load(context.Background(), Options{Endpoint: memaws.Endpoint, HTTPClient: cloud, Counter: counter})
	if err != nil {
		t.Fatal(err)
	}
	for _, caller := range []string{"planner", "planner", "sweep", ""} {
		ctx := context.Background()
		if caller != "" {
			ctx = WithCaller(ctx, caller)
		}
		if _, err := c.SQS.ListQueues(ctx, &sqs.ListQueuesInput{}); err != nil {
			t.Fatal(err)
		}
	}
	want := []CallerCount{{"", "SQS ListQueues", 1}, {"planner", "SQS ListQueues", 2}, {"sweep", "SQS ListQueues", 1}}
	if got := counter.SnapshotByCaller(); !slices.Equal(got, want) {
		t.Fatalf("by caller %v, want %v", got, want)
	}
	if got := counter.Get("SQS ListQueues"); got != 4 {
		t.Fatalf("%d ListQueues in all, want 4", got)
	}
}

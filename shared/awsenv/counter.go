package awsenv

import (
	"context"
	"sort"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
)

// RequestCounter counts AWS requests by service and operation. The demo and
// the request-economy test read it; it is safe for concurrent use.
type RequestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

// NewRequestCounter returns an empty counter.
func NewRequestCounter() *RequestCounter {
	return &RequestCounter{counts: map[string]int{}}
}

// Attach installs the counter on cfg, so every client built from it counts.
func (c *RequestCounter) Attach(cfg *aws.Config) {
	cfg.APIOptions = append(cfg.APIOptions, func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("sluiceRequestCounter",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				c.add(awsmiddleware.GetServiceID(ctx) + " " + awsmiddleware.GetOperationName(ctx))
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
	})
}

func (c *RequestCounter) add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[key]++
}

// Count is one "service operation" and how often it was called.
type Count struct {
	Operation string
	N         int
}

// Snapshot returns the counts so far, sorted by operation.
func (c *RequestCounter) Snapshot() []Count {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Count, 0, len(c.counts))
	for k, n := range c.counts {
		out = append(out, Count{Operation: k, N: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Operation < out[j].Operation })
	return out
}

// Get returns how often "service operation" was called, e.g. "S3 ListObjectsV2".
func (c *RequestCounter) Get(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[op]
}

package awsenv

import (
	"context"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	"github.com/oklog/ulid/v2"
)

// WiderThanABlock is appended to an S3 list operation's name for a LIST
// whose prefix is not one block's own (<...>/<ULID>/): a tenant or bucket
// scan, which Sluice's handlers never make.
const WiderThanABlock = " (wider than one block)"

// RequestCounter counts AWS requests by service and operation, and by the
// caller a request's context names (WithCaller). The demo and the
// request-economy test read it; it is safe for concurrent use.
type RequestCounter struct {
	mu       sync.Mutex
	counts   map[string]int
	byCaller map[[2]string]int
}

// NewRequestCounter returns an empty counter.
func NewRequestCounter() *RequestCounter {
	return &RequestCounter{counts: map[string]int{}, byCaller: map[[2]string]int{}}
}

type callerKey struct{}

// WithCaller is ctx naming who makes the requests sent under it (a
// function, a schedule): the counter adds them up per caller too.
func WithCaller(ctx context.Context, caller string) context.Context {
	return context.WithValue(ctx, callerKey{}, caller)
}

// CallerOf is the caller ctx names, "" when none.
func CallerOf(ctx context.Context) string {
	s, _ := ctx.Value(callerKey{}).(string)
	return s
}

// Attach installs the counter on cfg, so every client built from it counts.
func (c *RequestCounter) Attach(cfg *aws.Config) {
	cfg.APIOptions = append(cfg.APIOptions, func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("sluiceRequestCounter",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				op := awsmiddleware.GetServiceID(ctx) + " " + awsmiddleware.GetOperationName(ctx)
				c.add(op)
				c.addCaller(CallerOf(ctx), op)
				if prefix, ok := listPrefix(in.Parameters); ok && !isBlockPrefix(prefix) {
					c.add(op + WiderThanABlock)
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
	})
}

// listPrefix is the prefix of an S3 list request.
func listPrefix(params any) (string, bool) {
	switch in := params.(type) {
	case *s3.ListObjectVersionsInput:
		return aws.ToString(in.Prefix), true
	case *s3.ListObjectsV2Input:
		return aws.ToString(in.Prefix), true
	case *s3.ListObjectsInput:
		return aws.ToString(in.Prefix), true
	}
	return "", false
}

// isBlockPrefix reports whether prefix is one block's own: it ends in
// "<ULID>/".
func isBlockPrefix(prefix string) bool {
	rest, ok := strings.CutSuffix(prefix, "/")
	if !ok {
		return false
	}
	_, err := ulid.ParseStrict(rest[strings.LastIndex(rest, "/")+1:])
	return err == nil
}

func (c *RequestCounter) add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[key]++
}

func (c *RequestCounter) addCaller(caller, op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byCaller[[2]string{caller, op}]++
}

// CallerCount is how often one caller made one "service operation"
// request; Caller is "" for requests no context named.
type CallerCount struct {
	Caller, Operation string
	N                 int
}

// SnapshotByCaller returns the counts per caller and operation, sorted.
func (c *RequestCounter) SnapshotByCaller() []CallerCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]CallerCount, 0, len(c.byCaller))
	for k, n := range c.byCaller {
		out = append(out, CallerCount{Caller: k[0], Operation: k[1], N: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Caller != out[j].Caller {
			return out[i].Caller < out[j].Caller
		}
		return out[i].Operation < out[j].Operation
	})
	return out
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

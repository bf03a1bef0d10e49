package e2e

import (
	"context"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/eventsource"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/stream"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// Every handler is fed every batch twice, the second time in reverse
// order: the pipeline must end exactly as once — one version per group,
// the invariants hold.
func TestEveryMessageTwice(t *testing.T) {
	t.Parallel()
	twice := func(_ string, h eventsource.Handler) eventsource.Handler {
		return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			first, err := h(ctx, ev)
			if err != nil {
				return first, err
			}
			rev := events.SQSEvent{Records: make([]events.SQSMessage, len(ev.Records))}
			for i, m := range ev.Records {
				rev.Records[len(ev.Records)-1-i] = m
			}
			second, err := h(ctx, rev)
			first.BatchItemFailures = append(first.BatchItemFailures, second.BatchItemFailures...)
			return first, err
		}
	}
	w := testworld.New(t, testworld.Options{Pipeline: localrun.Options{Wrap: twice}})
	ctx := context.Background()
	halfDay(ctx, w, "acme", 1)
	settle(t, w, "acme")
	g, _, err := w.Store.GetGroup(ctx, "acme", planning.GroupKey{Stream: stream.Stream{}.ID(), Level: 1, RangeStart: day().UnixMilli()})
	if err != nil || g.Version != 1 || g.State != protocol.GroupRetired {
		t.Fatalf("group after doubled delivery: version %d %s (%v); want version 1 RETIRED", g.Version, g.State, err)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// S3 events for blocks that are already registered, retired or deleted
// change nothing: the same records at the same gens, the same objects.
// The deletion delay is an hour of a skewable clock, so the events are
// first repeated while the sources are retired (RETIRING, marked, still in
// the bucket) and then again once the clock has passed the delay and they
// are DELETED.
func TestRepeatedEventsChangeNothing(t *testing.T) {
	t.Parallel()
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	w := testworld.New(t, testworld.Options{
		Pipeline:  localrun.Options{Now: now},
		Configure: func(c *config.Config) { c.DeletionDelay = time.Hour },
	})
	ctx := context.Background()
	blocks := halfDay(ctx, w, "acme", 2)
	repeat := func(phase string, want protocol.BlockState, settled func()) {
		t.Helper()
		settled()
		recs := byID(w.Blocks(ctx, "acme"))
		for _, b := range blocks {
			id := b.Meta.ULID.String()
			if got := recs[id].State; got != want {
				t.Fatalf("%s: source %s is %q, want %s", phase, id, got, want)
			}
		}
		before := snapshot(ctx, t, w)
		for _, b := range blocks {
			w.DuplicateEvent(ctx, "acme", b.Dir)
		}
		for _, b := range testworld.Live(w.Blocks(ctx, "acme")) {
			w.DuplicateEvent(ctx, "acme", b.ID) // an output, by its ULID
		}
		settled()
		after := snapshot(ctx, t, w)
		if len(before) != len(after) {
			t.Fatalf("%s: state changed: %d entries before, %d after", phase, len(before), len(after))
		}
		for i := range before {
			if before[i] != after[i] {
				t.Fatalf("%s: state changed: %q became %q", phase, before[i], after[i])
			}
		}
	}
	repeat("retired", protocol.BlockRetiring, func() { settleRetired(t, w, "acme") })
	skew.Store(int64(time.Hour + time.Minute))
	repeat("deleted", protocol.BlockDeleted, func() { settle(t, w, "acme") })
}

// settleRetired runs the pipeline until every queue is empty, every group
// of tenant is RETIRED and no block is still being published or marked:
// what a pipeline looks like while its sources wait out the deletion delay.
func settleRetired(t *testing.T, w *testworld.World, tenant string) {
	t.Helper()
	err := w.Pipeline.Settle(context.Background(), 2*time.Second, settleTimeout, func(ctx context.Context) (bool, error) {
		for _, url := range w.Env.Deployment.QueueURLs {
			if n, err := eventsource.Pending(ctx, w.Env.Clients.SQS, url); err != nil || n > 0 {
				return false, err
			}
		}
		groups, err := w.Store.TenantGroups(ctx, tenant)
		if err != nil || len(groups) == 0 {
			return false, err
		}
		for _, g := range groups {
			if g.State != protocol.GroupRetired {
				return false, nil
			}
		}
		for _, b := range w.Blocks(ctx, tenant) {
			switch {
			case b.State == protocol.BlockRetiring && b.MarkVersionID == "",
				b.State == protocol.BlockLive && !b.Published,
				b.State == protocol.BlockClaimed, b.State == protocol.BlockPending:
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// snapshot lists every record's state and gen and every object version.
func snapshot(ctx context.Context, t *testing.T, w *testworld.World) []string {
	t.Helper()
	var out []string
	for _, b := range w.Blocks(ctx, "acme") {
		out = append(out, b.ID+" "+string(b.State)+" "+b.MetaVersionID+" "+b.MarkVersionID+" gen="+strconv.FormatInt(b.Gen, 10))
	}
	groups, err := w.Store.TenantGroups(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		out = append(out, g.Ref()+" "+string(g.State))
	}
	res, err := w.Env.Clients.S3.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: aws.String(w.Config.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res.Versions {
		out = append(out, aws.ToString(v.Key)+"@"+aws.ToString(v.VersionId))
	}
	sort.Strings(out)
	return out
}

package e2e

import (
	"context"
	"sort"
	"strconv"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/localstack/localrun"
	"github.com/sluice-dev/sluice/shared/eventsource"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/records"
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
	if err != nil || g.Version != 1 || g.State != records.GroupRetired {
		t.Fatalf("group after doubled delivery: version %d %s (%v); want version 1 RETIRED", g.Version, g.State, err)
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// S3 events for blocks that are already registered, retired or deleted
// change nothing: the same records at the same gens, the same objects.
func TestRepeatedEventsChangeNothing(t *testing.T) {
	t.Parallel()
	w := testworld.New(t, testworld.Options{})
	ctx := context.Background()
	blocks := halfDay(ctx, w, "acme", 2)
	settle(t, w, "acme")
	before := snapshot(ctx, t, w)
	for _, b := range blocks {
		w.DuplicateEvent(ctx, "acme", b.Dir)
	}
	for _, b := range testworld.Live(w.Blocks(ctx, "acme")) {
		w.DuplicateEvent(ctx, "acme", b.ID) // an output, by its ULID
	}
	settle(t, w, "acme")
	after := snapshot(ctx, t, w)
	if len(before) != len(after) {
		t.Fatalf("state changed: %d entries before, %d after", len(before), len(after))
	}
	for i := range before {
		if before[i] != after[i] {
			t.Fatalf("state changed: %q became %q", before[i], after[i])
		}
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

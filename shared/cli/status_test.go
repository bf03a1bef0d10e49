package cli

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/spec"
	"github.com/sluice-dev/sluice/shared/stream"
)

func TestStatusCommand(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	now := time.Now()

	r := w.run("status")
	r.wantCode(t, 0)
	if !strings.Contains(r.stdout, "No tenant has uploaded a block yet") {
		t.Errorf("empty deployment:\n%s", r.stdout)
	}

	// team-a: two live uploads, one rejected, a 12h group at v1 with two
	// partitions, one of them leased; a job in the compaction DLQ.
	dirs := gen(t, blockgen.Options{Tenant: "status", Blocks: 3})
	bs := w.uploadAndRegister("team-a", dirs[:2], nil)
	w.uploadAndRegister("team-a", dirs[2:], func(_ int, b *records.Block) {
		b.State, b.Reason = protocol.BlockRejected, "block file missing: team-a/X/index"
	})
	g := planning.GroupKey{Stream: stream.Stream{}.ID(), Level: 1, RangeStart: bs[0].MinT}
	head := records.Group{Tenant: "team-a", Key: g, Version: 1, State: protocol.GroupClaiming, CreatedAt: now.UnixMilli(),
		UpdatedAt: now.UnixMilli(), Partitions: 2, Sources: []string{bs[0].ID, bs[1].ID}}
	if err := w.store.CreateVersion(ctx, records.Group{}, head, now, now); err != nil {
		t.Fatal(err)
	}
	if err := w.store.SetGroupState(ctx, head, protocol.GroupClaiming, protocol.GroupPlanned, now); err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.Lease(ctx, "team-a", g, 1, 1, "compact@test-worker", now, now.Add(20*time.Minute), 3); err != nil {
		t.Fatal(err)
	}
	body, _ := messages.Encode(messages.Job{Tenant: "team-a", Group: g.String(), Version: 1, Partition: 0, Output: bs[0].ID})
	if _, err := w.env.Clients.SQS.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(w.env.Deployment.DLQURLs[spec.CompactionJobs]), MessageBody: aws.String(body),
		MessageGroupId: aws.String("team-a/" + bs[0].ID), MessageDeduplicationId: aws.String("dead-1"),
	}); err != nil {
		t.Fatal(err)
	}

	t.Run("table", func(t *testing.T) {
		r := w.run("status")
		r.wantCode(t, 0)
		for _, want := range []string{
			"TENANT team-a — 2 live block(s)",
			"BLOCKS", "LIVE", "REJECTED", "level 0 (uploads)",
			"L1", "2024-01-01 00:00 → 12:00", "v1", "PLANNED", "0/2 done, 1 running",
			"compact@test-worker", "in 19m",
			"block file missing: team-a/X/index",
			"compaction-jobs",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("status lacks %q", want)
			}
		}
		line := lineWith(r.stdout, "compaction-jobs ")
		if f := strings.Fields(line); len(f) < 4 || f[3] != "1" {
			t.Errorf("compaction-jobs line %q does not show one dead letter", line)
		}
		if !strings.Contains(line, "old") {
			t.Errorf("compaction-jobs line %q does not show the oldest dead letter's age", line)
		}
	})

	t.Run("json", func(t *testing.T) {
		r := w.run("status", "--json", "--tenant", "team-a")
		r.wantCode(t, 0)
		var rep StatusReport
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("not JSON: %v", err)
		}
		if len(rep.Tenants) != 1 || rep.Tenants[0].Tenant != "team-a" {
			t.Fatalf("tenants: %+v", rep.Tenants)
		}
		ts := rep.Tenants[0]
		if ts.LiveBlocks != 2 || len(ts.Rejected) != 1 || len(ts.Groups) != 1 || len(ts.Leases) != 1 {
			t.Errorf("tenant: %+v", ts)
		}
		if l := ts.Leases[0]; l.Owner != "compact@test-worker" || l.Partition != 1 || l.ExpiresInSeconds < 1000 {
			t.Errorf("lease: %+v", l)
		}
		var dead int
		for _, q := range rep.Queues {
			dead += q.DLQDepth
			if q.Queue == string(spec.CompactionJobs) && (q.DLQDepth != 1 || q.DLQOldestSeconds < 0) {
				t.Errorf("compaction-jobs: %+v", q)
			}
		}
		if dead != 1 || len(rep.Queues) != 4 {
			t.Errorf("queues: %+v", rep.Queues)
		}
	})

	// Another reader holds the dead letter for a second (a second 'sluice
	// status' peeking at once): status still finds it and its age.
	t.Run("dead letter hidden by another reader", func(t *testing.T) {
		out, err := w.env.Clients.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(w.env.Deployment.DLQURLs[spec.CompactionJobs]), VisibilityTimeout: 1, WaitTimeSeconds: 2})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("hide the dead letter: %d messages, %v", len(out.Messages), err)
		}
		r := w.run("status", "--json", "--tenant", "team-a")
		r.wantCode(t, 0)
		var rep StatusReport
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("not JSON: %v", err)
		}
		for _, q := range rep.Queues {
			if q.Queue == string(spec.CompactionJobs) && (q.DLQDepth != 1 || q.DLQOldestSeconds < 0) {
				t.Errorf("compaction-jobs while another reader holds its dead letter: %+v", q)
			}
		}
	})

	t.Run("refusals", func(t *testing.T) {
		r := w.run("status", "--tenant", "a b")
		r.wantCode(t, 2)
		r.wantOneLineError(t, "invalid tenant id")
		w.run("status", "extra").wantCode(t, 2)
		vars := map[string]string{}
		for k, v := range w.vars {
			vars[k] = v
		}
		vars["AWS_ENDPOINT_URL"] = "http://127.0.0.1:" + closedPort(t)
		r = runWith(t, vars, "status")
		r.wantCode(t, 1)
		r.wantOneLineError(t, "cannot reach the AWS endpoint "+vars["AWS_ENDPOINT_URL"])
	})
}

func lineWith(out, sub string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// TestMissingDeploymentSaysWhatToRun: after the emulator restarted (it
// forgets everything), a deployment's table and queues are gone; status
// says so and what to run, in one line.
func TestMissingDeploymentSaysWhatToRun(t *testing.T) {
	w := newWorld(t)
	vars := map[string]string{}
	for k, v := range w.vars {
		vars[k] = v
	}
	vars["SLUICE_TABLE"] = "forgotten-state"
	r := w.runVars(vars, "status")
	r.wantCode(t, 1)
	r.wantOneLineError(t, "ResourceNotFoundException", "the table does not exist", "forgets everything when it restarts", "sluice-local provision")
}

// TestStatusNotesThanosOverlaps: in a Thanos bucket, a range compacted
// into partition blocks is what Thanos' tools call overlapping blocks;
// status says so, once per range, and only there and only then.
func TestStatusNotesThanosOverlaps(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	const day = int64(24 * time.Hour / time.Millisecond)
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	register := func(id string, level int, minT, maxT int64, state protocol.BlockState) {
		t.Helper()
		b := records.Block{Tenant: "thanos", ID: id, MinT: minT, MaxT: maxT, State: protocol.BlockLive, Level: level, Gen: 1, Published: true, Series: 10, Samples: 100}
		if err := w.store.RegisterBlock(ctx, b, nil, nil); err != nil {
			t.Fatal(err)
		}
		if state == protocol.BlockLive {
			return
		}
		// A fixture, not a transition: status only reads the state.
		_, err := w.env.Clients.DynamoDB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(w.env.Deployment.Table),
			Key: map[string]types.AttributeValue{
				"PK": &types.AttributeValueMemberS{Value: "T#thanos"}, "SK": &types.AttributeValueMemberS{Value: "B#" + id}},
			UpdateExpression:          aws.String("SET #st = :st"),
			ExpressionAttributeNames:  map[string]string{"#st": "state"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":st": &types.AttributeValueMemberS{Value: string(state)}},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Day 1: two partitions, live. Day 2: one block. Day 3: two
	// partitions, one of them already retired.
	register("01HK1BZM80AAAAAAAAAAAAAAA1", 2, start, start+day, protocol.BlockLive)
	register("01HK1BZM80AAAAAAAAAAAAAAA2", 2, start, start+day, protocol.BlockLive)
	register("01HK1BZM80AAAAAAAAAAAAAAA3", 2, start+day, start+2*day, protocol.BlockLive)
	register("01HK1BZM80AAAAAAAAAAAAAAA4", 2, start+2*day, start+3*day, protocol.BlockLive)
	register("01HK1BZM80AAAAAAAAAAAAAAA5", 2, start+2*day, start+3*day, protocol.BlockRetiring)

	thanos := maps.Clone(w.vars)
	thanos["SLUICE_LAYOUT"], thanos["SLUICE_TENANT"] = "single-tenant", "thanos"
	r := w.runVars(thanos, "status")
	r.wantCode(t, 0)
	if n := strings.Count(r.stdout, "note: "); n != 1 {
		t.Errorf("%d notes, want 1 (day 1 only):\n%s", n, r.stdout)
	}
	for _, want := range []string{"2 live partition blocks of one stream", "2024-01-01 00:00 → 2024-01-02 00:00", "overlapped_blocks", "docs/thanos.md"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	r = w.runVars(thanos, "status", "--json")
	r.wantCode(t, 0)
	var rep StatusReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Tenants) != 1 || len(rep.Tenants[0].Notes) != 1 {
		t.Errorf("JSON notes: %+v", rep.Tenants)
	}
	// A Cortex or Mimir bucket: partitions are what its compactor expects.
	if r := w.run("status"); strings.Contains(r.stdout, "note: ") {
		t.Errorf("a multi-tenant bucket got a Thanos note:\n%s", r.stdout)
	}
}

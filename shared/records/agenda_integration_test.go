package records_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
)

func (w *world) count(pk string) int {
	w.t.Helper()
	out, err := w.db.Query(w.ctx, &dynamodb.QueryInput{TableName: aws.String(w.table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("PK = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk}}})
	if err != nil {
		w.t.Fatal(err)
	}
	return len(out.Items)
}

func names(es []records.AgendaEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%s %s/%s", e.Kind, e.Tenant, e.Subject))
	}
	slices.Sort(out)
	return out
}

// TestAgendaIsShardedAndReadDueFirst: entries of many tenants spread over
// the agenda's shards, not one hot key, and DueAll finds every kind due
// by then (and nothing later) in one Query per shard; DoneAgendaAll removes
// an entry.
func TestAgendaIsShardedAndReadDueFirst(t *testing.T) {
	w := newWorld(t)
	var want []string
	for i := range 40 {
		tenant := fmt.Sprintf("t%02d", i)
		kind := []records.AgendaKind{records.AgendaDelete, records.AgendaRange, records.AgendaOrphans, records.AgendaActive}[i%4]
		due := w.now.Add(time.Duration(i-20) * time.Minute)
		if kind == records.AgendaActive {
			due = time.UnixMilli(0)
		}
		if err := w.store.PutAgenda(w.ctx, kind, due, tenant, "s#1#0"); err != nil {
			t.Fatal(err)
		}
		if !due.After(w.now) {
			want = append(want, fmt.Sprintf("%s %s/s#1#0", kind, tenant))
		}
	}
	slices.Sort(want)
	used := 0
	for i := range records.AgendaShards {
		if w.count(fmt.Sprintf("AGENDA#%d", i)) > 0 {
			used++
		}
	}
	if used < 2 || w.count("AGENDA") != 0 {
		t.Errorf("40 tenants' entries fill %d of %d shards (and %d the unsharded key); want them spread", used, records.AgendaShards, w.count("AGENDA"))
	}
	due, err := w.store.DueAll(w.ctx, w.now)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(due); !slices.Equal(got, want) {
		t.Fatalf("due at now:\n%v\nwant:\n%v", got, want)
	}
	if err := w.store.DoneAgendaAll(w.ctx, due[:1]); err != nil {
		t.Fatal(err)
	}
	again, err := w.store.DueAll(w.ctx, w.now)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != len(due)-1 || slices.Contains(names(again), names(due[:1])[0]) {
		t.Errorf("after DoneAgendaAll of %v: %v", names(due[:1]), names(again))
	}
}

// TestAgendaOfAnEarlierReleaseIsNotLost: entries an earlier release wrote
// under the one unsharded key, kind first, are read when due, removed when
// done, and a finished version's ACTIVE entry is removed from there too.
func TestAgendaOfAnEarlierReleaseIsNotLost(t *testing.T) {
	w := newWorld(t)
	g := w.planned(records.Group{}, []records.Block{w.block("B1", protocol.BlockLive)}, 1)
	legacy := func(sk string) {
		t.Helper()
		_, err := w.db.PutItem(w.ctx, &dynamodb.PutItemInput{TableName: aws.String(w.table), Item: map[string]types.AttributeValue{
			"PK": &types.AttributeValueMemberS{Value: "AGENDA"}, "SK": &types.AttributeValueMemberS{Value: sk},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	legacy(fmt.Sprintf("DEL#%013d#acme#B0", w.now.Add(-time.Minute).UnixMilli()))
	legacy(fmt.Sprintf("DEL#%013d#acme#B9", w.now.Add(time.Hour).UnixMilli()))
	legacy(fmt.Sprintf("ACTIVE#%013d#acme#%s", 0, g.Key))
	// A fresh store, as after a deploy of this release.
	st := records.NewStore(w.db, w.table, nil)
	due, err := st.DueAll(w.ctx, w.now)
	if err != nil {
		t.Fatal(err)
	}
	got := names(due)
	for _, want := range []string{"DEL acme/B0", "ACTIVE acme/" + g.Key.String()} {
		if !slices.Contains(got, want) {
			t.Errorf("due after the upgrade: %v, want %s among them", got, want)
		}
	}
	if slices.Contains(got, "DEL acme/B9") {
		t.Errorf("an entry due in an hour is due now: %v", got)
	}
	for _, e := range due {
		if e.Kind == records.AgendaDelete {
			if err := st.DoneAgendaAll(w.ctx, []records.AgendaEntry{e}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Finishing the version removes its ACTIVE entry wherever it is.
	if err := st.SetGroupState(w.ctx, g, protocol.GroupPlanned, protocol.GroupSuperseded, w.now); err != nil {
		t.Fatal(err)
	}
	g.State = protocol.GroupSuperseded
	if err := st.FinishVersion(w.ctx, g, w.now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := w.count("AGENDA"); n != 1 {
		t.Errorf("%d entries left under the unsharded key, want only the one due in an hour", n)
	}
	late, err := st.DueAll(w.ctx, w.now.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(late); !slices.Contains(got, "DEL acme/B9") {
		t.Errorf("two hours on: %v, want the earlier release's DEL acme/B9", got)
	}
}

// DoneAgendaAll removes entries in batches of 25 (the store's client
// refuses a bigger one, as DynamoDB would) and leaves the others.
func TestDoneAgendaAllRemovesInBatches(t *testing.T) {
	w := newWorld(t)
	at := time.UnixMilli(1_700_000_000_000)
	for i := range 60 {
		if err := w.store.PutAgenda(w.ctx, records.AgendaDelete, at, "acme", fmt.Sprintf("01HK3QGM00JS67MS0A0DFM%04d", i)); err != nil {
			t.Fatal(err)
		}
	}
	due, err := w.store.DueAll(w.ctx, at)
	if err != nil || len(due) != 60 {
		t.Fatalf("%d entries due (%v), want 60", len(due), err)
	}
	if err := w.store.DoneAgendaAll(w.ctx, due[:55]); err != nil {
		t.Fatal(err)
	}
	left, err := w.store.DueAll(w.ctx, at)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names(left), names(due[55:])) {
		t.Fatalf("left %v, want %v", names(left), names(due[55:]))
	}
}

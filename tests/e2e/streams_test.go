package e2e

import (
	"context"
	"maps"
	"testing"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/cli"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/stream"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// TestStreamsAreNeverMerged: one tenant, three producers of the same
// series names — Prometheus servers east (two replicas that differ only in
// the replica label) and west, and east's blocks downsampled to 5m. Each
// stream is compacted on its own: every output carries its stream's
// labels, without the replica label; no output has sources of two streams;
// east's replicas are deduplicated; and the sample-level check, made per
// stream, holds. (Before streams, east and west were merged under east's
// labels and west's samples were lost.)
func TestStreamsAreNeverMerged(t *testing.T) {
	t.Parallel()
	w := testworld.New(t, testworld.Options{Configure: func(c *config.Config) { c.ReplicaLabels = []string{"replica"} }})
	ctx := context.Background()
	east := map[string]string{"cluster": "east"}
	west := map[string]string{"cluster": "west"}
	gens := []blockgen.Options{
		{Tenant: "acme", Start: day(), Blocks: 6, Series: 30, Seed: 11, ThanosFiles: true, ExternalLabels: east,
			ReplicationFactor: 2, ReplicaLabel: "replica"},
		{Tenant: "acme", Start: day(), Blocks: 6, Series: 30, Seed: 12, ThanosFiles: true, ExternalLabels: west},
		{Tenant: "acme", Start: day(), Blocks: 6, Series: 30, Seed: 13, ThanosFiles: true, ExternalLabels: east, Resolution: 300_000},
	}
	streamOf := map[string]string{} // uploaded block → stream id
	want := map[string]stream.Stream{}
	for _, o := range gens {
		for _, b := range w.Generate(o) {
			st := stream.Of(b.Meta, w.Config.ReplicaLabels)
			streamOf[b.Meta.ULID.String()] = st.ID()
			want[st.ID()] = st
			w.Upload(ctx, "acme", b.Dir)
		}
	}
	if len(want) != 3 {
		t.Fatalf("the workload has %d streams, want 3", len(want))
	}
	settle(t, w, "acme")

	live := testworld.Live(w.Blocks(ctx, "acme"))
	perStream := map[string]int{}
	for _, b := range live {
		m, err := blockmeta.Parse([]byte(b.Meta), b.Key())
		if err != nil {
			t.Fatal(err)
		}
		st, ok := want[b.Stream]
		if !ok {
			t.Fatalf("live block %s is of stream %q, which no upload has", b.Key(), b.Stream)
		}
		perStream[b.Stream]++
		if m.Thanos == nil || !maps.Equal(m.Thanos.Labels, st.Labels) || m.Thanos.Downsample.Resolution != st.Resolution {
			t.Errorf("live block %s carries %+v, want its stream's labels %s", b.Key(), m.Thanos, st)
		}
		if b.ProducedBy == "" {
			t.Errorf("live block %s is an upload: the stream was not compacted", b.Key())
		}
		for _, src := range m.Compaction.Sources {
			if s := streamOf[src.String()]; s != b.Stream {
				t.Errorf("output %s (stream %s) has source %s of stream %s", b.Key(), st, src, s)
			}
		}
	}
	for id, st := range want {
		if perStream[id] == 0 {
			t.Errorf("stream %s has no live block", st)
		}
	}
	if err := w.CheckQuiescent(ctx, "acme"); err != nil {
		t.Fatal(err)
	}

	rep, err := cli.GatherStatus(ctx, w.Store, w.Env.Clients.SQS, w.Config, cli.StatusOptions{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	for _, s := range rep.Tenants[0].Streams {
		shown[s.Labels] = s.LiveBlocks > 0
	}
	for _, st := range want {
		if !shown[st.String()] {
			t.Errorf("sluice status shows streams %v, want %s with live blocks", shown, st)
		}
	}
}

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// TestThanosBucket: a Thanos bucket — blocks at the root, two Prometheus
// servers (cluster east and west), each two replicas told apart by
// replica. With the partition limit set low, as an operator tuned for
// Cortex might, Sluice still writes one block per range and stream there
// (SLUICE_PARTITIONING=auto), so Thanos' verifier sees no overlap; with
// SLUICE_PARTITIONING=limits it partitions, and the same check sees the
// overlapping blocks Thanos would report.
func TestThanosBucket(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		single      bool
		wantOverlap bool
	}{
		{"auto: one block per range", true, false},
		{"limits: partitions overlap", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := testworld.New(t, testworld.Options{Configure: func(c *config.Config) {
				c.Layout.SingleTenant = "thanos"
				c.ReplicaLabels = []string{"replica"}
				c.Policy.MaxSeriesPerPartition = 40 // 2 × 30 series per range: two partitions by the limits
				c.Policy.SingleBlock = tc.single    // what SLUICE_PARTITIONING=auto|limits sets in this layout
			}})
			ctx := context.Background()
			for i, cluster := range []string{"east", "west"} {
				for _, b := range w.Generate(blockgen.Options{Tenant: "thanos", Start: day(), Blocks: 6, Series: 30, Seed: int64(20 + i),
					ThanosFiles: true, ExternalLabels: map[string]string{"cluster": cluster}, ReplicationFactor: 2, ReplicaLabel: "replica"}) {
					w.Upload(ctx, "thanos", b.Dir)
				}
			}
			settle(t, w, "thanos")
			if err := w.CheckQuiescent(ctx, "thanos"); err != nil {
				t.Fatal(err)
			}

			// Thanos' overlapped_blocks check: live blocks grouped by
			// external labels and resolution must not overlap in time.
			type span struct{ minT, maxT int64 }
			byLabels := map[string][]span{}
			overlaps := 0
			live := testworld.Live(w.Blocks(ctx, "thanos"))
			for _, b := range live {
				m, err := blockmeta.Parse([]byte(b.Meta), b.Key())
				if err != nil {
					t.Fatal(err)
				}
				if m.Thanos == nil || m.Thanos.Labels["replica"] != "" || m.Thanos.Labels["cluster"] == "" {
					t.Errorf("live block %s: thanos section %+v, want its cluster without the replica", b.Key(), m.Thanos)
					continue
				}
				k := fmt.Sprint(m.Thanos.Labels, m.Thanos.Downsample.Resolution)
				for _, o := range byLabels[k] {
					if b.MinT < o.maxT && o.minT < b.MaxT {
						overlaps++
					}
				}
				byLabels[k] = append(byLabels[k], span{b.MinT, b.MaxT})
			}
			if len(byLabels) != 2 {
				t.Errorf("live blocks carry %d label sets, want the two clusters'", len(byLabels))
			}
			if (overlaps > 0) != tc.wantOverlap {
				t.Errorf("%d overlapping pairs among %d live blocks, want overlaps: %v", overlaps, len(live), tc.wantOverlap)
			}
			// The bucket's root holds the live blocks' directories (no
			// tenant prefix), and nothing else once the sources are gone.
			out, err := w.Env.Clients.S3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(w.Config.Bucket), Delimiter: aws.String("/")})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.CommonPrefixes) != len(live) {
				t.Errorf("bucket root holds %d directories, want the %d live blocks", len(out.CommonPrefixes), len(live))
			}
			for _, p := range out.CommonPrefixes {
				id := strings.TrimSuffix(aws.ToString(p.Prefix), "/")
				if b, ok := findBlock(live, id); !ok || b.State != protocol.BlockLive {
					t.Errorf("bucket root holds %s, which is no live block", id)
				}
			}
		})
	}
}

func findBlock(bs []records.Block, id string) (records.Block, bool) {
	for _, b := range bs {
		if b.ID == id {
			return b, true
		}
	}
	return records.Block{}, false
}

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/spec"
	"github.com/sluice-dev/sluice/tests/testworld"
)

// Levels of the chaos deployment: 2h uploads compact to 4h, then 8h — two
// levels in a short span, so a small workload goes through both and a
// late block meets an already compacted range.
var chaosRanges = []time.Duration{4 * time.Hour, 8 * time.Hour}

// tenantBlocks is one tenant's share of the pool.
type tenantBlocks struct {
	tenant string
	blocks []blockgen.Block // uploaded first, in a shuffled order
	late   []blockgen.Block // uploaded once the pipeline has been at work
}

// pool is the workload every seed draws from, generated once before any
// seed runs (blockgen must not run alongside anything that maps TSDB
// files; see tests/races/main_test.go). Each seed has its own bucket, so
// the same blocks can be uploaded by every seed.
type pool []tenantBlocks

// span is an 8h span that ended two days ago.
func span() time.Time { return time.Now().UTC().Truncate(24*time.Hour).Add(-48 * time.Hour) }

func generatePool(dir string) (pool, error) {
	start := span()
	type profile struct {
		tenant string
		o      blockgen.Options
	}
	profiles := []profile{
		// Thanos sidecar blocks with files listed and native histograms.
		{"acme", blockgen.Options{Series: 12, Histograms: true, ThanosFiles: true}},
		// Replicated ingesters: every range twice, identical samples.
		{"beta", blockgen.Options{Series: 10, ReplicationFactor: 2, ThanosFiles: true}},
		// Plain Prometheus blocks: meta.json lists no files (one LIST each).
		{"gamma", blockgen.Options{Series: 14}},
	}
	var out pool
	for i, p := range profiles {
		o := p.o
		o.Tenant, o.Start, o.Blocks, o.SamplesPerSeries, o.Seed = p.tenant, start, 4, 12, int64(i+1)
		bs, err := blockgen.Generate(filepath.Join(dir, p.tenant), o)
		if err != nil {
			return nil, err
		}
		tb := tenantBlocks{tenant: p.tenant, blocks: bs}
		// Late: a copy of the 2h–4h range with 4 more series (same seed, so
		// the shared series hold the same samples), and one of 6h–8h.
		for _, at := range []time.Duration{2 * time.Hour, 6 * time.Hour} {
			l := o
			l.Start, l.Blocks, l.ReplicationFactor, l.Series = start.Add(at), 1, 1, o.Series+4
			lb, err := blockgen.Generate(filepath.Join(dir, p.tenant, fmt.Sprintf("late-%v", at)), l)
			if err != nil {
				return nil, err
			}
			tb.late = append(tb.late, lb...)
		}
		out = append(out, tb)
	}
	return out, nil
}

// workload uploads one seed's blocks as shippers would: shuffled, some S3
// events duplicated and delayed, late blocks after a while, and now and
// then a block uploaded a second time.
type workload struct {
	w       *testworld.World
	plan    *plan
	rng     *rand.Rand
	tenants []tenantBlocks
}

func (wl *workload) run(ctx context.Context) error {
	type up struct {
		tenant string
		b      blockgen.Block
	}
	var ups []up
	for _, t := range wl.tenants {
		for _, b := range t.blocks {
			ups = append(ups, up{t.tenant, b})
		}
	}
	wl.rng.Shuffle(len(ups), func(i, j int) { ups[i], ups[j] = ups[j], ups[i] })
	wl.plan.count(fShuffledUploads)
	for _, u := range ups {
		wl.w.Upload(ctx, u.tenant, u.b.Dir)
		if wl.rng.Float64() < 0.3 {
			if err := wl.event(ctx, u.tenant, u.b.Dir, wl.rng.IntN(5)); err != nil {
				return err
			}
		}
		sleep(ctx, time.Duration(wl.rng.IntN(300))*time.Millisecond)
	}
	// Late blocks arrive while (or after) the first versions run.
	sleep(ctx, time.Duration(2000+wl.rng.IntN(6000))*time.Millisecond)
	for _, t := range wl.tenants {
		for _, b := range t.late {
			if wl.rng.Float64() < 0.6 {
				wl.plan.count(fLateBlock)
				wl.w.Upload(ctx, t.tenant, b.Dir)
				if wl.rng.Float64() < 0.3 {
					if err := wl.event(ctx, t.tenant, b.Dir, wl.rng.IntN(5)); err != nil {
						return err
					}
				}
				sleep(ctx, time.Duration(wl.rng.IntN(2000))*time.Millisecond)
			}
		}
	}
	// A shipper that retries uploads a block it already shipped.
	if wl.rng.Float64() < 0.5 {
		u := ups[wl.rng.IntN(len(ups))]
		sleep(ctx, time.Duration(wl.rng.IntN(4000))*time.Millisecond)
		wl.plan.count(fReupload)
		if err := testworld.UploadBlock(ctx, wl.w.Env.Clients.S3, wl.w.Config.Bucket, wl.w.Config.Layout, u.tenant, u.b.Dir); err != nil {
			return err
		}
	}
	return nil
}

// event sends another S3 notification for a block's meta.json, delayed by
// delay seconds: S3's at-least-once delivery, late and out of order.
// Half of them are shaped as AWS sends them (URL-encoded key, zoned time,
// a sequencer), half as the emulator does.
func (wl *workload) event(ctx context.Context, tenant, dir string, delay int) error {
	k, err := testworld.BlockKeyOf(wl.w.Config.Layout, tenant, dir)
	if err != nil {
		return err
	}
	key := k.Object(blockkey.MetaFile)
	now := time.Now().UTC()
	var body string
	if wl.rng.IntN(2) == 0 {
		body = fmt.Sprintf(`{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"us-east-1",`+
			`"eventTime":"%s","eventName":"ObjectCreated:Put","s3":{"s3SchemaVersion":"1.0","bucket":{"name":%q,`+
			`"arn":"arn:aws:s3:::%s"},"object":{"key":%q,"size":1}}}]}`,
			now.Format("2006-01-02T15:04:05.000"), wl.w.Config.Bucket, wl.w.Config.Bucket, key)
	} else {
		body = fmt.Sprintf(`{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"us-east-1",`+
			`"eventTime":"%s","eventName":"ObjectCreated:Put","s3":{"s3SchemaVersion":"1.0","bucket":{"name":%q,`+
			`"arn":"arn:aws:s3:::%s"},"object":{"key":%q,"size":1,"sequencer":"%016X"}}}]}`,
			now.Format(time.RFC3339Nano), wl.w.Config.Bucket, wl.w.Config.Bucket, urlEncode(key), now.UnixNano())
	}
	wl.plan.count(fDupEvent)
	_, err = wl.w.Env.Clients.SQS.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(wl.w.Env.Deployment.QueueURLs[spec.BlockEvents]), MessageBody: aws.String(body),
		DelaySeconds: int32(delay),
	})
	return err
}

// urlEncode encodes a key as S3 does in event records.
func urlEncode(key string) string {
	out := make([]byte, 0, len(key)*3)
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			out = append(out, c)
		default:
			out = append(out, fmt.Sprintf("%%%02X", c)...)
		}
	}
	return string(out)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

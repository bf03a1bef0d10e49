package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/schollz/progressbar/v3"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/records"
)

func init() {
	register(&command{
		name:    "adopt",
		summary: "register the blocks a bucket already holds (dry run unless --apply), to take over from another compactor",
		usage:   "[--apply] [--tenant T] [--start-after KEY] [--json]",
		aws:     true,
		help: `Sluice learns of blocks from their meta.json's S3 notification, so a bucket
that already holds blocks — one that 'thanos compact' or a Cortex or Mimir
compactor has been looking after — is unknown to it. adopt lists the bucket
(or one tenant) once, paginated, and says per tenant what Sluice would do
with each block it does not know yet:

  register     registered LIVE and compacted with its range, at any level
               (a Thanos 8h block is a source of Sluice's 12h range)
  above top    registered LIVE but longer than Sluice's top range (a Thanos
               2d or 14d block): kept as it is, never a source
  no-compact   carries no-compact-mark.json: registered, never a source
  marked       carries deletion-mark.json: registered RETIRING and deleted
               when the deletion delay from its mark ends, as its marker
               asked
  bad meta     meta.json cannot be read: registered REJECTED with the reason
               ('sluice status' lists it), never touched
  partial      no meta.json (an upload in progress or abandoned): left
               alone, and listed
  known        Sluice has its record already: left alone

Nothing is changed without --apply. With it, each block to register is sent
to the planner as its meta.json's notification would be, and the planner
registers it with every check an upload gets. Sending again is harmless (the
planner recognises a block it knows), so an interrupted run is resumed with
--start-after and the last key it printed, or simply run again.

This is the only LIST wider than one block that Sluice ever makes, and only
when asked. Stop the other compactor first (docs/migrate.md).`,
		setup: func(fs *flag.FlagSet) runFunc {
			apply := fs.Bool("apply", false, "send the blocks to register to the planner (default: a dry run)")
			tenant := fs.String("tenant", "", "only this tenant")
			startAfter := fs.String("start-after", "", "resume after this key (printed by an interrupted run)")
			asJSON := fs.Bool("json", false, "print JSON for scripts")
			return func(ctx context.Context, e *Env, args []string) error {
				if err := checkTenantArgs(args, *tenant); err != nil {
					return err
				}
				d, err := e.openDeployment(ctx)
				if err != nil {
					return err
				}
				cfg, c, st := d.cfg, d.clients, d.store
				rep, err := Adopt(ctx, AdoptDeps{S3: c.S3, SQS: c.SQS, Records: st},
					AdoptOptions{Bucket: cfg.Bucket, Layout: cfg.Layout, Policy: cfg.Policy, Tenant: *tenant, Apply: *apply,
						StartAfter: *startAfter, BlockEvents: cfg.Queues.BlockEvents, Progress: e.progress()})
				if *asJSON {
					enc := json.NewEncoder(e.Stdout)
					enc.SetIndent("", "  ")
					if jerr := enc.Encode(rep); jerr != nil {
						return jerr
					}
				} else {
					rep.Render(e.Stdout)
				}
				if err != nil {
					return fmt.Errorf("%w; resume with: sluice adopt --apply --start-after %q", err, rep.LastKey)
				}
				return nil
			}
		},
	})
}

// AdoptS3 is what adopt reads of the bucket.
type AdoptS3 interface {
	ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, opts ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

// AdoptSQS sends the planner its notifications.
type AdoptSQS interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

// AdoptRecords tells adopt which blocks Sluice knows.
type AdoptRecords interface {
	GetBlock(ctx context.Context, tenant, id string) (records.Block, bool, error)
}

// AdoptDeps are adopt's clients.
type AdoptDeps struct {
	S3      AdoptS3
	SQS     AdoptSQS
	Records AdoptRecords
}

// AdoptOptions say what to adopt.
type AdoptOptions struct {
	Bucket string
	Layout blockkey.Layout
	// Policy places a block at its level, and says which are longer than
	// Sluice's top range.
	Policy planning.Policy
	// Tenant limits the LIST to one tenant ("" = every tenant).
	Tenant string
	// Apply sends the blocks to register; false is a dry run.
	Apply bool
	// StartAfter resumes a LIST after this key.
	StartAfter string
	// PageSize is the LIST's page (0: S3's 1,000).
	PageSize    int32
	BlockEvents string
	// Progress receives a spinner with the keys listed (nil: none).
	Progress io.Writer
	// Now stamps the notifications (nil: time.Now).
	Now func() time.Time
}

// What adopt does with a block it finds.
const (
	AdoptRegister  = "register"
	AdoptAboveTop  = "above top"
	AdoptNoCompact = "no-compact"
	AdoptMarked    = "marked"
	AdoptBadMeta   = "bad meta"
	AdoptPartial   = "partial"
	AdoptKnown     = "known"
)

// adoptKinds is the order the report's columns take.
var adoptKinds = []string{AdoptRegister, AdoptAboveTop, AdoptNoCompact, AdoptMarked, AdoptBadMeta, AdoptPartial, AdoptKnown}

// AdoptReport is what adopt found, per tenant, and what it sent.
type AdoptReport struct {
	Applied bool `json:"applied"`
	// Tenants counts the blocks of each kind, per tenant.
	Tenants map[string]map[string]int `json:"tenants"`
	// Partial lists the block prefixes with no meta.json.
	Partial []string `json:"partial,omitempty"`
	// Sent is how many notifications went to the planner.
	Sent int `json:"sent"`
	// Keys is how many keys the LIST returned; Other counts those that
	// are no block file (a bucket index, global markers, debug files).
	Keys  int `json:"keys"`
	Other int `json:"other"`
	// LastKey is the last key of the last block fully handled: where
	// --start-after resumes.
	LastKey string `json:"lastKey"`
}

func (r *AdoptReport) count(tenant, kind string) {
	if r.Tenants[tenant] == nil {
		r.Tenants[tenant] = map[string]int{}
	}
	r.Tenants[tenant][kind]++
}

// Render prints the report as a table, one row per tenant.
func (r AdoptReport) Render(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\t"+strings.ToUpper(strings.Join(adoptKinds, "\t")))
	tenants := make([]string, 0, len(r.Tenants))
	for t := range r.Tenants {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	for _, t := range tenants {
		row := []string{t}
		for _, k := range adoptKinds {
			row = append(row, fmt.Sprint(r.Tenants[t][k]))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	for _, p := range r.Partial {
		fmt.Fprintf(w, "partial upload, left alone: %s (no meta.json)\n", p)
	}
	fmt.Fprintf(w, "%d keys listed (%d outside the block layout)\n", r.Keys, r.Other)
	if r.Applied {
		fmt.Fprintf(w, "%d blocks sent to the planner; 'sluice status' shows them registered\n", r.Sent)
	} else {
		fmt.Fprintln(w, "dry run: nothing changed; run again with --apply to register")
	}
}

// foundBlock is what the LIST showed of one block's directory.
type foundBlock struct {
	key     blockkey.Key // File empty
	files   map[string]bool
	lastKey string
}

// Adopt lists the bucket (or one tenant) once and handles every block
// directory it finds, in key order: blocks come out of the LIST whole, one
// after another, so a block is handled as soon as the next one starts and
// LastKey always ends a block that is done.
func Adopt(ctx context.Context, d AdoptDeps, o AdoptOptions) (AdoptReport, error) {
	rep := AdoptReport{Applied: o.Apply, Tenants: map[string]map[string]int{}, LastKey: o.StartAfter}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Apply && o.BlockEvents == "" {
		return rep, usagef("no block-events queue configured (SLUICE_BLOCK_EVENTS_URL): --apply has nowhere to send")
	}
	var spin *progressbar.ProgressBar
	if o.Progress != nil {
		spin = progressbar.NewOptions(-1, progressbar.OptionSetWriter(o.Progress), progressbar.OptionShowCount(),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish(),
			progressbar.OptionSetDescription("listing keys"))
		defer spin.Finish()
	}
	in := &s3.ListObjectsV2Input{Bucket: aws.String(o.Bucket)}
	if p := o.Layout.TenantPrefix(o.Tenant); p != "" {
		in.Prefix = aws.String(p)
	}
	if o.StartAfter != "" {
		in.StartAfter = aws.String(o.StartAfter)
	}
	if o.PageSize > 0 {
		in.MaxKeys = aws.Int32(o.PageSize)
	}
	var cur *foundBlock
	for {
		page, err := d.S3.ListObjectsV2(ctx, in)
		if err != nil {
			return rep, fmt.Errorf("list s3://%s/%s: %w", o.Bucket, aws.ToString(in.Prefix), err)
		}
		for _, obj := range page.Contents {
			key := aws.ToString(obj.Key)
			rep.Keys++
			if spin != nil {
				_ = spin.Add(1)
			}
			k, err := blockkey.Parse(key, o.Layout)
			if err != nil {
				rep.Other++
				continue
			}
			if cur != nil && (cur.key.Tenant != k.Tenant || cur.key.Block != k.Block) {
				if err := adoptBlock(ctx, d, o, cur, &rep); err != nil {
					return rep, err
				}
				rep.LastKey = cur.lastKey
				cur = nil
			}
			if cur == nil {
				bk := k
				bk.File = ""
				cur = &foundBlock{key: bk, files: map[string]bool{}}
			}
			cur.files[k.File] = true
			cur.lastKey = key
		}
		if !aws.ToBool(page.IsTruncated) {
			break
		}
		in.ContinuationToken = page.NextContinuationToken
	}
	if cur != nil {
		if err := adoptBlock(ctx, d, o, cur, &rep); err != nil {
			return rep, err
		}
		rep.LastKey = cur.lastKey
	}
	return rep, nil
}

// adoptBlock classifies one block directory and, with Apply, sends the
// planner its meta.json's notification.
func adoptBlock(ctx context.Context, d AdoptDeps, o AdoptOptions, f *foundBlock, rep *AdoptReport) error {
	tenant, id := f.key.Tenant, f.key.Block.String()
	if !f.files[blockkey.MetaFile] {
		rep.count(tenant, AdoptPartial)
		rep.Partial = append(rep.Partial, f.key.BlockPrefix())
		return nil
	}
	if _, known, err := d.Records.GetBlock(ctx, tenant, id); err != nil {
		return fmt.Errorf("block %s/%s: %w", tenant, id, err)
	} else if known {
		rep.count(tenant, AdoptKnown)
		return nil
	}
	kind, err := adoptKind(ctx, d.S3, o, f)
	if err != nil {
		return err
	}
	rep.count(tenant, kind)
	if !o.Apply {
		return nil
	}
	if err := sendMetaEvent(ctx, d.SQS, o, f.key.Object(blockkey.MetaFile)); err != nil {
		return err
	}
	rep.Sent++
	return nil
}

// adoptKind says what the planner will make of a block it does not know:
// its marks first (what the planner honours), then its meta.json.
func adoptKind(ctx context.Context, c AdoptS3, o AdoptOptions, f *foundBlock) (string, error) {
	switch {
	case f.files[blockkey.DeletionMarkFile]:
		return AdoptMarked, nil
	case f.files[blockkey.NoCompactMarkFile]:
		return AdoptNoCompact, nil
	}
	key := f.key.Object(blockkey.MetaFile)
	res, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(o.Bucket), Key: aws.String(key)})
	if err != nil {
		return "", fmt.Errorf("get %s: %w", key, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", key, err)
	}
	meta, err := blockmeta.Parse(body, key)
	if err != nil {
		if errors.Is(err, blockmeta.ErrInvalid) {
			return AdoptBadMeta, nil
		}
		return "", err
	}
	if meta.ULID != f.key.Block {
		return AdoptBadMeta, nil
	}
	top := o.Policy.TopLevel()
	if o.Policy.LevelOf(meta.MinTime, meta.MaxTime) >= top {
		if _, ok := o.Policy.GroupFor("", top, meta.MinTime, meta.MaxTime); !ok {
			return AdoptAboveTop, nil
		}
	}
	return AdoptRegister, nil
}

// sendMetaEvent sends the planner an S3 ObjectCreated notification for
// key, shaped as S3 sends it (no VersionId: the planner reads the current
// version, as it does for an emulator's events).
func sendMetaEvent(ctx context.Context, c AdoptSQS, o AdoptOptions, key string) error {
	ev := map[string]any{"Records": []map[string]any{{
		"eventVersion": "2.1", "eventSource": "aws:s3", "eventTime": o.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
		"eventName": "ObjectCreated:Put",
		"s3": map[string]any{
			"s3SchemaVersion": "1.0",
			"bucket":          map[string]any{"name": o.Bucket, "arn": "arn:aws:s3:::" + o.Bucket},
			"object":          map[string]any{"key": url.QueryEscape(key)},
		},
	}}}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(o.BlockEvents), MessageBody: aws.String(string(body))}); err != nil {
		return fmt.Errorf("send the notification of %s: %w", key, err)
	}
	return nil
}

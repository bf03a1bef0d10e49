package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/overrides"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/retention"
	"github.com/sluice-dev/sluice/shared/s3errors"
	"github.com/sluice-dev/sluice/shared/spec"
	"github.com/sluice-dev/sluice/shared/stream"
)

func init() {
	register(&command{
		name:    "status",
		summary: "show blocks, groups, leases and dead-letter queues per tenant",
		usage:   "[--tenant T] [--json] [--all] [--html FILE]",
		aws:     true,
		help: `Shows, per tenant: blocks by level and state; group versions with their
state and partition progress; compaction leases held and when they expire;
blocks Sluice rejected and why. Then every queue: messages waiting and in
flight, and its dead-letter queue's depth and oldest message's age. A message
in a dead-letter queue failed five times; 'sluice replay-dlq' sends it back.

It reads the state table (one Query per tenant and per group shown) and asks
SQS for queue attributes; it never lists the bucket.

A tenant's streams are its producers (one Prometheus server, or one set
of replicas: external labels without the replica labels, and the
resolution); blocks of different streams are never compacted together.

Block states: LIVE (readable, plannable), CLAIMED (a source of a running
group version), RETIRING (compacted; deleted after the deletion delay),
DELETED, PENDING (an output not yet live), DISCARDED (an output of a
superseded version), REJECTED (never compacted; the reason is shown),
QUARANTINED (compaction failed on it again and again; readable, never a
source until 'sluice retry' releases it). A group is QUARANTINED when its
jobs kept failing for a reason that names no block.

--html FILE writes the status page ('sluice ui' serves it live) to FILE
instead: the blocks on a timeline by level, every group with its
partitions, queues and dead letters, in one self-contained HTML file.`,
		setup: func(fs *flag.FlagSet) runFunc {
			tenant := fs.String("tenant", "", "only this tenant")
			asJSON := fs.Bool("json", false, "print JSON for scripts")
			all := fs.Bool("all", false, "list every group, finished ones too")
			html := fs.String("html", "", "write the status page to this file instead")
			return func(ctx context.Context, e *Env, args []string) error {
				if err := checkTenantArgs(args, *tenant); err != nil {
					return err
				}
				d, err := e.openDeployment(ctx)
				if err != nil {
					return err
				}
				cfg, c, st := d.cfg, d.clients, d.store
				ov, ovErr := LoadOverrides(ctx, c.S3, cfg)
				rep, err := GatherStatus(ctx, st, c.SQS, cfg, StatusOptions{Tenant: *tenant, AllGroups: *all || *asJSON,
					Overrides: ov, OverridesError: ovErr, Detail: *html != ""})
				if err != nil {
					return err
				}
				if *html != "" {
					return WriteStatusPage(*html, rep)
				}
				if *asJSON {
					enc := json.NewEncoder(e.Stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(rep)
				}
				rep.Render(e.Stdout, *all)
				return nil
			}
		},
	})
}

// WriteStatusPage writes the status page of rep to path, whole or not at
// all.
func WriteStatusPage(path string, rep *StatusReport) error {
	var b strings.Builder
	if err := rep.RenderHTML(&b, false); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

// StatusOptions narrow GatherStatus.
type StatusOptions struct {
	// Tenant limits the report to one tenant ("" = all).
	Tenant string
	// AllGroups reads partition progress of finished groups too.
	AllGroups bool
	// Now is the clock; zero means time.Now.
	Now time.Time
	// Overrides are the runtime overrides in force (LoadOverrides), and
	// OverridesError why the object in the bucket is not.
	Overrides      overrides.Overrides
	OverridesError error
	// Detail reads what the status page shows besides: every block, every
	// group's partitions, and the ranges waiting to close.
	Detail bool
}

// LoadOverrides reads the runtime overrides object as the functions do;
// err says why it is not in force (then the overrides are none).
func LoadOverrides(ctx context.Context, c S3Reader, cfg config.Config) (overrides.Overrides, error) {
	cache := &overrides.Cache{}
	return cache.Get(ctx, time.Now(), func(ctx context.Context) ([]byte, bool, error) {
		res, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(cfg.Bucket), Key: aws.String(overrides.Key(cfg.Layout))})
		if s3errors.IsNotFound(err) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		defer res.Body.Close()
		data, err := io.ReadAll(io.LimitReader(res.Body, overrides.MaxBytes))
		return data, err == nil, err
	})
}

// StatusReport is what `sluice status` shows; its JSON form is stable
// for scripts.
type StatusReport struct {
	At      time.Time      `json:"at"`
	Bucket  string         `json:"bucket"`
	Table   string         `json:"table"`
	Tenants []TenantStatus `json:"tenants"`
	Queues  []QueueStatus  `json:"queues"`
	// QueuesNote explains missing queue information.
	QueuesNote string `json:"queuesNote,omitempty"`
	// OverridesError says why the runtime overrides object is not in
	// force (the functions keep the last good one and log the same).
	OverridesError string `json:"overridesError,omitempty"`
}

// TenantStatus is one tenant's state.
type TenantStatus struct {
	Tenant string `json:"tenant"`
	// Blocks counts blocks by level, then state.
	Blocks []LevelCount `json:"blocks"`
	// LiveBlocks / LiveSamples sum the LIVE blocks.
	LiveBlocks  int    `json:"liveBlocks"`
	LiveSamples uint64 `json:"liveSamples"`
	// Streams are the tenant's producers: blocks of different streams are
	// never compacted together.
	Streams  []StreamStatus  `json:"streams"`
	Groups   []GroupStatus   `json:"groups"`
	Leases   []LeaseStatus   `json:"leases"`
	Rejected []RejectedBlock `json:"rejected"`
	// Quarantined lists the blocks and groups Sluice gave up on after
	// repeated failures, with the reason; 'sluice retry' releases them.
	Quarantined []Quarantined `json:"quarantined"`
	// Overrides are the tenant's runtime overrides ("retention 90d", ...).
	Overrides []string `json:"overrides,omitempty"`
	// Retention says what retention deletes next and when (nil when no
	// retention is set).
	Retention *RetentionStatus `json:"retention,omitempty"`
	// Notes say what an operator's other tools will make of the bucket:
	// in a Thanos bucket, the partitioned outputs Thanos' tools report as
	// overlapping blocks.
	Notes []string `json:"notes,omitempty"`
	// BlockList is every block but the deleted and discarded ones, and
	// Waiting the ranges that wait to close (StatusOptions.Detail).
	BlockList []BlockStatus  `json:"blockList,omitempty"`
	Waiting   []WaitingRange `json:"waiting,omitempty"`
}

// BlockStatus is one block on the status page's timeline.
type BlockStatus struct {
	ID     string `json:"id"`
	Stream string `json:"stream"`
	Level  int    `json:"level"`
	State  string `json:"state"`
	MinT   int64  `json:"minTime"`
	MaxT   int64  `json:"maxTime"`
	// PartitionCount/PartitionID: 0 when the block is not partitioned.
	PartitionCount int    `json:"partitionCount,omitempty"`
	PartitionID    int    `json:"partitionId,omitempty"`
	Series         uint64 `json:"series"`
	Samples        uint64 `json:"samples"`
	// ProducedBy is the partition that wrote an output; ClaimedBy the
	// version a source is claimed by.
	ProducedBy string `json:"producedBy,omitempty"`
	ClaimedBy  string `json:"claimedBy,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// PartitionStatus is one partition of a group's current version.
type PartitionStatus struct {
	Index      int    `json:"index"`
	State      string `json:"state"`
	Owner      string `json:"owner,omitempty"`
	Attempt    int    `json:"attempt"`
	LeaseUntil int64  `json:"leaseUntil,omitempty"`
	Output     string `json:"output,omitempty"`
	Empty      bool   `json:"empty,omitempty"`
	Failures   int    `json:"failures,omitempty"`
	LastError  string `json:"lastError,omitempty"`
}

// WaitingRange is a group range that is not ready: the planner looks at it
// again when it closes (its close delay after its end and newest block).
type WaitingRange struct {
	Group    string    `json:"group"`
	ClosesAt time.Time `json:"closesAt"`
	// Stream (its labels), Level and the range [RangeStart, RangeEnd) in
	// ms, read from the group key (RangeEnd 0 when the level is no longer
	// configured).
	Stream     string `json:"stream"`
	Level      int    `json:"level"`
	RangeStart int64  `json:"rangeStart"`
	RangeEnd   int64  `json:"rangeEnd,omitempty"`
}

// RetentionStatus is a tenant's retention: the blocks past it that the
// next pass retires, and the next block to expire after them.
type RetentionStatus struct {
	Raw         string `json:"raw,omitempty"`
	FiveMinutes string `json:"5m,omitempty"`
	OneHour     string `json:"1h,omitempty"`
	// Due counts the blocks past their retention that the next pass
	// (every Interval) retires; claimed blocks wait for their version.
	Due int `json:"due"`
	// HeldForDownsample counts the blocks past their retention that wait
	// for their downsample to be published.
	HeldForDownsample int    `json:"heldForDownsample,omitempty"`
	Interval          string `json:"interval"`
	// Next is the next block to expire after those, if any.
	Next *NextExpiry `json:"next,omitempty"`
}

// NextExpiry is the next block retention expires.
type NextExpiry struct {
	Block string    `json:"block"`
	Level int       `json:"level"`
	MaxT  time.Time `json:"maxTime"`
	// At is when its retention ends; DeletedAt when it is deleted, the
	// deletion delay after it is marked.
	At        time.Time `json:"at"`
	DeletedAt time.Time `json:"deletedAt"`
}

// Quarantined is a quarantined block (Block set) or group (Group set).
type Quarantined struct {
	Block  string `json:"block,omitempty"`
	Group  string `json:"group,omitempty"`
	Reason string `json:"reason"`
}

// StreamStatus is one stream of a tenant.
type StreamStatus struct {
	ID string `json:"id"`
	// Labels are the stream's external labels (without the replica
	// labels) and resolution, as `{cluster="east"}` or `{…} @5m`.
	Labels      string `json:"labels"`
	LiveBlocks  int    `json:"liveBlocks"`
	LiveSamples uint64 `json:"liveSamples"`
}

// LevelCount counts one level's blocks by state.
type LevelCount struct {
	Level int `json:"level"`
	// Range is the level's group length ("" for uploads, level 0).
	Range  string         `json:"range,omitempty"`
	States map[string]int `json:"states"`
}

// GroupStatus is a group's current version.
type GroupStatus struct {
	Group string `json:"group"`
	// Stream is the group's stream, as StreamStatus.Labels shows it.
	Stream     string `json:"stream"`
	Level      int    `json:"level"`
	RangeStart int64  `json:"rangeStart"`
	RangeEnd   int64  `json:"rangeEnd"`
	// Split is the block a split group splits ("" for a range's group).
	Split string `json:"split,omitempty"`
	// Downsample is the block a downsample group downsamples, and To the
	// resolution it writes ("5m", "1h").
	Downsample string `json:"downsample,omitempty"`
	To         string `json:"to,omitempty"`
	Version    int64  `json:"version"`
	State      string `json:"state"`
	Partitions int    `json:"partitions"`
	// Done/Running/Pending count the version's partitions (when read).
	Done    int   `json:"done"`
	Running int   `json:"running"`
	Pending int   `json:"pending"`
	Sources int   `json:"sources"`
	Updated int64 `json:"updatedAt"`
	// Failures counts the version's failed job attempts; LastError is the
	// last one.
	Failures  int    `json:"failures,omitempty"`
	LastError string `json:"lastError,omitempty"`
	// PartitionsRead is false when progress was not read (a finished
	// group without --all).
	PartitionsRead bool `json:"partitionsRead"`
	// PartitionList is every partition of the version (StatusOptions.Detail).
	PartitionList []PartitionStatus `json:"partitionList,omitempty"`
}

// LeaseStatus is a partition held by a compaction job.
type LeaseStatus struct {
	Group     string `json:"group"`
	Version   int64  `json:"version"`
	Partition int    `json:"partition"`
	Owner     string `json:"owner"`
	Attempt   int    `json:"attempt"`
	Until     int64  `json:"leaseUntil"`
	// ExpiresInSeconds is negative once the lease expired (a new job may
	// take it over).
	ExpiresInSeconds int64 `json:"expiresInSeconds"`
}

// RejectedBlock is a block Sluice will not compact.
type RejectedBlock struct {
	Block  string `json:"block"`
	Reason string `json:"reason"`
}

// QueueStatus is a queue and its dead-letter queue.
type QueueStatus struct {
	Queue    string `json:"queue"`
	URL      string `json:"url"`
	Waiting  int    `json:"waiting"`
	InFlight int    `json:"inFlight"`
	DLQ      string `json:"dlq,omitempty"`
	DLQURL   string `json:"dlqUrl,omitempty"`
	DLQDepth int    `json:"dlqDepth"`
	// DLQOldestSeconds is the age of the oldest message seen in the DLQ
	// since it was first sent (-1 when the DLQ is empty).
	DLQOldestSeconds int64  `json:"dlqOldestSeconds"`
	Error            string `json:"error,omitempty"`
}

// SQSAPI is the part of the SQS client status and replay-dlq use.
type SQSAPI interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

// blockStates in the order status shows them.
var blockStates = []protocol.BlockState{
	protocol.BlockLive, protocol.BlockClaimed, protocol.BlockRetiring, protocol.BlockPending,
	protocol.BlockDeleted, protocol.BlockDiscarded, protocol.BlockRejected, protocol.BlockQuarantined,
}

// GatherStatus reads the report.
func GatherStatus(ctx context.Context, st *records.Store, q SQSAPI, cfg config.Config, opts StatusOptions) (*StatusReport, error) {
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	rep := &StatusReport{At: now.UTC(), Bucket: cfg.Bucket, Table: cfg.Table, Tenants: []TenantStatus{}, Queues: []QueueStatus{}}
	if opts.OverridesError != nil {
		rep.OverridesError = opts.OverridesError.Error()
	}
	tenants, err := listTenants(ctx, st)
	if err != nil {
		return nil, err
	}
	if opts.Tenant != "" {
		tenants = []string{opts.Tenant}
	}
	for _, t := range tenants {
		ts, err := tenantStatus(ctx, st, opts.Overrides.Policy(t, cfg.Policy), cfg.Layout.SingleTenant != "", t, opts.AllGroups || opts.Detail, opts.Detail, now)
		ts.Overrides = opts.Overrides.Describe(t)
		if keep := opts.Overrides.Retention(t, cfg.Retention); err == nil && keep.Enabled() {
			tc := cfg
			tc.Retention, tc.Policy = keep, opts.Overrides.Policy(t, cfg.Policy)
			ts.Retention = retentionStatus(ctx, st, tc, t, now)
		}
		if err != nil {
			return nil, err
		}
		rep.Tenants = append(rep.Tenants, ts)
	}
	if opts.Detail {
		policy := func(t string) planning.Policy { return opts.Overrides.Policy(t, cfg.Policy) }
		if err := waitingRanges(ctx, st, rep, policy, now); err != nil {
			return nil, err
		}
	}
	rep.Queues, rep.QueuesNote = queueStatus(ctx, q, cfg, now)
	return rep, nil
}

// waitingRanges adds to each tenant the ranges the agenda says wait (a
// range that was not covered yet, or whose newest upload is younger than
// the policy's upload wait, and has no group), the earliest time first. A
// range is listed once, at the last time the agenda names for it: every
// arrival in it pushes its close out.
func waitingRanges(ctx context.Context, st *records.Store, rep *StatusReport, policy func(tenant string) planning.Policy, now time.Time) error {
	all, err := st.DueAll(ctx, now.Add(100*365*24*time.Hour))
	if err != nil {
		return err
	}
	at := map[string]int{}
	for i, ts := range rep.Tenants {
		at[ts.Tenant] = i
	}
	type rangeKey struct{ tenant, group string }
	closes := map[rangeKey]time.Time{}
	for _, e := range records.ByKind(all)[records.AgendaRange] {
		k := rangeKey{e.Tenant, e.Subject}
		if _, ok := at[e.Tenant]; ok && e.Due.After(now) && e.Due.After(closes[k]) {
			closes[k] = e.Due
		}
	}
	for k, due := range closes {
		ts := &rep.Tenants[at[k.tenant]]
		if slices.ContainsFunc(ts.Groups, func(g GroupStatus) bool { return g.Group == k.group }) {
			continue // planned since: the entry is left for the planner to drop
		}
		w := WaitingRange{Group: k.group, ClosesAt: due.UTC()}
		if g, err := planning.ParseGroupKey(k.group); err == nil {
			w.Level, w.RangeStart = g.Level, g.RangeStart
			if pol := policy(k.tenant); g.Level >= 1 && g.Level <= pol.TopLevel() {
				w.RangeEnd = pol.End(g)
			}
			w.Stream = g.Stream
			if i := slices.IndexFunc(ts.Streams, func(s StreamStatus) bool { return s.ID == g.Stream }); i >= 0 {
				w.Stream = ts.Streams[i].Labels
			}
		}
		ts.Waiting = append(ts.Waiting, w)
	}
	for i := range rep.Tenants {
		w := rep.Tenants[i].Waiting
		sort.Slice(w, func(a, b int) bool {
			if !w[a].ClosesAt.Equal(w[b].ClosesAt) {
				return w[a].ClosesAt.Before(w[b].ClosesAt)
			}
			return w[a].Group < w[b].Group
		})
	}
	return nil
}

func tenantStatus(ctx context.Context, st *records.Store, pol planning.Policy, thanosBucket bool, tenant string, allGroups, detail bool, now time.Time) (TenantStatus, error) {
	ts := TenantStatus{Tenant: tenant, Blocks: []LevelCount{}, Streams: []StreamStatus{}, Groups: []GroupStatus{}, Leases: []LeaseStatus{},
		Rejected: []RejectedBlock{}, Quarantined: []Quarantined{}}
	blocks, err := st.TenantBlocks(ctx, tenant)
	if err != nil {
		return ts, err
	}
	streams, err := st.TenantStreams(ctx, tenant)
	if err != nil {
		return ts, err
	}
	streamAt := map[string]int{}
	for _, sr := range streams {
		streamAt[sr.ID] = len(ts.Streams)
		ts.Streams = append(ts.Streams, StreamStatus{ID: sr.ID, Labels: sr.Stream().String()})
	}
	streamName := func(id string) string {
		if i, ok := streamAt[id]; ok {
			return ts.Streams[i].Labels
		}
		return id
	}
	byLevel := map[int]map[string]int{}
	// The live outputs of one stream over one range: in a Thanos bucket,
	// more than one (a partitioned group) is what Thanos' tools call
	// overlapping blocks.
	type span struct {
		stream     string
		level      int
		minT, maxT int64
	}
	outputs := map[span]int{}
	var spans []span
	for _, b := range blocks {
		if thanosBucket && b.State == protocol.BlockLive && b.Level >= 1 {
			k := span{b.Stream, b.Level, b.MinT, b.MaxT}
			if outputs[k] == 0 {
				spans = append(spans, k)
			}
			outputs[k]++
		}
		if i, ok := streamAt[b.Stream]; ok && b.State == protocol.BlockLive {
			ts.Streams[i].LiveBlocks++
			ts.Streams[i].LiveSamples += b.Samples
		}
		if detail && b.State != protocol.BlockDeleted && b.State != protocol.BlockDiscarded {
			ts.BlockList = append(ts.BlockList, BlockStatus{ID: b.ID, Stream: b.Stream, Level: b.Level, State: string(b.State),
				MinT: b.MinT, MaxT: b.MaxT, PartitionCount: b.PartitionCount, PartitionID: b.PartitionID, Series: b.Series,
				Samples: b.Samples, ProducedBy: b.ProducedBy, ClaimedBy: b.ClaimedBy, Reason: b.Reason})
		}
		if byLevel[b.Level] == nil {
			byLevel[b.Level] = map[string]int{}
		}
		byLevel[b.Level][string(b.State)]++
		switch b.State {
		case protocol.BlockLive:
			ts.LiveBlocks++
			ts.LiveSamples += b.Samples
		case protocol.BlockRejected:
			ts.Rejected = append(ts.Rejected, RejectedBlock{Block: b.ID, Reason: b.Reason})
		case protocol.BlockQuarantined:
			ts.Quarantined = append(ts.Quarantined, Quarantined{Block: b.ID, Reason: b.Reason})
		}
	}
	for _, k := range spans {
		if n := outputs[k]; n > 1 {
			name := streamName(k.stream)
			if name == "" {
				name = "{}"
			}
			ts.Notes = append(ts.Notes, fmt.Sprintf("stream %s, L%d %s: %d live partition blocks of one stream over one range — "+
				"'thanos tools bucket verify' reports them as overlapped_blocks, and a Thanos compactor halts on them unless vertical compaction is on; "+
				"Thanos Store and Querier read them correctly, their series being disjoint (docs/thanos.md)",
				name, k.level, groupRange(GroupStatus{RangeStart: k.minT, RangeEnd: k.maxT}), n))
		}
	}
	for l := range byLevel {
		lc := LevelCount{Level: l, States: byLevel[l]}
		if l >= 1 && l <= pol.TopLevel() {
			lc.Range = shortDuration(pol.Range(l))
		}
		ts.Blocks = append(ts.Blocks, lc)
	}
	sort.Slice(ts.Blocks, func(i, j int) bool { return ts.Blocks[i].Level < ts.Blocks[j].Level })
	groups, err := st.TenantGroups(ctx, tenant)
	if err != nil {
		return ts, err
	}
	sort.Slice(ts.Streams, func(i, j int) bool { return ts.Streams[i].Labels < ts.Streams[j].Labels })
	for i, s := range ts.Streams {
		streamAt[s.ID] = i
	}
	sort.Slice(groups, func(i, j int) bool {
		a, b := groups[i].Key, groups[j].Key
		if a.Stream != b.Stream {
			return streamName(a.Stream) < streamName(b.Stream)
		}
		if a.Level != b.Level {
			return a.Level < b.Level
		}
		return a.RangeStart < b.RangeStart
	})
	finished := 0
	for _, g := range groups {
		if !g.State.Unfinished() {
			finished++
		}
	}
	// Progress is read for every group the table shows: the unfinished
	// ones, and the finished ones unless there are too many to list.
	allGroups = allGroups || finished <= maxFinishedGroups
	for _, g := range groups {
		gs := GroupStatus{Group: g.Key.String(), Stream: streamName(g.Key.Stream), Level: g.Key.Level, RangeStart: g.Key.RangeStart,
			Version: g.Version, State: string(g.State), Partitions: g.Partitions, Sources: len(g.Sources), Updated: g.UpdatedAt,
			Failures: g.Failures, LastError: g.LastError}
		if g.State == protocol.GroupQuarantined {
			ts.Quarantined = append(ts.Quarantined, Quarantined{Group: g.Key.String(), Reason: g.Reason})
		}
		if g.Key.Level >= 1 && g.Key.Level <= pol.TopLevel() {
			gs.RangeEnd = pol.End(g.Key)
		}
		if g.Key.IsSplit() {
			gs.Split, gs.RangeEnd = g.Key.Block, g.Key.RangeStart+pol.Slot.Milliseconds()
		}
		if g.Key.IsDownsample() {
			gs.Downsample, gs.To, gs.RangeEnd = g.Key.Block, stream.ResolutionName(g.Key.Resolution), g.Key.RangeStart+pol.Slot.Milliseconds()
		}
		if g.State.Unfinished() || allGroups {
			parts, err := st.Partitions(ctx, tenant, g.Key, g.Version)
			if err != nil {
				return ts, err
			}
			gs.PartitionsRead = true
			for _, p := range parts {
				if detail {
					gs.PartitionList = append(gs.PartitionList, PartitionStatus{Index: p.Index, State: string(p.State), Owner: p.LeaseOwner,
						Attempt: p.Attempt, LeaseUntil: p.LeaseUntil, Output: p.Output, Empty: p.Empty, Failures: p.Failures, LastError: p.LastError})
				}
				switch p.State {
				case protocol.PartitionDone:
					gs.Done++
				case protocol.PartitionRunning:
					gs.Running++
					if g.State == protocol.GroupPlanned {
						ts.Leases = append(ts.Leases, LeaseStatus{Group: g.Key.String(), Version: g.Version, Partition: p.Index,
							Owner: p.LeaseOwner, Attempt: p.Attempt, Until: p.LeaseUntil,
							ExpiresInSeconds: int64(time.UnixMilli(p.LeaseUntil).Sub(now).Seconds())})
					}
				default:
					gs.Pending++
				}
			}
		}
		ts.Groups = append(ts.Groups, gs)
	}
	return ts, nil
}

// queueOrder is the pipeline's order.
var queueOrder = []spec.QueueID{spec.BlockEvents, spec.CompactionJobs, spec.CleanerEvents, spec.BlockOps}

func queueURL(cfg config.Config, id spec.QueueID) string {
	switch id {
	case spec.BlockEvents:
		return cfg.Queues.BlockEvents
	case spec.CompactionJobs:
		return cfg.Queues.CompactionJobs
	case spec.CleanerEvents:
		return cfg.Queues.CleanerEvents
	case spec.BlockOps:
		return cfg.Queues.BlockOps
	}
	return ""
}

func queueStatus(ctx context.Context, q SQSAPI, cfg config.Config, now time.Time) ([]QueueStatus, string) {
	out := []QueueStatus{}
	var missing []string
	for _, id := range queueOrder {
		url := queueURL(cfg, id)
		if url == "" {
			missing = append(missing, spec.QueueURLEnv(id))
			continue
		}
		qs := QueueStatus{Queue: string(id), URL: url, DLQOldestSeconds: -1}
		if err := fillQueue(ctx, q, &qs, now); err != nil {
			qs.Error = oneLine(explain(err).Error())
		}
		out = append(out, qs)
	}
	note := ""
	if len(missing) > 0 {
		note = "queue URLs not configured: " + strings.Join(missing, ", ")
	}
	return out, note
}

func fillQueue(ctx context.Context, q SQSAPI, qs *QueueStatus, now time.Time) error {
	attrs, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(qs.URL),
		AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			sqstypes.QueueAttributeNameRedrivePolicy,
		}})
	if err != nil {
		return fmt.Errorf("queue %s: %w", qs.Queue, err)
	}
	qs.Waiting = atoi(attrs.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	qs.InFlight = atoi(attrs.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	dlqURL, dlqName, err := deadLetterQueue(ctx, q, attrs.Attributes[string(sqstypes.QueueAttributeNameRedrivePolicy)])
	if err != nil || dlqURL == "" {
		return err
	}
	qs.DLQ, qs.DLQURL = dlqName, dlqURL
	d, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(dlqURL),
		AttributeNames: []sqstypes.QueueAttributeName{
			sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		}})
	if err != nil {
		return fmt.Errorf("dead-letter queue %s: %w", dlqName, err)
	}
	qs.DLQDepth = atoi(d.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)]) +
		atoi(d.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	if qs.DLQDepth > 0 {
		if oldest, ok, err := peekOldest(ctx, q, dlqURL); err != nil {
			return err
		} else if ok {
			qs.DLQOldestSeconds = int64(now.Sub(oldest).Seconds())
		}
	}
	return nil
}

// deadLetterQueue resolves a queue's RedrivePolicy to its DLQ's URL and name.
func deadLetterQueue(ctx context.Context, q SQSAPI, policy string) (url, name string, err error) {
	if policy == "" {
		return "", "", nil
	}
	var rp struct {
		DeadLetterTargetArn string `json:"deadLetterTargetArn"`
	}
	if err := json.Unmarshal([]byte(policy), &rp); err != nil {
		return "", "", fmt.Errorf("redrive policy %q: %w", policy, err)
	}
	parts := strings.Split(rp.DeadLetterTargetArn, ":")
	name = parts[len(parts)-1]
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(name)}
	if len(parts) == 6 && parts[4] != "" {
		in.QueueOwnerAWSAccountId = aws.String(parts[4])
	}
	res, err := q.GetQueueUrl(ctx, in)
	if err != nil {
		return "", name, fmt.Errorf("dead-letter queue %s: %w", name, err)
	}
	return aws.ToString(res.QueueUrl), name, nil
}

// peekOldest receives up to ten messages, makes them visible again at
// once, and returns the earliest SentTimestamp. SQS has no exact "oldest
// message" attribute; for a DLQ of a few messages this sees them all. (The
// SDK cannot send VisibilityTimeout 0 on a receive — zero is omitted — so
// the receive hides them for a second and ChangeMessageVisibility undoes
// it.)
//
// It is called only when the queue holds a message, and waits up to two
// seconds for one: a message can be hidden for that second by another
// reader's peek (two 'sluice status' at once), or by a receive of ours
// whose response was lost and which the SDK retried — the first receive
// hid what the second would have returned.
func peekOldest(ctx context.Context, q SQSAPI, url string) (time.Time, bool, error) {
	res, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 1, WaitTimeSeconds: 2,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameSentTimestamp},
	})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("peek %s: %w", url, err)
	}
	var oldest time.Time
	for _, m := range res.Messages {
		// Best effort: a message this fails for is visible again in a
		// second anyway.
		_, _ = q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
		ms, err := strconv.ParseInt(m.Attributes[string(sqstypes.MessageSystemAttributeNameSentTimestamp)], 10, 64)
		if err != nil {
			continue
		}
		if t := time.UnixMilli(ms); oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	return oldest, !oldest.IsZero(), nil
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// shortDuration renders 12h0m0s as 12h and 30m0s as 30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	s = strings.TrimSuffix(s, "0s")
	s = strings.TrimSuffix(s, "0m")
	if s == "" {
		return "0s"
	}
	return s
}

// retentionStatus reads what the retention pass would read and says what
// it will do; a tenant whose view cannot be read gets none.
func retentionStatus(ctx context.Context, st *records.Store, cfg config.Config, tenant string, now time.Time) *RetentionStatus {
	streams, err := st.TenantStreams(ctx, tenant)
	if err != nil {
		return nil
	}
	res := map[string]int64{}
	for _, s := range streams {
		res[s.ID] = s.Resolution
	}
	blocks, err := st.BlocksView(ctx, tenant)
	if err != nil {
		return nil
	}
	due, held, next, ok := retention.Expiries(cfg.Retention, blocks, res, cfg.Policy.DownsampleTo, now)
	keep := func(d time.Duration) string {
		if d <= 0 {
			return ""
		}
		return shortDuration(d)
	}
	rs := &RetentionStatus{Raw: keep(cfg.Retention.Raw), FiveMinutes: keep(cfg.Retention.FiveMinutes), OneHour: keep(cfg.Retention.OneHour),
		Due: len(due), HeldForDownsample: len(held), Interval: shortDuration(cfg.RetentionInterval)}
	if ok {
		rs.Next = &NextExpiry{Block: next.Block.ID, Level: next.Block.Level, MaxT: time.UnixMilli(next.Block.MaxT).UTC(),
			At: next.At.UTC(), DeletedAt: next.At.Add(cfg.DeletionDelay).UTC()}
	}
	return rs
}

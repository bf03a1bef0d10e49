package testworld

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/oklog/ulid/v2"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/blockstore"
	"github.com/sluice-dev/sluice/shared/equiv"
	"github.com/sluice-dev/sluice/shared/planning"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/stream"
)

// Live lists a tenant's published LIVE blocks: what a reader queries.
func Live(blocks []records.Block) []records.Block {
	var out []records.Block
	for _, b := range blocks {
		if b.State == protocol.BlockLive && b.Published {
			out = append(out, b)
		}
	}
	return out
}

// CheckQuiescent checks I1–I4 of docs/design.md §5 for the tenants once the
// pipeline is quiescent, and returns every violation found.
//
//   - I1 the published live blocks hold exactly the uploaded samples
//     (sample-level equivalence, duplicates counted as violations);
//   - I2 no two live blocks of one stream overlap in time unless they are
//     partitions of one group version (or under a no-compact mark);
//   - I3 every published meta.json lists files that exist with their sizes;
//   - I4 every object version of a block key in the bucket is named by a
//     live block's record (or belongs to a rejected upload or a no-compact
//     mark), and no delete marker exists: every delete named a VersionId.
func (w *World) CheckQuiescent(ctx context.Context, tenants ...string) error {
	var errs []error
	named := map[string]bool{}
	for _, tenant := range tenants {
		w.made(CheckSamples, CheckQuarantined, CheckNoOverlap)
		blocks := w.Blocks(ctx, tenant)
		live := Live(blocks)
		// Quarantined blocks, and the sources a quarantined group keeps
		// claimed (at quiescence no other block is claimed), stay readable:
		// I1 reads them too, but for those the test damaged on purpose
		// (unreadable on both sides).
		var kept []records.Block
		for _, b := range blocks {
			if (b.State == protocol.BlockQuarantined || b.State == protocol.BlockClaimed) && !w.Damaged[tenant][b.ID] {
				kept = append(kept, b)
			}
		}
		raw, made, err := w.uploadedStreams(ctx, tenant, live)
		// A block under another tool's no-compact mark stays as it was,
		// its range compacted around it: like a kept block it may hold
		// samples an output holds too (a replica's, a late block's).
		var compacted []records.Block
		for _, b := range raw {
			if b.NoCompact {
				kept = append(kept, b)
			} else {
				compacted = append(compacted, b)
			}
		}
		errs = append(errs, err, w.checkSamples(ctx, tenant, compacted, kept), w.checkDownsampled(ctx, tenant, raw, made))
		errs = append(errs, w.checkQuarantine(ctx, tenant, blocks))
		errs = append(errs, checkOverlap(tenant, live))
		for _, b := range live {
			w.made(CheckPublishedAtRest)
			errs = append(errs, w.checkPublished(ctx, b))
		}
		for _, b := range blocks {
			k, err := w.key(b)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			switch b.State {
			case protocol.BlockLive, protocol.BlockQuarantined, protocol.BlockClaimed:
				for _, v := range b.AllVersions() {
					named[k.Object(v.RelPath)+"@"+v.VersionID] = true
				}
				named[k.Object(blockkey.NoCompactMarkFile)+"@*"] = true
			case protocol.BlockRejected:
				named[k.BlockPrefix()+"*"] = true
			}
		}
	}
	w.made(CheckNoOrphans, CheckNoRefusals)
	errs = append(errs, w.checkObjects(ctx, named))
	if n := w.Pipeline.Refused.N(); n > 0 {
		errs = append(errs, fmt.Errorf("AWS limits: the pipeline made %d request(s) AWS would refuse (see the log: %q)", n, "AWS limit exceeded"))
	}
	return errors.Join(errs...)
}

// CheckQuiescent's checks, by name.
const (
	CheckSamples         = "I1 samples at quiescence (per tenant)"
	CheckQuarantined     = "I1 damaged blocks quarantined, their neighbours compacted (per tenant)"
	CheckNoOverlap       = "I2 no overlapping live blocks (per tenant)"
	CheckPublishedAtRest = "I3 published files exist (per live block)"
	CheckNoOrphans       = "I4 no orphans, no delete markers (per check)"
	CheckNoRefusals      = "AWS limits: no request AWS would refuse (per check)"
	CheckDownsampled     = "I1 5m blocks hold the aggregates of the raw blocks recorded downsampled (per tenant with some)"
)

// QuiescentChecks lists every check CheckQuiescent makes.
func QuiescentChecks() []string {
	return []string{CheckSamples, CheckQuarantined, CheckNoOverlap, CheckPublishedAtRest, CheckNoOrphans, CheckNoRefusals, CheckDownsampled}
}

// made counts checks CheckQuiescent is making.
func (w *World) made(names ...string) {
	w.checksMu.Lock()
	defer w.checksMu.Unlock()
	if w.checks == nil {
		w.checks = map[string]int{}
	}
	for _, n := range names {
		w.checks[n]++
	}
}

// ChecksMade counts the checks CheckQuiescent has made, by name.
func (w *World) ChecksMade() map[string]int {
	w.checksMu.Lock()
	defer w.checksMu.Unlock()
	out := make(map[string]int, len(w.checks))
	for k, v := range w.checks {
		out[k] = v
	}
	return out
}

func (w *World) key(b records.Block) (blockkey.Key, error) {
	id, err := ulid.ParseStrict(b.ID)
	if err != nil {
		return blockkey.Key{}, fmt.Errorf("block %s: %w", b.Key(), err)
	}
	return w.Config.Layout.Block(b.Tenant, id)
}

// checkQuarantine: every block the test damaged is quarantined (with its
// no-compact mark written), no other block is, and no group is unless the
// test expects it.
func (w *World) checkQuarantine(ctx context.Context, tenant string, blocks []records.Block) error {
	var errs []error
	seen := map[string]bool{}
	for _, b := range blocks {
		switch {
		case b.State == protocol.BlockQuarantined && !w.Damaged[tenant][b.ID]:
			errs = append(errs, fmt.Errorf("quarantine: %s is quarantined but was not damaged: %s", b.Key(), b.Reason))
		case b.State == protocol.BlockQuarantined && b.NoCompactMarkVersionID == "":
			errs = append(errs, fmt.Errorf("quarantine: %s is quarantined without a no-compact mark", b.Key()))
		case b.State == protocol.BlockQuarantined:
			seen[b.ID] = true
			if err := w.markInBucket(ctx, b); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for id := range w.Damaged[tenant] {
		if !seen[id] && !w.QuarantinedGroupsExpected {
			errs = append(errs, fmt.Errorf("quarantine: damaged block %s/%s is not quarantined", tenant, id))
		}
	}
	if !w.QuarantinedGroupsExpected {
		groups, err := w.Store.TenantGroups(ctx, tenant)
		if err != nil {
			return err
		}
		for _, g := range groups {
			if g.State == protocol.GroupQuarantined {
				errs = append(errs, fmt.Errorf("quarantine: group %s is quarantined: %s", g.Ref(), g.Reason))
			}
		}
	}
	return errors.Join(errs...)
}

// markInBucket: the no-compact mark quarantined block b's record names is
// in the bucket, so other tools leave the block alone too. (A release's
// removal of the mark racing a second quarantine could leave the record
// naming a deleted version.)
func (w *World) markInBucket(ctx context.Context, b records.Block) error {
	k, err := w.key(b)
	if err != nil {
		return err
	}
	key := k.Object(blockkey.NoCompactMarkFile)
	_, err = w.Env.Clients.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(w.Config.Bucket), Key: aws.String(key),
		VersionId: aws.String(b.NoCompactMarkVersionID)})
	if err != nil {
		return fmt.Errorf("quarantine: %s is quarantined, but the no-compact mark its record names (%s) cannot be read: %w", b.Key(), b.NoCompactMarkVersionID, err)
	}
	return nil
}

// checkSamples is I1: the live blocks, with the blocks kept as they were
// (quarantined, or sources a quarantined group holds), hold exactly the
// uploaded samples — and the live blocks hold none twice. (Kept blocks may
// duplicate each other or the outputs: replicas of a quarantined group
// were never merged.)
func (w *World) checkSamples(ctx context.Context, tenant string, live, kept []records.Block) error {
	if len(w.Uploaded[tenant]) == 0 {
		if len(live) > 0 {
			return fmt.Errorf("I1 violated for %s: %d live blocks but nothing valid was uploaded", tenant, len(live))
		}
		return nil
	}
	dirs, err := w.DownloadBlocks(ctx, append(append([]records.Block(nil), live...), kept...))
	if err != nil {
		return err
	}
	rep, err := equiv.Check(ctx, w.Uploaded[tenant], dirs, w.Config.ReplicaLabels)
	if err != nil {
		return fmt.Errorf("I1 %s: %w", tenant, err)
	}
	ok := rep.OK()
	if rest, withdrawn := w.remaining(tenant); withdrawn {
		// Uploads marked for deletion by another tool: their samples
		// are neither missing nor extra, but every other upload's must
		// be there.
		remaining, err := equiv.Check(ctx, rest, dirs, w.Config.ReplicaLabels)
		if err != nil {
			return fmt.Errorf("I1 %s: %w", tenant, err)
		}
		if remaining.Missing > 0 {
			return fmt.Errorf("I1 violated for %s: %d samples of the uploads no tool marked for deletion are missing: %s", tenant, remaining.Missing, remaining)
		}
		rep.Missing = 0
		ok = rep.OK()
	}
	if len(kept) > 0 {
		ok = rep.Missing == 0 && rep.Extra == 0
		if ok && len(live) > 0 {
			outs, err := equiv.Check(ctx, dirs[:len(live)], dirs[:len(live)], w.Config.ReplicaLabels)
			if err != nil {
				return fmt.Errorf("I1 %s: %w", tenant, err)
			}
			if outs.DuplicatedInOutputs > 0 {
				return fmt.Errorf("I1 violated for %s: the live blocks hold %d samples twice: %s", tenant, outs.DuplicatedInOutputs, outs)
			}
		}
	}
	if !ok || rep.InputSamples == 0 {
		return fmt.Errorf("I1 violated for %s: %s", tenant, rep)
	}
	return nil
}

// uploadedStreams splits live blocks into those of the streams the
// tenant's uploads are in — I1 holds their samples to the uploads — and
// those of the streams Sluice's downsampling made (whatever made each
// block in them since: a downsample, or a compaction of downsamples),
// which hold aggregates and are held to the raw samples instead
// (checkDownsampled).
func (w *World) uploadedStreams(ctx context.Context, tenant string, live []records.Block) (uploaded, made []records.Block, err error) {
	streams := map[string]bool{}
	for _, dir := range w.Uploaded[tenant] {
		m, err := blockmeta.ReadDir(dir)
		if err != nil {
			return nil, nil, err
		}
		streams[stream.Of(m, w.Config.ReplicaLabels).ID()] = true
	}
	srs, err := w.Store.TenantStreams(ctx, tenant)
	if err != nil {
		return nil, nil, err
	}
	res := map[string]int64{}
	for _, sr := range srs {
		res[sr.ID] = sr.Resolution
	}
	for _, b := range live {
		if streams[b.Stream] || res[b.Stream] == 0 {
			uploaded = append(uploaded, b)
		} else {
			made = append(made, b)
		}
	}
	return uploaded, made, nil
}

// DownloadBlocks downloads blocks by their recorded VersionIds into fresh
// directories, with the meta.json their record holds.
func (w *World) DownloadBlocks(ctx context.Context, blocks []records.Block) ([]string, error) {
	base, err := os.MkdirTemp(w.scratch, "download-")
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, b := range blocks {
		k, err := w.key(b)
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(base, b.ID)
		var objs []blockstore.Object
		for _, f := range b.Files {
			objs = append(objs, blockstore.Object{Key: k.Object(f.RelPath), VersionID: f.VersionID, Size: f.Size, RelPath: f.RelPath})
		}
		if err := blockstore.Download(ctx, w.Env.Clients.S3, w.Config.Bucket, objs, dir, 4); err != nil {
			return nil, fmt.Errorf("download %s: %w", b.Key(), err)
		}
		if err := os.WriteFile(filepath.Join(dir, blockkey.MetaFile), []byte(b.Meta), 0o644); err != nil {
			return nil, err
		}
		dirs = append(dirs, dir)
	}
	return dirs, nil
}

// checkOverlap is I2 at block level.
func checkOverlap(tenant string, live []records.Block) error {
	version := func(b records.Block) string {
		if r, err := protocol.ParsePartitionRef(b.ProducedBy); err == nil {
			return r.VersionRef.String()
		}
		return "upload " + b.ID
	}
	var errs []error
	for i, a := range live {
		for _, b := range live[i+1:] {
			if a.NoCompact || b.NoCompact || a.Stream != b.Stream || a.MaxT <= b.MinT || b.MaxT <= a.MinT {
				continue
			}
			if version(a) != version(b) && !disjointPartitions(a, b) {
				errs = append(errs, fmt.Errorf("I2 violated for %s: live blocks %s (%s) and %s (%s) overlap", tenant, a.ID, version(a), b.ID, version(b)))
			}
		}
	}
	return errors.Join(errs...)
}

// checkDownsampled holds the live 5m blocks of the streams downsampling
// made to the live raw blocks whose downsample is recorded
// (equiv.CheckDownsampled): every window of every series of theirs. A raw
// block whose downsample is still to come is left out — a version holding
// a block it waits for may end after the seed settles — and so is 1h,
// whose completeness the raw records do not say (the e2e and promtool
// tests hold 1h blocks to the raw samples).
func (w *World) checkDownsampled(ctx context.Context, tenant string, raw, made []records.Block) error {
	if len(made) == 0 {
		return nil
	}
	srs, err := w.Store.TenantStreams(ctx, tenant)
	if err != nil {
		return err
	}
	fiveMinutes := map[string]bool{}
	for _, sr := range srs {
		fiveMinutes[sr.ID] = sr.Resolution == planning.Resolution5m
	}
	var done, down []records.Block
	for _, b := range raw {
		if b.Downsampled >= planning.Resolution5m {
			done = append(done, b)
		}
	}
	for _, b := range made {
		if fiveMinutes[b.Stream] {
			down = append(down, b)
		}
	}
	if len(done) == 0 {
		return nil
	}
	w.made(CheckDownsampled)
	if len(down) == 0 {
		return fmt.Errorf("I1 violated for %s: %d raw blocks are recorded downsampled, and no 5m block is live", tenant, len(done))
	}
	dirs, err := w.DownloadBlocks(ctx, append(done, down...))
	if err != nil {
		return err
	}
	if err := equiv.CheckDownsampled(ctx, dirs[:len(done)], dirs[len(done):], w.Config.ReplicaLabels); err != nil {
		return fmt.Errorf("I1 violated for %s: downsampled blocks: %w", tenant, err)
	}
	return nil
}

// disjointPartitions reports two partitions whose series cannot meet
// (planning.Holds: neither partition can hold series of the other), at
// least one of them written by a downsample. A downsample replaces only
// the blocks of the target stream within its source's partition, so one
// range of a downsampled stream may hold partitions of several versions:
// the downsamples of a block's partitions, or one partition's downsample
// beside the other partitions of an earlier compaction there (chaos seeds
// 15 and 61). Compaction outputs of different versions are never
// excused: a compaction retires every block of its range it overlaps.
func disjointPartitions(a, b records.Block) bool {
	down := func(x records.Block) bool {
		r, err := protocol.ParsePartitionRef(x.ProducedBy)
		return err == nil && r.Group.IsDownsample()
	}
	return (down(a) || down(b)) && a.PartitionCount > 1 && b.PartitionCount > 1 &&
		!planning.Holds(a.PartitionCount, a.PartitionID, b.PartitionID, b.PartitionCount)
}

// checkPublished is I3: the published meta.json exists, is the recorded
// version, and its files exist with their listed sizes.
func (w *World) checkPublished(ctx context.Context, b records.Block) error {
	k, err := w.key(b)
	if err != nil {
		return err
	}
	res, err := w.Env.Clients.S3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(w.Config.Bucket), Key: aws.String(k.Object(blockkey.MetaFile))})
	if err != nil {
		return fmt.Errorf("I3 violated: %s has no readable meta.json: %w", b.Key(), err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("I3: read %s meta.json: %w", b.Key(), err)
	}
	meta, err := blockmeta.Parse(body, k.Object(blockkey.MetaFile))
	if err != nil {
		return fmt.Errorf("I3 violated: %w", err)
	}
	if meta.Thanos == nil {
		return nil
	}
	for _, f := range meta.Thanos.Files {
		if f.RelPath == blockkey.MetaFile {
			continue
		}
		head, err := w.Env.Clients.S3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(w.Config.Bucket), Key: aws.String(k.Object(f.RelPath))})
		if err != nil {
			return fmt.Errorf("I3 violated: %s lists %s, which is missing: %w", b.Key(), f.RelPath, err)
		}
		if f.SizeBytes != 0 && aws.ToInt64(head.ContentLength) != f.SizeBytes {
			return fmt.Errorf("I3 violated: %s lists %s with %d bytes, the object has %d", b.Key(), f.RelPath, f.SizeBytes, aws.ToInt64(head.ContentLength))
		}
	}
	return nil
}

// checkObjects is I4 at quiescence.
func (w *World) checkObjects(ctx context.Context, named map[string]bool) error {
	var errs []error
	in := &s3.ListObjectVersionsInput{Bucket: aws.String(w.Config.Bucket)}
	var orphans []string
	for {
		res, err := w.Env.Clients.S3.ListObjectVersions(ctx, in)
		if err != nil {
			return fmt.Errorf("I4: list: %w", err)
		}
		for _, v := range res.Versions {
			key := aws.ToString(v.Key)
			if _, err := blockkey.Parse(key, w.Config.Layout); err != nil {
				continue // not a block object: not Sluice's to keep or delete
			}
			if named[key+"@"+aws.ToString(v.VersionId)] || named[key+"@*"] || namedPrefix(named, key) {
				continue
			}
			orphans = append(orphans, key+"@"+aws.ToString(v.VersionId))
		}
		for _, m := range res.DeleteMarkers {
			errs = append(errs, fmt.Errorf("I4 violated: delete marker on %s: a delete without a VersionId", aws.ToString(m.Key)))
		}
		if !aws.ToBool(res.IsTruncated) {
			break
		}
		in.KeyMarker, in.VersionIdMarker = res.NextKeyMarker, res.NextVersionIdMarker
	}
	sort.Strings(orphans)
	if len(orphans) > 0 {
		errs = append(errs, fmt.Errorf("I4 violated: %d object versions belong to no live block: %s", len(orphans), strings.Join(orphans[:min(len(orphans), 10)], ", ")))
	}
	return errors.Join(errs...)
}

func namedPrefix(named map[string]bool, key string) bool {
	for i := len(key) - 1; i > 0; i-- {
		if key[i] == '/' && named[key[:i+1]+"*"] {
			return true
		}
	}
	return false
}

package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/protocol"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/stream"
)

func init() {
	register(&command{
		name:    "verify",
		summary: "check invariants I2–I4 against the bucket and the table; exit 1 listing offenders",
		usage:   "[--tenant T] [--json]",
		aws:     true,
		help: `Checks what docs/design.md §5 promises, against the bucket (every object version)
and the state table:

  I2 no double coverage: no two blocks a reader sees (meta.json present, no
     deletion mark) overlap in time unless they are partitions of one group
     version, which hold disjoint series. Blocks under a no-compact mark are
     exempt.
  I3 no dangling files: every published meta.json's files exist with the
     sizes it lists, and every version a live, claimed or retiring block's
     record names is in the bucket.
  I4 no orphans: every object version in the bucket belongs to a live,
     claimed, retiring or pending block's recorded versions.

The invariants hold at quiescence: run it when 'sluice status' shows no
queued work. Objects of rejected blocks and no-compact marks are reported
but not counted. Exit 0 when all hold; exit 1 with every offending key.`,
		setup: func(fs *flag.FlagSet) runFunc {
			tenant := fs.String("tenant", "", "only this tenant")
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
				rep, err := Verify(ctx, st, c.S3, cfg, *tenant)
				if err != nil {
					return err
				}
				if *asJSON {
					enc := json.NewEncoder(e.Stdout)
					enc.SetIndent("", "  ")
					if err := enc.Encode(rep); err != nil {
						return err
					}
				} else {
					rep.Render(e.Stdout)
				}
				if !rep.OK() {
					return &exitError{code: exitVerify, msg: fmt.Sprintf("%d violation(s)", len(rep.Violations))}
				}
				return nil
			}
		},
	})
}

// Invariant names.
const (
	InvI2 = "I2"
	InvI3 = "I3"
	InvI4 = "I4"
)

var invariantTitles = map[string]string{
	InvI2: "no double coverage",
	InvI3: "no dangling files",
	InvI4: "no orphans",
}

// Violation is one broken invariant at one key.
type Violation struct {
	Invariant string `json:"invariant"`
	Tenant    string `json:"tenant"`
	// Key is the offending object key, or the block keys involved.
	Key    string `json:"key"`
	Detail string `json:"detail"`
}

// VerifyReport is the outcome of Verify.
type VerifyReport struct {
	Tenants []string `json:"tenants"`
	// VisibleBlocks counts blocks a reader sees (I2); PublishedMetas the
	// meta.json files checked (I3); ObjectVersions every version (I4).
	VisibleBlocks  int         `json:"visibleBlocks"`
	PublishedMetas int         `json:"publishedMetas"`
	ObjectVersions int         `json:"objectVersions"`
	Violations     []Violation `json:"violations"`
	// Notes are things worth knowing that break nothing.
	Notes []string `json:"notes"`
}

// OK reports whether every invariant holds.
func (r *VerifyReport) OK() bool { return len(r.Violations) == 0 }

// Count returns the violations of one invariant.
func (r *VerifyReport) Count(inv string) int {
	n := 0
	for _, v := range r.Violations {
		if v.Invariant == inv {
			n++
		}
	}
	return n
}

// Render writes the report: one line per invariant, then offenders.
func (r *VerifyReport) Render(w io.Writer) {
	fmt.Fprintf(w, "verify: %d tenant(s), %d visible block(s), %d published meta.json, %d object version(s)\n",
		len(r.Tenants), r.VisibleBlocks, r.PublishedMetas, r.ObjectVersions)
	for _, inv := range []string{InvI2, InvI3, InvI4} {
		n := r.Count(inv)
		res := "ok"
		if n > 0 {
			res = fmt.Sprintf("FAILED (%d)", n)
		}
		title := inv + " " + invariantTitles[inv] + " "
		fmt.Fprintf(w, "  %s%s %s\n", title, strings.Repeat(".", max(3, 28-len(title))), res)
		for _, v := range r.Violations {
			if v.Invariant == inv {
				fmt.Fprintf(w, "      %s: %s\n", v.Key, v.Detail)
			}
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

// bucketBlock is what the bucket holds of one block directory.
type bucketBlock struct {
	key      blockkey.Key
	versions map[string][]ObjectVersion // by file
}

func (b *bucketBlock) latest(file string) (ObjectVersion, bool) {
	for _, v := range b.versions[file] {
		if v.IsLatest && !v.DeleteMarker {
			return v, true
		}
	}
	return ObjectVersion{}, false
}

// Verify checks I2–I4 for tenant ("" = every tenant in the table or the
// bucket).
func Verify(ctx context.Context, st *records.Store, c S3Reader, cfg config.Config, tenant string) (*VerifyReport, error) {
	rep := &VerifyReport{Violations: []Violation{}, Notes: []string{}, Tenants: []string{}}
	root := layoutRoot(cfg.Layout)
	prefix := root
	if tenant != "" && cfg.Layout.SingleTenant == "" {
		prefix = root + tenant + "/"
	}
	if cfg.Layout.SingleTenant != "" {
		if tenant != "" && tenant != cfg.Layout.SingleTenant {
			return nil, usagef("tenant %q: the bucket is single-tenant (%s)", tenant, cfg.Layout.SingleTenant)
		}
		tenant = cfg.Layout.SingleTenant
	}
	versions, err := ListVersions(ctx, c, cfg.Bucket, prefix)
	if err != nil {
		return nil, err
	}
	byTenant := map[string]map[string]*bucketBlock{}
	outside := 0
	for _, v := range versions {
		k, err := blockkey.Parse(v.Key, cfg.Layout)
		if err != nil {
			outside++
			continue
		}
		if tenant != "" && k.Tenant != tenant {
			continue
		}
		if byTenant[k.Tenant] == nil {
			byTenant[k.Tenant] = map[string]*bucketBlock{}
		}
		bb := byTenant[k.Tenant][k.Block.String()]
		if bb == nil {
			bb = &bucketBlock{key: k, versions: map[string][]ObjectVersion{}}
			byTenant[k.Tenant][k.Block.String()] = bb
		}
		bb.versions[k.File] = append(bb.versions[k.File], v)
		rep.ObjectVersions++
	}
	if outside > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d object(s) outside the block layout ignored (bucket index, markers of other tools)", outside))
	}
	tenants := map[string]bool{}
	if tenant != "" {
		tenants[tenant] = true
	} else {
		ts, err := listTenants(ctx, st)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			tenants[t] = true
		}
		for t := range byTenant {
			tenants[t] = true
		}
	}
	for _, t := range sortedKeys(tenants) {
		rep.Tenants = append(rep.Tenants, t)
		blocks, err := st.TenantBlocks(ctx, t)
		if err != nil {
			return nil, err
		}
		if err := verifyTenant(ctx, rep, c, cfg, t, blocks, byTenant[t]); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

func layoutRoot(l blockkey.Layout) string {
	if p := strings.Trim(l.Prefix, "/"); p != "" {
		return p + "/"
	}
	return ""
}

// visible is a block a reader sees, for I2.
type visible struct {
	id, key    string
	stream     string // stream.ID: blocks of different streams may overlap
	minT, maxT int64
	producer   string // group@version, "" for an upload
}

func verifyTenant(ctx context.Context, rep *VerifyReport, c S3Reader, cfg config.Config, tenant string, blocks []records.Block, bucket map[string]*bucketBlock) error {
	v := tenantCheck{rep: rep, c: c, cfg: cfg, tenant: tenant, blocks: blocks, bucket: bucket, recs: map[string]records.Block{}}
	for _, b := range blocks {
		v.recs[b.ID] = b
	}
	vis, err := v.publishedMetas(ctx)
	if err != nil {
		return err
	}
	if err := v.recordedVersions(); err != nil {
		return err
	}
	v.overlaps(vis)
	v.orphans()
	return nil
}

// tenantCheck is one tenant's verification: its records, what its
// bucket holds, and the report the checks add to.
type tenantCheck struct {
	rep    *VerifyReport
	c      S3Reader
	cfg    config.Config
	tenant string
	blocks []records.Block
	recs   map[string]records.Block
	bucket map[string]*bucketBlock
}

func (v tenantCheck) add(inv, key, format string, args ...any) {
	v.rep.Violations = append(v.rep.Violations, Violation{Invariant: inv, Tenant: v.tenant, Key: key, Detail: fmt.Sprintf(format, args...)})
}

// publishedMetas is I3 from the bucket: every current meta.json's listed
// files exist with their sizes. It returns the blocks a reader sees, for I2.
func (v tenantCheck) publishedMetas(ctx context.Context) ([]visible, error) {
	var vis []visible
	for _, id := range sortedKeys(v.bucket) {
		bb := v.bucket[id]
		rec, known := v.recs[id]
		metaV, ok := bb.latest(blockmeta.MetaFilename)
		if !ok || known && rec.State == protocol.BlockRejected {
			continue
		}
		v.rep.PublishedMetas++
		metaKey := bb.key.Object(blockmeta.MetaFilename)
		raw, err := getBytes(ctx, v.c, v.cfg.Bucket, metaKey, metaV.VersionID)
		if err != nil {
			return nil, err
		}
		meta, err := blockmeta.Parse(raw, metaKey)
		if err != nil {
			v.add(InvI3, metaKey, "published meta.json does not parse: %v", err)
			continue
		}
		v.listedFiles(bb, meta)
		_, marked := bb.latest(blockmeta.DeletionMarkFilename)
		_, noCompact := bb.latest(blockmeta.NoCompactMarkFilename)
		if !marked && !noCompact && !(known && rec.NoCompact) {
			vb := visible{id: id, key: v.tenant + "/" + id, stream: stream.Of(meta, v.cfg.ReplicaLabels).ID(), minT: meta.MinTime, maxT: meta.MaxTime}
			if known {
				vb.producer = versionOf(rec.ProducedBy)
			}
			vis = append(vis, vb)
		}
	}
	return vis, nil
}

// listedFiles checks the files a published meta.json lists (or, when it
// lists none, that the block has an index).
func (v tenantCheck) listedFiles(bb *bucketBlock, meta *blockmeta.Meta) {
	if meta.Thanos == nil || len(meta.Thanos.Files) == 0 {
		if _, ok := bb.latest(blockmeta.IndexFilename); !ok {
			v.add(InvI3, bb.key.Object(blockmeta.IndexFilename), "published block has no index")
		}
		return
	}
	for _, f := range meta.Thanos.Files {
		if f.RelPath == blockmeta.MetaFilename {
			continue
		}
		cur, ok := bb.latest(f.RelPath)
		switch {
		case !ok:
			v.add(InvI3, bb.key.Object(f.RelPath), "listed in meta.json but missing")
		case f.SizeBytes != 0 && cur.Size != f.SizeBytes:
			v.add(InvI3, bb.key.Object(f.RelPath), "meta.json lists %d bytes, the object has %d", f.SizeBytes, cur.Size)
		}
	}
}

// recordedVersions is I3 from the table: every version a readable
// block's record names is in the bucket with its size.
func (v tenantCheck) recordedVersions() error {
	for _, b := range v.blocks {
		readable := (b.State == protocol.BlockLive && b.Published) || b.State == protocol.BlockClaimed || b.State == protocol.BlockRetiring
		if !readable {
			continue
		}
		k, err := blockKeyOf(v.cfg.Layout, b)
		if err != nil {
			return err
		}
		bb := v.bucket[b.ID]
		for _, ov := range b.AllVersions() {
			found := false
			var size int64
			if bb != nil {
				for _, bv := range bb.versions[ov.RelPath] {
					if bv.VersionID == ov.VersionID && !bv.DeleteMarker {
						found, size = true, bv.Size
					}
				}
			}
			switch {
			case !found:
				v.add(InvI3, k.Object(ov.RelPath), "version %s, named by the %s block's record, is not in the bucket", ov.VersionID, b.State)
			case ov.Size != 0 && size != ov.Size:
				v.add(InvI3, k.Object(ov.RelPath), "version %s has %d bytes, the record says %d", ov.VersionID, size, ov.Size)
			}
		}
	}
	return nil
}

// overlaps is I2: visible blocks of one stream — those a reader sees in
// the bucket, and the table's published LIVE blocks — that overlap in time
// must be partitions of one group version.
func (v tenantCheck) overlaps(vis []visible) {
	seen := map[string]bool{}
	for _, vb := range vis {
		seen[vb.id] = true
	}
	for _, b := range v.blocks {
		if b.State == protocol.BlockLive && b.Published && !b.NoCompact && !seen[b.ID] {
			vis = append(vis, visible{id: b.ID, key: b.Key(), stream: b.Stream, minT: b.MinT, maxT: b.MaxT, producer: versionOf(b.ProducedBy)})
		}
	}
	v.rep.VisibleBlocks += len(vis)
	sort.Slice(vis, func(i, j int) bool {
		if vis[i].minT != vis[j].minT {
			return vis[i].minT < vis[j].minT
		}
		return vis[i].id < vis[j].id
	})
	for i := range vis {
		for j := i + 1; j < len(vis) && vis[j].minT < vis[i].maxT; j++ {
			a, b := vis[i], vis[j]
			if a.stream != b.stream || (a.producer != "" && a.producer == b.producer) {
				continue
			}
			v.add(InvI2, a.key+" + "+b.key, "[%s, %s) and [%s, %s) overlap; %s and %s",
				msTime(a.minT), msTime(a.maxT), msTime(b.minT), msTime(b.maxT), producerText(a.producer), producerText(b.producer))
		}
	}
}

// orphans is I4: every object version belongs to a kept block's recorded
// versions.
func (v tenantCheck) orphans() {
	rejectedObjects, markers := 0, 0
	for _, id := range sortedKeys(v.bucket) {
		bb := v.bucket[id]
		rec, known := v.recs[id]
		for _, file := range sortedKeys(bb.versions) {
			for _, ov := range bb.versions[file] {
				key := bb.key.Object(file)
				switch {
				case known && rec.State == protocol.BlockRejected:
					rejectedObjects++
				case file == blockmeta.NoCompactMarkFilename && !ov.DeleteMarker:
					markers++
				case !known:
					v.add(InvI4, key, "version %s: no block record (an upload not registered yet?)", vtext(ov))
				case !keptState(rec.State):
					v.add(InvI4, key, "version %s: the block is %s and its objects should be gone", vtext(ov), rec.State)
				case ov.DeleteMarker:
					v.add(InvI4, key, "delete marker %s: Sluice deletes by VersionId and never leaves one", ov.VersionID)
				case !rec.Names(file, ov.VersionID):
					v.add(InvI4, key, "version %s is not one the %s block's record names", vtext(ov), rec.State)
				}
			}
		}
	}
	if rejectedObjects > 0 {
		v.rep.Notes = append(v.rep.Notes, fmt.Sprintf("%s: %d object version(s) of rejected blocks left alone ('sluice status' shows why)", v.tenant, rejectedObjects))
	}
	if markers > 0 {
		v.rep.Notes = append(v.rep.Notes, fmt.Sprintf("%s: %d no-compact mark(s) honoured", v.tenant, markers))
	}
}

func keptState(s protocol.BlockState) bool {
	switch s {
	case protocol.BlockLive, protocol.BlockClaimed, protocol.BlockRetiring, protocol.BlockPending:
		return true
	}
	return false
}

// versionOf is the version a producedBy (a protocol.PartitionRef) names;
// anything else is returned as it is.
func versionOf(producedBy string) string {
	if r, err := protocol.ParsePartitionRef(producedBy); err == nil {
		return r.VersionRef.String()
	}
	return producedBy
}

func producerText(p string) string {
	if p == "" {
		return "an upload"
	}
	return "an output of " + p
}

func vtext(v ObjectVersion) string {
	if v.DeleteMarker {
		return v.VersionID + " (delete marker)"
	}
	return v.VersionID
}

func getBytes(ctx context.Context, c S3Reader, bucket, key, vid string) ([]byte, error) {
	in := &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}
	if vid != "" {
		in.VersionId = aws.String(vid)
	}
	res, err := c.GetObject(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("get s3://%s/%s: %w", bucket, key, err)
	}
	defer res.Body.Close()
	return io.ReadAll(io.LimitReader(res.Body, 16<<20))
}

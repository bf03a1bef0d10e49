package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/oklog/ulid/v2"
	"github.com/schollz/progressbar/v3"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/s3errors"
	"github.com/sluice-dev/sluice/shared/spec"
)

func init() {
	register(&command{
		name:    "upload",
		summary: "upload block directories the way a shipper does (files first, meta.json last)",
		usage:   "[--tenant T] [--force] DIR...",
		aws:     true,
		help: `Uploads Prometheus TSDB block directories (<ULID>/ with meta.json, index and
chunks/) to the bucket as Thanos' and Cortex's shippers do: index, chunks and
any other files first, meta.json last. meta.json's arrival is what tells
Sluice the block is complete, so a block is never compacted half uploaded.

Every directory is checked before anything is uploaded: meta.json must parse
and be a Prometheus block's, index and chunks/ must be there, and when
meta.json lists its files (thanos.files) their sizes must match. If any
directory is not a valid block, nothing is uploaded and the reason is printed.

A block whose meta.json is already in the bucket is skipped (a shipper
uploads a block once); --force uploads it again, which Sluice recognises as a
re-upload and cleans up, never compacting it twice.

A DIR that is not a block but holds blocks — a Prometheus data directory,
a Thanos sidecar's (the same), a Thanos receive tenant's directory — is
uploaded block by block: every complete <ULID>/ in it. What is not a block
is skipped with a line saying why: wal/ and chunks_head/ (the head, not
yet a block), lock and queries.active, temporary *.tmp* directories (a
compaction or deletion in progress), a <ULID>/ without meta.json (still
being written) and anything else.

Examples:
  sluice gen /tmp/blocks && sluice upload --tenant team-a /tmp/blocks
  sluice upload --tenant team-a /var/lib/prometheus/data
  sluice upload --tenant team-a ./data/01HV3Q6Z0V6F3G7Y3SE2N4X3QK`,
		setup: func(fs *flag.FlagSet) runFunc {
			tenant := fs.String("tenant", "", "tenant to upload to (SLUICE_TENANT); required for a multi-tenant bucket")
			force := fs.Bool("force", false, "upload blocks whose meta.json is already in the bucket")
			quiet := fs.Bool("quiet", false, "no progress bar")
			return func(ctx context.Context, e *Env, args []string) error {
				if len(args) == 0 {
					return usagef("no block directory given")
				}
				t := *tenant
				if t == "" {
					t = e.Getenv(spec.EnvTenant)
				}
				if t != "" {
					if err := blockkey.ValidateTenant(t); err != nil {
						return usagef("tenant %q: %v", t, err)
					}
				}
				dirs, err := ExpandDataDirs(args, func(path, why string) {
					fmt.Fprintf(e.Stdout, "skipping %s: %s\n", path, why)
				})
				if err != nil {
					return err
				}
				blocks, err := CheckBlockDirs(dirs)
				if err != nil {
					return err
				}
				cfg, err := e.Config(false)
				if err != nil {
					return err
				}
				if cfg.Layout.SingleTenant == "" && t == "" {
					return usagef("--tenant is required: the bucket is multi-tenant (<tenant>/<ULID>/...)")
				}
				opts := UploadOptions{Bucket: cfg.Bucket, Layout: cfg.Layout, Tenant: t, Dirs: dirs, Force: *force}
				if !*quiet {
					opts.Progress = e.progress()
				}
				c, err := e.Clients(ctx)
				if err != nil {
					return err
				}
				sum, err := UploadBlocks(ctx, c.S3, blocks, opts)
				if err != nil {
					return err
				}
				sum.Print(e.Stdout)
				return nil
			}
		},
	})
}

// S3Uploader is the part of the S3 client an upload needs.
type S3Uploader interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
}

// LocalBlock is a block directory that passed CheckBlockDir.
type LocalBlock struct {
	Dir string
	// Tenant, when set, overrides UploadOptions.Tenant for this block.
	Tenant string
	Meta   *blockmeta.Meta
	// Files are the files to upload before meta.json, index first, as
	// paths relative to Dir with forward slashes.
	Files []LocalFile
}

// LocalFile is one file of a LocalBlock.
type LocalFile struct {
	RelPath string
	Size    int64
}

// Bytes is the block's size on disk, meta.json excluded.
func (b LocalBlock) Bytes() int64 {
	var n int64
	for _, f := range b.Files {
		n += f.Size
	}
	return n
}

// CheckBlockDir refuses a directory that is not a complete, valid block,
// saying why.
func CheckBlockDir(dir string) (LocalBlock, error) {
	notBlock := func(format string, args ...any) (LocalBlock, error) {
		return LocalBlock{}, refusef("%s is not a block: %s", dir, fmt.Sprintf(format, args...))
	}
	st, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return notBlock("no such directory")
		}
		return notBlock("%v", err)
	}
	if !st.IsDir() {
		return notBlock("not a directory")
	}
	raw, err := os.ReadFile(filepath.Join(dir, blockmeta.MetaFilename))
	if errors.Is(err, fs.ErrNotExist) {
		return notBlock("no meta.json")
	}
	if err != nil {
		return notBlock("read meta.json: %v", err)
	}
	meta, err := blockmeta.Parse(raw, filepath.Join(dir, blockmeta.MetaFilename))
	if err != nil {
		return notBlock("%v", stripPrefix(err))
	}
	if name := filepath.Base(filepath.Clean(dir)); isULID(name) && name != meta.ULID.String() {
		return notBlock("the directory is named %s but meta.json says block %s", name, meta.ULID)
	}
	b := LocalBlock{Dir: dir, Meta: meta}
	sizes := map[string]int64{}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		switch rel {
		case blockmeta.MetaFilename, blockmeta.DeletionMarkFilename:
			return nil // meta.json goes last; a deletion mark is never shipped
		}
		if !d.Type().IsRegular() || strings.HasSuffix(rel, ".tmp") || strings.Contains(rel, ".tmp/") {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		sizes[rel] = info.Size()
		b.Files = append(b.Files, LocalFile{RelPath: rel, Size: info.Size()})
		return nil
	})
	if err != nil {
		return notBlock("%v", err)
	}
	if _, ok := sizes[blockmeta.IndexFilename]; !ok {
		return notBlock("no index file")
	}
	chunks := 0
	for rel := range sizes {
		if strings.HasPrefix(rel, blockmeta.ChunksDirname+"/") {
			chunks++
		}
	}
	if chunks == 0 && meta.Stats.NumChunks > 0 {
		return notBlock("no chunks/ files, but meta.json counts %d chunks", meta.Stats.NumChunks)
	}
	if meta.Thanos != nil {
		for _, f := range meta.Thanos.Files {
			if f.RelPath == blockmeta.MetaFilename {
				continue
			}
			size, ok := sizes[f.RelPath]
			switch {
			case !ok:
				return notBlock("meta.json lists %s, which is missing", f.RelPath)
			case f.SizeBytes != 0 && size != f.SizeBytes:
				return notBlock("meta.json lists %s with %d bytes, the file has %d", f.RelPath, f.SizeBytes, size)
			}
		}
	}
	sort.Slice(b.Files, func(i, j int) bool {
		// index first, then chunks in order, then the rest.
		ri, rj := fileRank(b.Files[i].RelPath), fileRank(b.Files[j].RelPath)
		if ri != rj {
			return ri < rj
		}
		return b.Files[i].RelPath < b.Files[j].RelPath
	})
	return b, nil
}

func fileRank(rel string) int {
	switch {
	case rel == blockmeta.IndexFilename:
		return 0
	case strings.HasPrefix(rel, blockmeta.ChunksDirname+"/"):
		return 1
	}
	return 2
}

// stripPrefix drops the "invalid block metadata: path:" noise of blockmeta
// errors when the message already names the directory.
func stripPrefix(err error) string {
	return strings.TrimSpace(err.Error())
}

func isULID(s string) bool {
	_, err := ulid.ParseStrict(s)
	return err == nil
}

// ExpandDataDirs replaces every directory of dirs that is not a block but
// holds blocks (a Prometheus data directory) by the complete blocks in it,
// in name (ULID, so time) order, and tells skipped what it left out and
// why. A block directory, and a path that is neither, are kept as given
// (CheckBlockDirs says what is wrong with the latter). A data directory
// without a single complete block is refused.
func ExpandDataDirs(dirs []string, skipped func(path, why string)) ([]string, error) {
	var out []string
	for _, d := range dirs {
		if !isDataDir(d) {
			out = append(out, d)
			continue
		}
		entries, err := os.ReadDir(d)
		if err != nil {
			return nil, refusef("read %s: %v", d, err)
		}
		found := 0
		for _, en := range entries {
			path := filepath.Join(d, en.Name())
			if why := notABlock(path, en); why != "" {
				skipped(path, why)
				continue
			}
			out = append(out, path)
			found++
		}
		if found == 0 {
			return nil, refusef("%s is not a block (no meta.json) and holds no complete block (<ULID>/ with meta.json)", d)
		}
	}
	return out, nil
}

// isDataDir reports a directory without meta.json of its own.
func isDataDir(d string) bool {
	st, err := os.Stat(d)
	if err != nil || !st.IsDir() {
		return false
	}
	_, err = os.Stat(filepath.Join(d, blockmeta.MetaFilename))
	return errors.Is(err, fs.ErrNotExist)
}

// notABlock says why an entry of a data directory is no block to upload
// ("" for a complete block).
func notABlock(path string, en fs.DirEntry) string {
	name := en.Name()
	switch {
	case name == "wal" || name == "chunks_head":
		return "the head's " + name + "/ (samples not yet cut into a block)"
	case name == "lock" || name == "queries.active":
		return "Prometheus' " + name + " file"
	case strings.Contains(name, ".tmp"):
		return "a temporary directory (a compaction or deletion in progress)"
	case !en.IsDir():
		return "not a directory"
	case !isULID(name):
		return "not a block directory (its name is no ULID)"
	}
	if _, err := os.Stat(filepath.Join(path, blockmeta.MetaFilename)); err != nil {
		return "no meta.json: an incomplete block (still being written?)"
	}
	return ""
}

// CheckBlockDirs checks every directory first; any invalid one refuses
// the whole upload. A block given twice is refused too.
func CheckBlockDirs(dirs []string) ([]LocalBlock, error) {
	var out []LocalBlock
	seen := map[ulid.ULID]string{}
	for _, d := range dirs {
		b, err := CheckBlockDir(d)
		if err != nil {
			return nil, err
		}
		if prev, dup := seen[b.Meta.ULID]; dup {
			return nil, refusef("%s and %s are the same block %s", prev, d, b.Meta.ULID)
		}
		seen[b.Meta.ULID] = d
		out = append(out, b)
	}
	return out, nil
}

// UploadOptions configure UploadBlocks.
type UploadOptions struct {
	Bucket string
	Layout blockkey.Layout
	// Tenant owns the blocks (ignored for a single-tenant layout).
	Tenant string
	Dirs   []string
	// Force uploads a block whose meta.json is already in the bucket.
	Force bool
	// Progress receives a progress bar; nil shows none.
	Progress io.Writer
	// Parallelism bounds concurrent file uploads of one block (default 4).
	Parallelism int
}

// UploadedBlock is what happened to one block.
type UploadedBlock struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	Dir    string `json:"dir"`
	Key    string `json:"key"`
	MinT   int64  `json:"minT"`
	MaxT   int64  `json:"maxT"`
	Files  int    `json:"files"`
	Bytes  int64  `json:"bytes"`
	MetaID string `json:"metaVersionId,omitempty"`
	// Skipped: meta.json was already in the bucket.
	Skipped bool `json:"skipped,omitempty"`
}

// UploadSummary is the outcome of UploadBlocks.
type UploadSummary struct {
	Bucket   string          `json:"bucket"`
	Tenant   string          `json:"tenant"`
	Blocks   []UploadedBlock `json:"blocks"`
	Uploaded int             `json:"uploaded"`
	Skipped  int             `json:"skipped"`
	Files    int             `json:"files"`
	Bytes    int64           `json:"bytes"`
	Elapsed  time.Duration   `json:"elapsed"`
}

// Print writes the summary's few lines.
func (s UploadSummary) Print(w io.Writer) {
	who := "tenant " + s.Tenant
	if strings.Contains(s.Tenant, ",") {
		who = "tenants " + s.Tenant
	}
	if s.Uploaded == 0 {
		fmt.Fprintf(w, "nothing uploaded to s3://%s: %d block(s) of %s already there\n", s.Bucket, s.Skipped, who)
	} else {
		fmt.Fprintf(w, "uploaded %d block(s) of %s to s3://%s: %d files, %s in %s",
			s.Uploaded, who, s.Bucket, s.Files, humanBytes(s.Bytes), s.Elapsed.Round(10*time.Millisecond))
		if s.Elapsed > 0 && s.Bytes > 0 {
			fmt.Fprintf(w, " (%s/s)", humanBytes(int64(float64(s.Bytes)/s.Elapsed.Seconds())))
		}
		fmt.Fprintln(w)
	}
	for _, b := range s.Blocks {
		if b.Skipped {
			fmt.Fprintf(w, "  skipped %s: already in the bucket (--force uploads it again)\n", b.Key)
		}
	}
	if s.Uploaded > 0 {
		fmt.Fprintln(w, "Sluice picks each block up when its meta.json lands; 'sluice status' shows progress.")
	}
}

// UploadBlocks uploads checked blocks in the order given: for each, every
// file but meta.json (index first), then meta.json.
func UploadBlocks(ctx context.Context, c S3Uploader, blocks []LocalBlock, opts UploadOptions) (UploadSummary, error) {
	start := time.Now()
	sum := UploadSummary{Bucket: opts.Bucket, Tenant: opts.Tenant}
	if opts.Layout.SingleTenant != "" {
		sum.Tenant = opts.Layout.SingleTenant
	}
	tenants := map[string]bool{}
	par := opts.Parallelism
	if par <= 0 {
		par = 4
	}
	var total int64
	for _, b := range blocks {
		total += b.Bytes()
	}
	var bar *progressbar.ProgressBar
	if opts.Progress != nil {
		bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(opts.Progress),
			progressbar.OptionShowBytes(true),
			progressbar.OptionUseIECUnits(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionShowCount(),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionSetDescription("uploading"),
		)
	}
	for i, b := range blocks {
		tenant := opts.Tenant
		if b.Tenant != "" {
			tenant = b.Tenant
		}
		k, err := opts.Layout.Block(tenant, b.Meta.ULID)
		if err != nil {
			return sum, usagef("%v", err)
		}
		if bar != nil {
			bar.Describe(fmt.Sprintf("block %d/%d", i+1, len(blocks)))
		}
		res := UploadedBlock{Tenant: k.Tenant, ID: b.Meta.ULID.String(), Dir: b.Dir, Key: k.BlockKey(), MinT: b.Meta.MinTime, MaxT: b.Meta.MaxTime}
		metaKey := k.Object(blockmeta.MetaFilename)
		if !opts.Force {
			_, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(opts.Bucket), Key: aws.String(metaKey)})
			if err == nil {
				res.Skipped = true
				sum.Skipped++
				sum.Blocks = append(sum.Blocks, res)
				if bar != nil {
					_ = bar.Add64(b.Bytes())
				}
				continue
			}
			if !s3errors.IsNotFound(err) {
				return sum, fmt.Errorf("check s3://%s/%s: %w", opts.Bucket, metaKey, err)
			}
		}
		if err := uploadFiles(ctx, c, opts.Bucket, k, b, par, bar); err != nil {
			return sum, err
		}
		raw, err := os.ReadFile(filepath.Join(b.Dir, blockmeta.MetaFilename))
		if err != nil {
			return sum, err
		}
		out, err := c.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(opts.Bucket), Key: aws.String(metaKey),
			Body: strings.NewReader(string(raw)), ContentLength: aws.Int64(int64(len(raw))),
			ContentType: aws.String("application/json"),
		})
		if err != nil {
			return sum, fmt.Errorf("upload s3://%s/%s: %w", opts.Bucket, metaKey, err)
		}
		tenants[k.Tenant] = true
		res.MetaID = aws.ToString(out.VersionId)
		res.Files = len(b.Files) + 1
		res.Bytes = b.Bytes() + int64(len(raw))
		sum.Uploaded++
		sum.Files += res.Files
		sum.Bytes += res.Bytes
		sum.Blocks = append(sum.Blocks, res)
	}
	if bar != nil {
		_ = bar.Finish()
	}
	if len(tenants) > 1 {
		sum.Tenant = strings.Join(sortedKeys(tenants), ", ")
	}
	sum.Elapsed = time.Since(start)
	return sum, nil
}

func uploadFiles(ctx context.Context, c S3Uploader, bucket string, k blockkey.Key, b LocalBlock, par int, bar *progressbar.ProgressBar) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan LocalFile)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range min(par, len(b.Files)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range work {
				err := putFile(ctx, c, bucket, k.Object(f.RelPath), filepath.Join(b.Dir, filepath.FromSlash(f.RelPath)), f.Size)
				mu.Lock()
				if err != nil && first == nil {
					first = err
					cancel()
				}
				if err == nil && bar != nil {
					_ = bar.Add64(f.Size)
				}
				mu.Unlock()
			}
		}()
	}
	for _, f := range b.Files {
		select {
		case work <- f:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

func putFile(ctx context.Context, c S3Uploader, bucket, key, path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: f, ContentLength: aws.Int64(size),
	})
	if err != nil {
		return fmt.Errorf("upload s3://%s/%s: %w", bucket, key, err)
	}
	return nil
}

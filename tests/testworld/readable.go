package testworld

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/blockstore"
	"github.com/sluice-dev/sluice/shared/equiv"
)

// Readable is what CheckReadable found a reader sees.
type Readable struct {
	// Blocks are the block keys a reader queries.
	Blocks []string
	// Report compares the uploads with those blocks.
	Report equiv.Report
}

// CheckReadable checks I1 and I3 at any moment, as a reader that lists the
// bucket sees it (a Thanos store gateway, a Cortex querier): every block
// whose meta.json is current is read — except blocks whose deletion mark
// is older than the deletion delay at now — from the current versions of
// the files its meta.json lists. Their union must hold every uploaded
// sample and nothing else; a sample held twice is fine (readers merge
// overlapping blocks), a listed file that is missing is an I3 violation.
//
// Call it while no handler runs (a replay between steps); now is the
// handlers' clock.
func (w *World) CheckReadable(ctx context.Context, now time.Time, tenant string) (Readable, error) {
	var res Readable
	c := w.Env.Clients.S3
	bucket := w.Config.Bucket
	metas, err := w.currentMetas(ctx, tenant)
	if err != nil {
		return res, err
	}
	base, err := os.MkdirTemp(w.scratch, "readable-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(base)
	var dirs []string
	var errs []error
	for _, key := range metas {
		k, err := blockkey.Parse(key, w.Config.Layout)
		if err != nil {
			return res, err
		}
		body, err := getBody(ctx, c, bucket, key)
		if err != nil {
			errs = append(errs, fmt.Errorf("I3 violated: %s listed but unreadable: %w", key, err))
			continue
		}
		meta, err := blockmeta.Parse(body, key)
		if err != nil {
			errs = append(errs, fmt.Errorf("I3 violated: %w", err))
			continue
		}
		if mark, err := getBody(ctx, c, bucket, k.Object(blockkey.DeletionMarkFile)); err == nil {
			dm, err := blockmeta.ParseDeletionMark(mark, k.BlockKey())
			if err == nil && now.Sub(time.Unix(dm.DeletionTime, 0)) > w.Config.DeletionDelay {
				continue // a reader ignores it
			}
		}
		var objs []blockstore.Object
		if meta.Thanos != nil && len(meta.Thanos.Files) > 0 {
			for _, f := range meta.Thanos.Files {
				if f.RelPath == blockkey.MetaFile {
					continue
				}
				size := f.SizeBytes
				if size == 0 {
					size = blockstore.SizeUnknown
				}
				objs = append(objs, blockstore.Object{Key: k.Object(f.RelPath), Size: size, RelPath: f.RelPath})
			}
		} else {
			objs, err = w.currentFiles(ctx, k)
			if err != nil {
				return res, err
			}
		}
		dir := filepath.Join(base, k.Block.String())
		if err := blockstore.Download(ctx, c, bucket, objs, dir, 4); err != nil {
			errs = append(errs, fmt.Errorf("I3 violated: %s: %w", k.BlockKey(), err))
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, blockkey.MetaFile), body, 0o644); err != nil {
			return res, err
		}
		dirs = append(dirs, dir)
		res.Blocks = append(res.Blocks, k.BlockKey())
	}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	rep, err := equiv.Check(ctx, w.Uploaded[tenant], dirs, w.Config.ReplicaLabels)
	if err != nil {
		return res, fmt.Errorf("I1 %s: %w", tenant, err)
	}
	res.Report = rep
	if rep.Missing > 0 || rep.Extra > 0 || rep.InputSamples == 0 {
		return res, fmt.Errorf("I1 violated for %s as a reader sees it (%d blocks): %s", tenant, len(dirs), rep)
	}
	return res, nil
}

// currentMetas lists the keys of the tenant's current meta.json objects.
func (w *World) currentMetas(ctx context.Context, tenant string) ([]string, error) {
	prefix := layoutPath(w.Config.Layout, tenant, "") // "<prefix>/<tenant>/", or the root of a single-tenant bucket
	var out []string
	in := &s3.ListObjectsV2Input{Bucket: aws.String(w.Config.Bucket), Prefix: aws.String(prefix)}
	for {
		res, err := w.Env.Clients.S3.ListObjectsV2(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, err)
		}
		for _, o := range res.Contents {
			if k := aws.ToString(o.Key); strings.HasSuffix(k, "/"+blockkey.MetaFile) {
				out = append(out, k)
			}
		}
		if !aws.ToBool(res.IsTruncated) {
			return out, nil
		}
		in.ContinuationToken = res.NextContinuationToken
	}
}

func (w *World) currentFiles(ctx context.Context, k blockkey.Key) ([]blockstore.Object, error) {
	var out []blockstore.Object
	in := &s3.ListObjectsV2Input{Bucket: aws.String(w.Config.Bucket), Prefix: aws.String(k.BlockPrefix())}
	for {
		res, err := w.Env.Clients.S3.ListObjectsV2(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, o := range res.Contents {
			rel := strings.TrimPrefix(aws.ToString(o.Key), k.BlockPrefix())
			switch rel {
			case blockkey.MetaFile, blockkey.DeletionMarkFile, blockkey.NoCompactMarkFile:
				continue
			}
			out = append(out, blockstore.Object{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), RelPath: rel})
		}
		if !aws.ToBool(res.IsTruncated) {
			return out, nil
		}
		in.ContinuationToken = res.NextContinuationToken
	}
}

func getBody(ctx context.Context, c *s3.Client, bucket, key string) ([]byte, error) {
	res, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	return io.ReadAll(res.Body)
}

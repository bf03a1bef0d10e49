package pipeline

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/records"
)

// blockListing is every version under one block's own prefix, from one
// LIST: what registration learns the block's files from, whether it
// carries a no-compact mark, and which versions an earlier or later upload
// of it left.
type blockListing struct {
	latest   map[string]records.ObjectVersion // rel path → its current version
	versions []records.ObjectVersion          // every version and delete marker
	// metaWritten is when each version of meta.json was written: the
	// upload's completion, which the bucket index dates the block by.
	metaWritten map[string]time.Time
}

// listBlock lists the versions under k's own prefix (a few keys; Sluice
// never lists a tenant or the bucket).
func (d *Deps) listBlock(ctx context.Context, k blockkey.Key) (blockListing, error) {
	l := blockListing{latest: map[string]records.ObjectVersion{}, metaWritten: map[string]time.Time{}}
	prefix := k.BlockPrefix()
	in := &s3.ListObjectVersionsInput{Bucket: aws.String(d.Config.Bucket), Prefix: aws.String(prefix)}
	for {
		res, err := d.S3.ListObjectVersions(ctx, in)
		if err != nil {
			return l, fmt.Errorf("list %s: %w", prefix, err)
		}
		for _, v := range res.Versions {
			ov := records.ObjectVersion{RelPath: strings.TrimPrefix(aws.ToString(v.Key), prefix),
				VersionID: aws.ToString(v.VersionId), Size: aws.ToInt64(v.Size), ETag: aws.ToString(v.ETag)}
			l.versions = append(l.versions, ov)
			if ov.RelPath == blockkey.MetaFile {
				l.metaWritten[ov.VersionID] = aws.ToTime(v.LastModified)
			}
			if aws.ToBool(v.IsLatest) {
				l.latest[ov.RelPath] = ov
			}
		}
		for _, m := range res.DeleteMarkers {
			l.versions = append(l.versions, records.ObjectVersion{RelPath: strings.TrimPrefix(aws.ToString(m.Key), prefix),
				VersionID: aws.ToString(m.VersionId)})
		}
		if !aws.ToBool(res.IsTruncated) {
			return l, nil
		}
		in.KeyMarker, in.VersionIdMarker = res.NextKeyMarker, res.NextVersionIdMarker
	}
}

// files are the block's index and chunks at their current versions: those
// thanos.files lists, checked against their listed sizes, or — for a plain
// Prometheus meta.json that lists none — every current object but
// meta.json and the marks. An error says which file is missing or wrong.
func (l blockListing) files(k blockkey.Key, meta *blockmeta.Meta) ([]records.ObjectVersion, error) {
	var out []records.ObjectVersion
	if meta.Thanos != nil && len(meta.Thanos.Files) > 0 {
		for _, f := range meta.Thanos.Files {
			if f.RelPath == blockkey.MetaFile {
				continue
			}
			v, ok := l.latest[f.RelPath]
			if !ok {
				return nil, fmt.Errorf("block file missing: %s", k.Object(f.RelPath))
			}
			if f.SizeBytes != 0 && v.Size != f.SizeBytes {
				return nil, fmt.Errorf("block file missing: %s (size %d, meta.json says %d)", k.Object(f.RelPath), v.Size, f.SizeBytes)
			}
			out = append(out, v)
		}
	} else {
		for rel, v := range l.latest {
			if rel != blockkey.MetaFile && rel != blockkey.DeletionMarkFile && rel != blockkey.NoCompactMarkFile {
				out = append(out, v)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].RelPath < out[j].RelPath })
	}
	for _, f := range out {
		if f.RelPath == blockkey.IndexFile {
			return out, nil
		}
	}
	return nil, fmt.Errorf("block file missing: %s", k.Object(blockkey.IndexFile))
}

// notNamedBy lists the versions (and delete markers) of b's meta.json and
// files that b's record does not name: another upload's. The marks are
// not b's files and are left alone.
func (l blockListing) notNamedBy(b records.Block) []records.ObjectVersion {
	mine := map[string]bool{blockkey.MetaFile: true}
	for _, f := range b.Files {
		mine[f.RelPath] = true
	}
	var out []records.ObjectVersion
	for _, v := range l.versions {
		if mine[v.RelPath] && !b.Names(v.RelPath, v.VersionID) {
			out = append(out, v)
		}
	}
	return out
}

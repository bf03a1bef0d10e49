package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/blockmeta"
	"github.com/sluice-dev/sluice/shared/records"
)

// S3Reader is the part of the S3 client that status, verify and the demo
// read with.
type S3Reader interface {
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	ListObjectVersions(ctx context.Context, in *s3.ListObjectVersionsInput, opts ...func(*s3.Options)) (*s3.ListObjectVersionsOutput, error)
}

// ObjectVersion is one version (or delete marker) in the bucket.
type ObjectVersion struct {
	Key          string
	VersionID    string
	Size         int64
	IsLatest     bool
	DeleteMarker bool
	LastModified time.Time
}

// ListVersions lists every object version and delete marker under prefix.
func ListVersions(ctx context.Context, c S3Reader, bucket, prefix string) ([]ObjectVersion, error) {
	in := &s3.ListObjectVersionsInput{Bucket: aws.String(bucket)}
	if prefix != "" {
		in.Prefix = aws.String(prefix)
	}
	var out []ObjectVersion
	for {
		res, err := c.ListObjectVersions(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list s3://%s/%s: %w", bucket, prefix, err)
		}
		for _, v := range res.Versions {
			out = append(out, ObjectVersion{Key: aws.ToString(v.Key), VersionID: aws.ToString(v.VersionId),
				Size: aws.ToInt64(v.Size), IsLatest: aws.ToBool(v.IsLatest), LastModified: aws.ToTime(v.LastModified)})
		}
		for _, m := range res.DeleteMarkers {
			out = append(out, ObjectVersion{Key: aws.ToString(m.Key), VersionID: aws.ToString(m.VersionId),
				IsLatest: aws.ToBool(m.IsLatest), DeleteMarker: true, LastModified: aws.ToTime(m.LastModified)})
		}
		if !aws.ToBool(res.IsTruncated) {
			return out, nil
		}
		in.KeyMarker, in.VersionIdMarker = res.NextKeyMarker, res.NextVersionIdMarker
	}
}

// DownloadBlock writes the object versions a block's record names into
// dir/<ULID>/ (meta.json from its recorded version, or the record's body
// when it has none yet) and returns the block directory.
func DownloadBlock(ctx context.Context, c S3Reader, bucket string, layout blockkey.Layout, b records.Block, dir string) (string, error) {
	k, err := blockKeyOf(layout, b)
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, b.ID)
	if err := os.MkdirAll(filepath.Join(out, blockmeta.ChunksDirname), 0o755); err != nil {
		return "", err
	}
	for _, f := range b.Files {
		if err := getTo(ctx, c, bucket, k.Object(f.RelPath), f.VersionID, filepath.Join(out, filepath.FromSlash(f.RelPath)), f.Size); err != nil {
			return "", err
		}
	}
	metaPath := filepath.Join(out, blockmeta.MetaFilename)
	if b.MetaVersionID != "" {
		return out, getTo(ctx, c, bucket, k.Object(blockmeta.MetaFilename), b.MetaVersionID, metaPath, 0)
	}
	return out, os.WriteFile(metaPath, []byte(b.Meta), 0o644)
}

func blockKeyOf(layout blockkey.Layout, b records.Block) (blockkey.Key, error) {
	id, err := parseULID(b.ID)
	if err != nil {
		return blockkey.Key{}, fmt.Errorf("block %s of %s: %w", b.ID, b.Tenant, err)
	}
	return layout.Block(b.Tenant, id)
}

// getTo downloads one object version to path; size > 0 is checked.
func getTo(ctx context.Context, c S3Reader, bucket, key, vid, path string, size int64) error {
	in := &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}
	if vid != "" {
		in.VersionId = aws.String(vid)
	}
	res, err := c.GetObject(ctx, in)
	if err != nil {
		return fmt.Errorf("get s3://%s/%s (version %s): %w", bucket, key, vid, err)
	}
	defer res.Body.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, res.Body)
	if err != nil {
		f.Close()
		return fmt.Errorf("read s3://%s/%s: %w", bucket, key, err)
	}
	if size > 0 && n != size {
		f.Close()
		return fmt.Errorf("s3://%s/%s version %s has %d bytes, the record says %d", bucket, key, vid, n, size)
	}
	return f.Close()
}

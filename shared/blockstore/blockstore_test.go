package blockstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/sluice-dev/sluice/shared/awsenv"
)

// files writes a fake block (index, chunks) of the given sizes into a temp
// dir and returns it with the relative paths.
func files(t *testing.T, sizes map[string]int, fill byte) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	var rels []string
	for rel, n := range sizes {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		os.MkdirAll(filepath.Dir(p), 0o755)
		data := bytes.Repeat([]byte{fill}, n)
		for i := range data {
			data[i] += byte(i * 7 % 251)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		rels = append(rels, rel)
	}
	return dir, rels
}

func objectsOf(up []Uploaded) []Object {
	var objs []Object
	for _, u := range up {
		objs = append(objs, Object{Key: u.Key, VersionID: u.VersionID, Size: u.Size, RelPath: u.RelPath})
	}
	return objs
}

// scenario runs the upload/adopt/download contract against api.
func uploadContract(t *testing.T, api S3API, bucket string) {
	ctx := context.Background()
	opts := UploadOptions{MultipartThreshold: 6 << 20, PartSize: 5 << 20}
	sizes := map[string]int{"index": 1000, "chunks/000001": 11 << 20, "chunks/000002": 0}
	dir, rels := files(t, sizes, 1)
	prefix := "tenant-a/01BLOCK" + strings.ToUpper(fmt.Sprint(time.Now().UnixNano()))

	first, err := Upload(ctx, api, bucket, prefix, dir, rels, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, u := range first {
		if u.RelPath != rels[i] || u.Key != prefix+"/"+rels[i] || u.VersionID == "" || u.Adopted || u.Size != int64(sizes[rels[i]]) {
			t.Fatalf("uploaded %+v", u)
		}
		if rels[i] == "chunks/000001" && !strings.HasSuffix(u.ETag, "-3") {
			t.Fatalf("11 MiB in 5 MiB parts should be a 3-part upload, ETag %s", u.ETag)
		}
	}

	t.Run("same bytes again are adopted", func(t *testing.T) {
		again, err := Upload(ctx, api, bucket, prefix, dir, rels, opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range again {
			if !again[i].Adopted || again[i].VersionID != first[i].VersionID || again[i].Checksum != first[i].Checksum {
				t.Fatalf("second attempt %+v, first %+v", again[i], first[i])
			}
		}
	})

	t.Run("different bytes are not deterministic", func(t *testing.T) {
		for _, rel := range rels {
			if sizes[rel] == 0 {
				continue
			}
			other, _ := files(t, map[string]int{rel: sizes[rel]}, 2)
			_, err := Upload(ctx, api, bucket, prefix, other, []string{rel}, opts)
			if !errors.Is(err, ErrNotDeterministic) || !strings.Contains(err.Error(), prefix+"/"+rel) {
				t.Fatalf("%s: err = %v", rel, err)
			}
		}
		// Different size too.
		other, _ := files(t, map[string]int{"index": 999}, 1)
		if _, err := Upload(ctx, api, bucket, prefix, other, []string{"index"}, opts); !errors.Is(err, ErrNotDeterministic) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("download by version with sizes verified", func(t *testing.T) {
		out := t.TempDir()
		if err := Download(ctx, api, bucket, objectsOf(first), out, 2); err != nil {
			t.Fatal(err)
		}
		for _, rel := range rels {
			a, _ := os.ReadFile(filepath.Join(dir, rel))
			b, err := os.ReadFile(filepath.Join(out, rel))
			if err != nil || !bytes.Equal(a, b) {
				t.Fatalf("%s differs after download (%v)", rel, err)
			}
		}
	})

	t.Run("size mismatch", func(t *testing.T) {
		out := t.TempDir()
		objs := objectsOf(first)
		objs[0].Size++
		err := Download(ctx, api, bucket, objs[:1], out, 1)
		if !errors.Is(err, ErrSizeMismatch) || !strings.Contains(err.Error(), objs[0].Key) {
			t.Fatalf("err = %v", err)
		}
		if _, err := os.Stat(filepath.Join(out, objs[0].RelPath)); !os.IsNotExist(err) {
			t.Fatal("partial file left behind")
		}
		objs[0].Size = SizeUnknown
		if err := Download(ctx, api, bucket, objs[:1], out, 1); err != nil {
			t.Fatalf("SizeUnknown: %v", err)
		}
	})

	t.Run("missing version and key", func(t *testing.T) {
		objs := objectsOf(first)[:1]
		objs[0].Key += "-nope"
		if err := Download(ctx, api, bucket, objs, t.TempDir(), 1); !errors.Is(err, ErrNotFound) {
			t.Fatalf("missing key: %v", err)
		}
	})
}

func TestUploadDownloadFake(t *testing.T) {
	uploadContract(t, newFake(), "bucket")
}

// TestUploadUnderSSEKMS: under SSE-KMS an ETag is no MD5 of the bytes and
// differs for every write; an earlier attempt's object is still recognised
// (by its SHA-256 checksum) and adopted, and other bytes are still refused.
func TestUploadUnderSSEKMS(t *testing.T) {
	f := newFake()
	f.kms = true
	uploadContract(t, f, "bucket")
	ctx := context.Background()
	vid, same, err := PutOnce(ctx, f, "bucket", "t/b/meta.json", []byte("meta"))
	if err != nil || !same {
		t.Fatalf("first PutOnce: %v, same %v", err, same)
	}
	again, same, err := PutOnce(ctx, f, "bucket", "t/b/meta.json", []byte("meta"))
	if err != nil || !same || again != vid {
		t.Fatalf("PutOnce of the same bytes: version %s (first %s), same %v, %v", again, vid, same, err)
	}
	if _, same, err := PutOnce(ctx, f, "bucket", "t/b/meta.json", []byte("other")); err != nil || same {
		t.Fatalf("PutOnce of other bytes: same %v, %v", same, err)
	}
}

func TestDownloadBoundedParallelism(t *testing.T) {
	f := newFake()
	f.getDelay = 20 * time.Millisecond
	var objs []Object
	for i := 0; i < 12; i++ {
		key := fmt.Sprintf("t/b/chunks/%06d", i+1)
		id := f.put(key, []byte("x"), "")
		objs = append(objs, Object{Key: key, VersionID: id, Size: 1, RelPath: fmt.Sprintf("chunks/%06d", i+1)})
	}
	if err := Download(context.Background(), f, "b", objs, t.TempDir(), 3); err != nil {
		t.Fatal(err)
	}
	if got := f.maxGets.Load(); got != 3 {
		t.Fatalf("max concurrent GETs %d, want 3", got)
	}
}

func TestDownloadByVersion(t *testing.T) {
	f := newFake()
	v1 := f.put("k", []byte("old"), "")
	f.put("k", []byte("newer"), "")
	dir := t.TempDir()
	if err := Download(context.Background(), f, "b", []Object{{Key: "k", VersionID: v1, Size: 3, RelPath: "index"}}, dir, 1); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "index")); string(b) != "old" {
		t.Fatalf("got %q", b)
	}
}

func TestInvalidPaths(t *testing.T) {
	for _, rel := range []string{"../x", "/etc/passwd", "", "a/../../b"} {
		if err := Download(context.Background(), newFake(), "b", []Object{{Key: "k", RelPath: rel}}, t.TempDir(), 1); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("Download %q: %v", rel, err)
		}
		if _, err := Upload(context.Background(), newFake(), "b", "p", t.TempDir(), []string{rel}, UploadOptions{}); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("Upload %q: %v", rel, err)
		}
	}
}

func TestWithScratchDir(t *testing.T) {
	base := t.TempDir()
	var seen string
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		fn   func(dir string) error
		want error
	}{
		{"success", func(string) error { return nil }, nil},
		{"error", func(string) error { return boom }, boom},
	} {
		err := WithScratchDir(base, func(dir string) error {
			seen = dir
			os.MkdirAll(filepath.Join(dir, "blk", "chunks"), 0o755)
			os.WriteFile(filepath.Join(dir, "blk", "chunks", "000001"), []byte("x"), 0o644)
			return tc.fn(dir)
		})
		if !errors.Is(err, tc.want) && !(err == nil && tc.want == nil) {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if _, err := os.Stat(seen); !os.IsNotExist(err) {
			t.Fatalf("%s: scratch dir survived", tc.name)
		}
	}
	func() {
		defer func() { recover() }()
		_ = WithScratchDir(base, func(dir string) error { seen = dir; panic("die") })
	}()
	if _, err := os.Stat(seen); !os.IsNotExist(err) {
		t.Fatal("scratch dir survived a panic")
	}
	if entries, _ := os.ReadDir(base); len(entries) != 0 {
		t.Fatalf("base holds %v", entries)
	}
}

// TestUploadDownloadEmulator runs the same contract against the S3
// emulator (moto or LocalStack) at AWS_ENDPOINT_URL.
func TestUploadDownloadEmulator(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the S3 emulator")
	}
	api, bucket := emulatorBucket(t)
	uploadContract(t, api, bucket)
}

func emulatorBucket(t *testing.T) (*s3.Client, string) {
	t.Helper()
	if os.Getenv("AWS_ENDPOINT_URL") == "" {
		t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clients, err := awsenv.Load(ctx, awsenv.Options{MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	bucket := fmt.Sprintf("blockstore-test-%x", rnd)
	if _, err := clients.S3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		if os.Getenv("SLUICE_REQUIRE_EMULATOR") == "" {
			t.Skipf("no S3 emulator at %s: %v", os.Getenv("AWS_ENDPOINT_URL"), err)
		}
		t.Fatal(err)
	}
	if _, err := clients.S3.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{
		Bucket:                  aws.String(bucket),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled},
	}); err != nil {
		t.Fatal(err)
	}
	return clients.S3, bucket
}

package blockstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/sluice-dev/sluice/localstack/memaws"
	"github.com/sluice-dev/sluice/shared/awsenv"
)

// memBucket is a versioned bucket in an in-memory S3 that speaks the wire
// protocol (localstack/memaws): stricter than the fake (5 MiB parts,
// checksums, ranges).
func memBucket(t *testing.T) (*s3.Client, string) {
	t.Helper()
	cloud := memaws.New(memaws.Options{})
	clients, err := awsenv.Load(context.Background(), awsenv.Options{Endpoint: memaws.Endpoint, HTTPClient: cloud})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := clients.S3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("stream-test")}); err != nil {
		t.Fatal(err)
	}
	if _, err := clients.S3.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String("stream-test"),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatal(err)
	}
	return clients.S3, "stream-test"
}

// streamBucket is the emulator's bucket, or memaws' under -short.
func streamBucket(t *testing.T) (*s3.Client, string) {
	if testing.Short() {
		return memBucket(t)
	}
	return emulatorBucket(t)
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// streamIn writes data through a StreamUpload in uneven writes.
func streamIn(ctx context.Context, api S3API, bucket, key string, data []byte, opts UploadOptions) (Uploaded, error) {
	u := NewStreamUpload(ctx, api, bucket, key, "chunks/000001", opts)
	for off, step := 0, 1; off < len(data); off, step = off+step, step*3%1000003+1 {
		end := min(off+step, len(data))
		if _, err := u.Write(data[off:end]); err != nil {
			u.Abort()
			return Uploaded{}, err
		}
		step = end - off
	}
	if err := u.Close(); err != nil {
		return Uploaded{}, err
	}
	return u.Uploaded(), nil
}

// A stream becomes exactly the object Upload would have made of the same
// bytes in a file (one PUT under the threshold, parts of PartSize from
// it), is adopted when written again, is refused when other bytes come
// for its key, and reads back by range with its size checked.
func TestStreamUploadIsUploadsObject(t *testing.T) {
	api, bucket := streamBucket(t)
	ctx := context.Background()
	opts := UploadOptions{MultipartThreshold: 6 << 20, PartSize: 5 << 20, Parallelism: 2}
	prefix := fmt.Sprintf("t/stream-%d", time.Now().UnixNano())
	for _, tc := range []struct {
		name  string
		size  int
		parts string // ETag suffix
	}{
		{"empty", 0, ""},
		{"small", 1000, ""},
		{"just under the threshold", 6<<20 - 1, ""},
		{"at the threshold", 6 << 20, "-2"},
		{"several parts and a short last one", 17<<20 + 3, "-4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := randomBytes(t, tc.size)
			dir, _ := files(t, map[string]int{"f": 0}, 0)
			writeFile(t, dir+"/f", data)
			fileUp, err := Upload(ctx, api, bucket, prefix+"/file-"+strings.ReplaceAll(tc.name, " ", "-"), dir, []string{"f"}, opts)
			if err != nil {
				t.Fatal(err)
			}
			key := prefix + "/" + strings.ReplaceAll(tc.name, " ", "-")
			got, err := streamIn(ctx, api, bucket, key, data, opts)
			if err != nil {
				t.Fatal(err)
			}
			if got.ETag != fileUp[0].ETag || got.Checksum != fileUp[0].Checksum || got.Size != int64(tc.size) || got.VersionID == "" || got.Adopted {
				t.Fatalf("streamed %+v; Upload of the same bytes gave %+v", got, fileUp[0])
			}
			if tc.parts != "" && !strings.HasSuffix(got.ETag, tc.parts) || tc.parts == "" && strings.Contains(got.ETag, "-") {
				t.Errorf("ETag %s; want a %q upload", got.ETag, tc.parts)
			}

			again, err := streamIn(ctx, api, bucket, key, data, opts)
			if err != nil || !again.Adopted || again.VersionID != got.VersionID {
				t.Fatalf("the same bytes again: %+v, %v; want the first version adopted", again, err)
			}
			if tc.size > 0 {
				other := bytes.Clone(data)
				other[len(other)/2] ^= 1
				if _, err := streamIn(ctx, api, bucket, key, other, opts); !errors.Is(err, ErrNotDeterministic) {
					t.Fatalf("other bytes for the key: %v; want ErrNotDeterministic", err)
				}
			}
			if tc.size == 0 {
				return
			}
			o := Object{Key: key, VersionID: got.VersionID, Size: got.Size}
			for _, off := range []int64{0, 1, int64(tc.size) - 1} {
				rc, err := OpenRange(ctx, api, bucket, o, off)
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(rc)
				_ = rc.Close()
				if err != nil || !bytes.Equal(b, data[off:]) {
					t.Fatalf("range from %d: %d bytes, %v; want %d", off, len(b), err, tc.size-int(off))
				}
			}
			bad := o
			bad.Size++
			if _, err := OpenRange(ctx, api, bucket, bad, 0); !errors.Is(err, ErrSizeMismatch) {
				t.Errorf("a recorded size the object does not have: %v; want ErrSizeMismatch", err)
			}
			if _, err := OpenRange(ctx, api, bucket, o, int64(tc.size)+10); !errors.Is(err, ErrSizeMismatch) {
				t.Errorf("a range past the end: %v; want ErrSizeMismatch", err)
			}
			gone := o
			gone.Key += "-gone"
			if _, err := OpenRange(ctx, api, bucket, gone, 0); !errors.Is(err, ErrNotFound) {
				t.Errorf("a missing key: %v; want ErrNotFound", err)
			}
		})
	}
}

// An aborted stream leaves no object and no multipart upload behind.
func TestStreamUploadAbortLeavesNothing(t *testing.T) {
	api, bucket := streamBucket(t)
	ctx := context.Background()
	key := fmt.Sprintf("t/aborted-%d", time.Now().UnixNano())
	u := NewStreamUpload(ctx, api, bucket, key, "chunks/000001", UploadOptions{MultipartThreshold: 6 << 20, PartSize: 5 << 20})
	if _, err := u.Write(randomBytes(t, 13<<20)); err != nil {
		t.Fatal(err)
	}
	u.Abort()
	if err := u.Close(); err == nil {
		t.Fatal("Close after Abort succeeded")
	}
	ups, err := api.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket), Prefix: aws.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 0 {
		t.Errorf("%d multipart uploads left open", len(ups.Uploads))
	}
	if _, err := api.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err == nil {
		t.Error("an aborted stream left an object")
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

package blockstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
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
func memBucket(t testing.TB) (*s3.Client, string) {
	t.Helper()
	api, bucket, _ := loggedMemBucket(t)
	return api, bucket
}

// loggedMemBucket is memBucket, with the headers of every request kept.
func loggedMemBucket(t testing.TB) (*s3.Client, string, *headerLog) {
	t.Helper()
	cloud := &headerLog{Cloud: memaws.New(memaws.Options{})}
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
	return clients.S3, "stream-test", cloud
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

// writeRoundRobin writes size bytes to each of ups, write bytes to each in
// turn, as a merge routes series to partitions, then closes them; chunk
// gives output i's bytes [off, end).
func writeRoundRobin(tb testing.TB, ups []*StreamUpload, size, write int, chunk func(i, off, end int) []byte) {
	tb.Helper()
	for off := 0; off < size; off += write {
		for i, u := range ups {
			if _, err := u.Write(chunk(i, off, min(off+write, size))); err != nil {
				tb.Fatal(err)
			}
		}
	}
	for _, u := range ups {
		if err := u.Close(); err != nil {
			tb.Fatal(err)
		}
	}
}

// partsInFlight counts the UploadPart calls running at once.
type partsInFlight struct {
	S3API
	mu        sync.Mutex
	now, most int
}

func (p *partsInFlight) UploadPart(ctx context.Context, in *s3.UploadPartInput, opts ...func(*s3.Options)) (*s3.UploadPartOutput, error) {
	p.mu.Lock()
	p.now++
	p.most = max(p.most, p.now)
	p.mu.Unlock()
	defer func() { p.mu.Lock(); p.now--; p.mu.Unlock() }()
	time.Sleep(2 * time.Millisecond) // long enough for the others to pile up
	return p.S3API.UploadPart(ctx, in, opts...)
}

// A job that streams many outputs at once, as a split does, holds a
// bounded number of bytes over all of them: each output at most its
// threshold and the part it fills, the parts in flight no more than the
// shared slots, whatever the number of outputs. Every object is still the
// one Upload makes of the same bytes with the same options.
func TestStreamUploadsShareTheirBuffers(t *testing.T) {
	mem, bucket := memBucket(t)
	api := &partsInFlight{S3API: mem}
	ctx := context.Background()
	const outputs, size, write, slots = 10, 10<<20 + 1234, 64 << 10, 2
	buffers := NewBuffers(slots)
	opts := UploadOptions{MultipartThreshold: 5 << 20, PartSize: 5 << 20, Buffers: buffers}
	prefix := fmt.Sprintf("t/shared-%d", time.Now().UnixNano())
	data := make([][]byte, outputs)
	ups := make([]*StreamUpload, outputs)
	for i := range ups {
		data[i] = randomBytes(t, size)
		ups[i] = NewStreamUpload(ctx, api, bucket, fmt.Sprintf("%s/%02d", prefix, i), "chunks/000001", opts)
	}
	writeRoundRobin(t, ups, size, write, func(i, off, end int) []byte { return data[i][off:end] })
	bound := int64(outputs)*(opts.MultipartThreshold+opts.PartSize) + slots*opts.PartSize
	if peak := buffers.Peak(); peak <= 0 || peak > bound {
		t.Errorf("the outputs held at most %d bytes at once; want some, and at most %d (%d outputs × (threshold + part) + %d parts in flight)",
			peak, bound, outputs, slots)
	}
	if held := buffers.Held(); held != 0 {
		t.Errorf("%d bytes still held after every upload closed", held)
	}
	if api.most == 0 || api.most > slots {
		t.Errorf("%d parts in flight at once; want 1 to %d (the shared slots)", api.most, slots)
	}
	dir, _ := files(t, map[string]int{"f": 0}, 0)
	for i, u := range ups {
		got := u.Uploaded()
		writeFile(t, dir+"/f", data[i])
		want, err := Upload(ctx, mem, bucket, fmt.Sprintf("%s/file-%02d", prefix, i), dir, []string{"f"}, UploadOptions{MultipartThreshold: opts.MultipartThreshold, PartSize: opts.PartSize})
		if err != nil {
			t.Fatal(err)
		}
		if got.ETag != want[0].ETag || got.Checksum != want[0].Checksum || got.Size != size {
			t.Fatalf("output %d: streamed %+v; Upload of the same bytes gave %+v", i, got, want[0])
		}
		rc, err := OpenRange(ctx, mem, bucket, Object{Key: got.Key, VersionID: got.VersionID, Size: got.Size}, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil || !bytes.Equal(b, data[i]) {
			t.Fatalf("output %d reads back %d bytes, %v; want its %d", i, len(b), err, size)
		}
	}
}

// An upload that fails gives back everything it held.
func TestStreamUploadAbortGivesItsBuffersBack(t *testing.T) {
	api, bucket := memBucket(t)
	buffers := NewBuffers(1)
	u := NewStreamUpload(context.Background(), api, bucket, "t/aborted", "chunks/000001", UploadOptions{MultipartThreshold: 5 << 20, PartSize: 5 << 20, Buffers: buffers})
	if _, err := u.Write(randomBytes(t, 13<<20)); err != nil {
		t.Fatal(err)
	}
	u.Abort()
	if buffers.Held() != 0 || buffers.Peak() < 5<<20 {
		t.Fatalf("after the abort %d bytes held (peak %d); want 0 held, a peak of at least a part", buffers.Held(), buffers.Peak())
	}
}

// The parts S3 has taken are filled again: a job streaming one object
// after another, in many parts or in one PUT of several held parts, makes
// no more part buffers than it uses at once (the one filling, those in
// flight and the one waiting for a slot), and every object still reads
// back as its own bytes, none overwritten by the next's.
func TestStreamUploadsFillGivenBackParts(t *testing.T) {
	api, bucket := memBucket(t)
	ctx := context.Background()
	const slots, part = 2, 5 << 20
	buffers := NewBuffers(slots)
	opts := UploadOptions{MultipartThreshold: 12 << 20, PartSize: part, Buffers: buffers}
	prefix := fmt.Sprintf("t/refill-%d", time.Now().UnixNano())
	sizes := []int{31<<20 + 7, 11 << 20, 26 << 20, 3 << 20} // parts, a PUT of 3 held parts, parts, a PUT of 1
	written := 0
	for i, size := range sizes {
		data := randomBytes(t, size)
		key := fmt.Sprintf("%s/%d", prefix, i)
		got, err := streamIn(ctx, api, bucket, key, data, opts)
		if err != nil {
			t.Fatal(err)
		}
		written += size
		rc, err := OpenRange(ctx, api, bucket, Object{Key: key, VersionID: got.VersionID, Size: got.Size}, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil || !bytes.Equal(b, data) {
			t.Fatalf("object %d reads back %d bytes, %v; want its own %d", i, len(b), err, size)
		}
	}
	made := len(buffers.free) // every part is given back once its PUT succeeded
	if want := slots + 2; made == 0 || made > want {
		t.Errorf("%d part buffers made for %d MiB in %d objects; want 1 to %d (the filling part, %d in flight, one waiting)",
			made, written>>20, len(sizes), want, slots)
	}
	if buffers.Held() != 0 {
		t.Errorf("%d bytes still held after every upload closed", buffers.Held())
	}
}

// A chunk stream's GET does not ask S3 for the object's checksum: its
// reader checks each chunk it keeps, and the SDK would otherwise hash the
// whole stream again (a stream from offset 0 is the whole object). The
// bytes and the size check are as before.
func TestOpenRangeLeavesTheChecksumToItsReader(t *testing.T) {
	api, bucket, cloud := loggedMemBucket(t)
	ctx := context.Background()
	data := randomBytes(t, 1<<20)
	up, err := streamIn(ctx, api, bucket, "t/seg", data, UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 1000} {
		rc, err := OpenRange(ctx, api, bucket, Object{Key: up.Key, VersionID: up.VersionID, Size: up.Size}, off)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil || !bytes.Equal(b, data[off:]) {
			t.Fatalf("from %d: %d bytes, %v; want %d", off, len(b), err, len(data)-int(off))
		}
		if mode := cloud.last(http.MethodGet).Get("X-Amz-Checksum-Mode"); mode != "" {
			t.Errorf("the GET from %d asked for the object's checksum (x-amz-checksum-mode: %s)", off, mode)
		}
	}
	// The SDK's default does ask, for any other GET: the test would see it.
	if _, err := api.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(up.Key)}); err != nil {
		t.Fatal(err)
	}
	if mode := cloud.last(http.MethodGet).Get("X-Amz-Checksum-Mode"); mode == "" {
		t.Error("a plain GetObject did not ask for the checksum: the check above proves nothing")
	}
}

// headerLog records the headers of the requests it carries.
type headerLog struct {
	*memaws.Cloud
	mu   sync.Mutex
	seen map[string]http.Header // by method, the last
}

func (h *headerLog) Do(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	if h.seen == nil {
		h.seen = map[string]http.Header{}
	}
	h.seen[r.Method] = r.Header.Clone()
	h.mu.Unlock()
	return h.Cloud.Do(r)
}

func (h *headerLog) last(method string) http.Header {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[method]
}

// A PUT is signed with the SHA-256 its checksum header carries: the SDK
// reads the body once, to send it, instead of once more to hash it (which
// it does over plain HTTP), and the signature still covers the body.
func TestSignedWithReadsTheBodyOnce(t *testing.T) {
	api, bucket, cloud := loggedMemBucket(t)
	ctx := context.Background()
	data := randomBytes(t, 3<<20)
	sum := sha256.Sum256(data)
	for _, tc := range []struct {
		name      string
		opts      []func(*s3.Options)
		wantReads int
	}{
		{"SDK's own hash", nil, 2},
		{"signedWith", []func(*s3.Options){signedWith(sum[:])}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &countingReadSeeker{r: bytes.NewReader(data)}
			if _, err := api.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("k"), Body: body,
				ContentLength: aws.Int64(int64(len(data))), ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
				ChecksumSHA256: aws.String(base64.StdEncoding.EncodeToString(sum[:]))}, tc.opts...); err != nil {
				t.Fatal(err)
			}
			if got, want := body.n, int64(tc.wantReads*len(data)); got != want {
				t.Errorf("the SDK read %d bytes of the body; want %d (%d × the body)", got, want, tc.wantReads)
			}
			if got, want := cloud.last(http.MethodPut).Get("X-Amz-Content-Sha256"), hex.EncodeToString(sum[:]); got != want {
				t.Errorf("payload hash signed: %q; want the body's SHA-256 %q", got, want)
			}
		})
	}
}

// countingReadSeeker counts the bytes read through it.
type countingReadSeeker struct {
	r *bytes.Reader
	n int64
}

func (c *countingReadSeeker) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReadSeeker) Seek(off int64, whence int) (int64, error) { return c.r.Seek(off, whence) }

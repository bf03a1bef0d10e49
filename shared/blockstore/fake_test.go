package blockstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// fakeS3 is an in-memory versioned bucket with S3's conditional-write
// semantics and its SHA-256 checksums, for tests that need no emulator.
type fakeS3 struct {
	mu       sync.Mutex
	objects  map[string][]version // key → versions, newest last
	uploads  map[string]map[int32][]byte
	seq      int
	inflight atomic.Int32
	maxGets  atomic.Int32
	getDelay time.Duration
	calls    map[string]int
	// kms makes ETags what they are under SSE-KMS: not an MD5 of the
	// bytes, and different for every write of the same bytes.
	kms bool
}

type version struct {
	id, etag, checksum string
	data               []byte
}

func (f *fakeS3) etag(md5hex string) string {
	if f.kms {
		// A multipart object's keeps its "-<parts>", as S3's does.
		_, parts, multipart := strings.Cut(md5hex, "-")
		if multipart {
			return fmt.Sprintf("kms%029d-%s", f.seq, parts)
		}
		return fmt.Sprintf("kms%029d", f.seq)
	}
	return md5hex
}

func newFake() *fakeS3 {
	return &fakeS3{objects: map[string][]version{}, uploads: map[string]map[int32][]byte{}, calls: map[string]int{}}
}

func apiErr(code string) error { return &smithy.GenericAPIError{Code: code, Message: code} }

func (f *fakeS3) count(op string) {
	f.mu.Lock()
	f.calls[op]++
	f.mu.Unlock()
}

func (f *fakeS3) put(key string, data []byte, etag string) string {
	return f.putSum(key, data, etag, "")
}

func (f *fakeS3) putSum(key string, data []byte, etag, checksum string) string {
	f.seq++
	id := fmt.Sprintf("v%04d", f.seq)
	f.objects[key] = append(f.objects[key], version{id: id, etag: f.etag(etag), checksum: checksum, data: data})
	return id
}

// lastETag is the quoted ETag of key's newest version, as S3 answers a
// write with it.
func (f *fakeS3) lastETag(key string) *string {
	vs := f.objects[key]
	return aws.String(`"` + vs[len(vs)-1].etag + `"`)
}

func (f *fakeS3) GetObject(ctx context.Context, in *s3.GetObjectInput, _ ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	f.count("GetObject")
	n := f.inflight.Add(1)
	defer f.inflight.Add(-1)
	for {
		m := f.maxGets.Load()
		if n <= m || f.maxGets.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(f.getDelay)
	f.mu.Lock()
	defer f.mu.Unlock()
	vs := f.objects[*in.Key]
	for i := len(vs) - 1; i >= 0; i-- {
		if in.VersionId == nil || *in.VersionId == vs[i].id {
			return &s3.GetObjectOutput{Body: io.NopCloser(bytes.NewReader(vs[i].data)), ContentLength: aws.Int64(int64(len(vs[i].data))), VersionId: aws.String(vs[i].id)}, nil
		}
	}
	if in.VersionId != nil && len(vs) > 0 {
		return nil, apiErr("NoSuchVersion")
	}
	return nil, apiErr("NoSuchKey")
}

func (f *fakeS3) HeadObject(ctx context.Context, in *s3.HeadObjectInput, _ ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	f.count("HeadObject")
	f.mu.Lock()
	defer f.mu.Unlock()
	vs := f.objects[*in.Key]
	if len(vs) == 0 {
		return nil, apiErr("NotFound")
	}
	v := vs[len(vs)-1]
	out := &s3.HeadObjectOutput{ContentLength: aws.Int64(int64(len(v.data))), ETag: aws.String(`"` + v.etag + `"`), VersionId: aws.String(v.id)}
	if in.ChecksumMode == types.ChecksumModeEnabled && v.checksum != "" {
		out.ChecksumSHA256 = aws.String(v.checksum)
	}
	return out, nil
}

func (f *fakeS3) PutObject(ctx context.Context, in *s3.PutObjectInput, _ ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	f.count("PutObject")
	data, err := io.ReadAll(in.Body)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if in.IfNoneMatch != nil && len(f.objects[*in.Key]) > 0 {
		return nil, apiErr("PreconditionFailed")
	}
	sum := md5.Sum(data)
	sha := sha256.Sum256(data)
	checksum := base64.StdEncoding.EncodeToString(sha[:])
	if in.ChecksumSHA256 != nil && *in.ChecksumSHA256 != checksum {
		return nil, apiErr("BadDigest")
	}
	id := f.putSum(*in.Key, data, hex.EncodeToString(sum[:]), checksum)
	return &s3.PutObjectOutput{VersionId: aws.String(id), ETag: f.lastETag(*in.Key)}, nil
}

func (f *fakeS3) CreateMultipartUpload(ctx context.Context, in *s3.CreateMultipartUploadInput, _ ...func(*s3.Options)) (*s3.CreateMultipartUploadOutput, error) {
	f.count("CreateMultipartUpload")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	id := fmt.Sprintf("u%d", f.seq)
	f.uploads[id] = map[int32][]byte{}
	return &s3.CreateMultipartUploadOutput{UploadId: aws.String(id)}, nil
}

func (f *fakeS3) UploadPart(ctx context.Context, in *s3.UploadPartInput, _ ...func(*s3.Options)) (*s3.UploadPartOutput, error) {
	f.count("UploadPart")
	data, err := io.ReadAll(in.Body)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.uploads[*in.UploadId][*in.PartNumber] = data
	sum := md5.Sum(data)
	return &s3.UploadPartOutput{ETag: aws.String(`"` + hex.EncodeToString(sum[:]) + `"`)}, nil
}

func (f *fakeS3) CompleteMultipartUpload(ctx context.Context, in *s3.CompleteMultipartUploadInput, _ ...func(*s3.Options)) (*s3.CompleteMultipartUploadOutput, error) {
	f.count("CompleteMultipartUpload")
	f.mu.Lock()
	defer f.mu.Unlock()
	if in.IfNoneMatch != nil && len(f.objects[*in.Key]) > 0 {
		return nil, apiErr("PreconditionFailed")
	}
	var data []byte
	h, c := md5.New(), sha256.New()
	for _, p := range in.MultipartUpload.Parts {
		part := f.uploads[*in.UploadId][*p.PartNumber]
		data = append(data, part...)
		s := md5.Sum(part)
		h.Write(s[:])
		d := sha256.Sum256(part)
		c.Write(d[:])
	}
	delete(f.uploads, *in.UploadId)
	n := len(in.MultipartUpload.Parts)
	etag := fmt.Sprintf("%s-%d", hex.EncodeToString(h.Sum(nil)), n)
	checksum := fmt.Sprintf("%s-%d", base64.StdEncoding.EncodeToString(c.Sum(nil)), n)
	id := f.putSum(*in.Key, data, etag, checksum)
	return &s3.CompleteMultipartUploadOutput{VersionId: aws.String(id), ETag: f.lastETag(*in.Key)}, nil
}

func (f *fakeS3) AbortMultipartUpload(ctx context.Context, in *s3.AbortMultipartUploadInput, _ ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error) {
	f.count("AbortMultipartUpload")
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.uploads, *in.UploadId)
	return &s3.AbortMultipartUploadOutput{}, nil
}

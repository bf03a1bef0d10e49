package mems3_test

import (
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/sluice-dev/sluice/localstack/memaws/mems3"
)

func returnedChecksum(alg s3types.ChecksumAlgorithm, crc32, crc32c, crc64, sha1, sha256, sha512 *string) string {
	return aws.ToString(map[s3types.ChecksumAlgorithm]*string{
		s3types.ChecksumAlgorithmCrc32: crc32, s3types.ChecksumAlgorithmCrc32c: crc32c, s3types.ChecksumAlgorithmCrc64nvme: crc64,
		s3types.ChecksumAlgorithmSha1: sha1, s3types.ChecksumAlgorithmSha256: sha256, s3types.ChecksumAlgorithmSha512: sha512,
	}[alg])
}

// Over http the SDK sends the checksum in a header; over https (here
// in-process, so no TLS is needed) it frames the body aws-chunked with the
// checksum in a trailer. Both must store it, and GET must give it back so
// that the SDK's validation passes.
func TestChecksumFramings(t *testing.T) {
	t.Parallel()
	srv := mems3.New(mems3.Options{})
	logs := &logRecorder{}
	algs := []s3types.ChecksumAlgorithm{"", s3types.ChecksumAlgorithmCrc32, s3types.ChecksumAlgorithmCrc32c, s3types.ChecksumAlgorithmCrc64nvme,
		s3types.ChecksumAlgorithmSha1, s3types.ChecksumAlgorithmSha256, s3types.ChecksumAlgorithmSha512}
	for _, https := range []bool{false, true} {
		var framing []string
		c := newClient(srv, logs, clientConfig{https: https, mangle: func(r *http.Request) {
			if r.Method == http.MethodPut {
				framing = append(framing, r.Header.Get("Content-Encoding")+"|"+r.Header.Get("X-Amz-Trailer"))
			}
		}})
		f := &fixture{srv: srv, c: c, logs: logs, bucket: "framing"}
		if !https {
			if _, err := c.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(f.bucket)}); err != nil {
				t.Fatal(err)
			}
		}
		for _, alg := range algs {
			key := "k-" + string(alg)
			body := strings.Repeat("checksummed "+key, 100)
			framing = nil
			out := f.put(t, key, body, func(in *s3.PutObjectInput) { in.ChecksumAlgorithm = alg })
			sent := alg
			if sent == "" {
				sent = s3types.ChecksumAlgorithmCrc32 // the SDK's default "when supported"
			}
			wantFraming := "|"
			if https {
				wantFraming = "aws-chunked|x-amz-checksum-" + strings.ToLower(string(sent))
			}
			if len(framing) != 1 || framing[0] != wantFraming {
				t.Fatalf("https=%v %s: request framing %v, want %q", https, sent, framing, wantFraming)
			}
			putSum := returnedChecksum(sent, out.ChecksumCRC32, out.ChecksumCRC32C, out.ChecksumCRC64NVME, out.ChecksumSHA1, out.ChecksumSHA256, out.ChecksumSHA512)
			if putSum == "" || out.ChecksumType != s3types.ChecksumTypeFullObject {
				t.Fatalf("https=%v %s: PutObject answered no checksum: %+v", https, sent, out)
			}
			logs.take()
			got, g, err := f.get(t.Context(), key, "")
			if err != nil || got != body {
				t.Fatalf("https=%v %s: GET: %v", https, sent, err)
			}
			if sum := returnedChecksum(sent, g.ChecksumCRC32, g.ChecksumCRC32C, g.ChecksumCRC64NVME, g.ChecksumSHA1, g.ChecksumSHA256, g.ChecksumSHA512); sum != putSum {
				t.Fatalf("https=%v %s: GET checksum %q, PUT answered %q", https, sent, sum, putSum)
			}
			if l := logs.take(); len(l) != 0 {
				t.Fatalf("https=%v %s: SDK logged %v", https, sent, l)
			}
		}
	}
}

func TestChecksumMismatchStoresNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, mems3.Options{}, true)
	const body, other = "the bytes sent", "other bytes"
	b64 := base64.StdEncoding.EncodeToString
	sha256Of := func(s string) string { h := sha256.Sum256([]byte(s)); return b64(h[:]) }
	sha1Of := func(s string) string { h := sha1.Sum([]byte(s)); return b64(h[:]) }
	md5Of := func(s string) string { h := md5.Sum([]byte(s)); return b64(h[:]) }
	crcOf := func(tab *crc32.Table, s string) string {
		c := crc32.Checksum([]byte(s), tab)
		return b64([]byte{byte(c >> 24), byte(c >> 16), byte(c >> 8), byte(c)})
	}
	cases := []struct {
		name string
		mod  func(*s3.PutObjectInput)
		code string
	}{
		{"SHA256", func(in *s3.PutObjectInput) { in.ChecksumSHA256 = aws.String(sha256Of(other)) }, "BadDigest"},
		{"SHA1", func(in *s3.PutObjectInput) { in.ChecksumSHA1 = aws.String(sha1Of(other)) }, "BadDigest"},
		{"CRC32", func(in *s3.PutObjectInput) { in.ChecksumCRC32 = aws.String(crcOf(crc32.IEEETable, other)) }, "BadDigest"},
		{"CRC32C", func(in *s3.PutObjectInput) {
			in.ChecksumCRC32C = aws.String(crcOf(crc32.MakeTable(crc32.Castagnoli), other))
		}, "BadDigest"},
		{"CRC64NVME", func(in *s3.PutObjectInput) { in.ChecksumCRC64NVME = aws.String("AAAAAAAAAAA=") }, "BadDigest"},
		{"Content-MD5", func(in *s3.PutObjectInput) { in.ContentMD5 = aws.String(md5Of(other)) }, "BadDigest"},
		{"SHA256 of the wrong length", func(in *s3.PutObjectInput) { in.ChecksumSHA256 = aws.String(b64([]byte("short"))) }, "InvalidRequest"},
	}
	for _, c := range cases {
		_, err := f.tryPut(t.Context(), "k", body, c.mod)
		wantError(t, c.name, err, c.code, 400)
	}
	if _, err := f.c.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("k")}); apiCode(err) != "NotFound" {
		t.Fatalf("HEAD after refused writes: %v, want NotFound", err)
	}
	vs, err := f.c.ListObjectVersions(t.Context(), &s3.ListObjectVersionsInput{Bucket: aws.String(f.bucket)})
	if err != nil || len(vs.Versions) != 0 {
		t.Fatalf("versions after refused writes: %v %+v", err, vs.Versions)
	}
	// The right values together are accepted, and HEAD gives the SHA256 back.
	f.put(t, "k", body, func(in *s3.PutObjectInput) {
		in.ContentMD5 = aws.String(md5Of(body))
		in.ChecksumAlgorithm = s3types.ChecksumAlgorithmSha256
		in.ChecksumSHA256 = aws.String(sha256Of(body))
	})
	h, err := f.c.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String(f.bucket), Key: aws.String("k"), ChecksumMode: s3types.ChecksumModeEnabled})
	if err != nil || aws.ToString(h.ChecksumSHA256) != sha256Of(body) {
		t.Fatalf("HEAD: %v %+v", err, h)
	}
}

// A byte flipped in flight is caught: over http by the signed payload
// hash, over https by the aws-chunked trailer checksum.
func TestCorruptionInFlight(t *testing.T) {
	t.Parallel()
	srv := mems3.New(mems3.Options{})
	corrupt := func(r *http.Request) {
		if r.Method != http.MethodPut || r.URL.Query().Has("versioning") {
			return
		}
		raw, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(bytes.Replace(raw, []byte("precious"), []byte("precioux"), 1)))
	}
	setup := newClient(srv, nil, clientConfig{})
	if _, err := setup.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String("corrupt")}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		https bool
		code  string
	}{{false, "XAmzContentSHA256Mismatch"}, {true, "BadDigest"}} {
		cl := newClient(srv, nil, clientConfig{https: c.https, mangle: corrupt})
		_, err := cl.PutObject(t.Context(), &s3.PutObjectInput{Bucket: aws.String("corrupt"), Key: aws.String("k"), Body: strings.NewReader("precious bytes")})
		wantError(t, "corrupted PutObject", err, c.code, 400)
		if _, err := setup.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String("corrupt"), Key: aws.String("k")}); apiCode(err) != "NotFound" {
			t.Fatalf("HEAD after a corrupted write: %v, want NotFound", err)
		}
	}
}

// reframeSigned rewrites the SDK's single-chunk unsigned aws-chunked body
// into SigV4 streaming framing: several chunks with chunk signatures and a
// trailer signature (which the server strips, not checks).
func reframeSigned(t *testing.T, corrupt bool) func(*http.Request) {
	return func(r *http.Request) {
		if r.Method != http.MethodPut || !strings.Contains(r.Header.Get("Content-Encoding"), "aws-chunked") {
			return
		}
		raw, _ := io.ReadAll(r.Body)
		sizeLine, rest, _ := bytes.Cut(raw, []byte("\r\n"))
		var size int
		if _, err := fmt.Sscanf(string(sizeLine), "%x", &size); err != nil {
			t.Errorf("SDK chunk header %q: %v", sizeLine, err)
			return
		}
		data, rest := rest[:size], rest[size+2:]
		trailers := bytes.TrimPrefix(rest, []byte("0\r\n"))
		trailers = bytes.TrimSuffix(trailers, []byte("\r\n"))
		if corrupt {
			data = bytes.Replace(data, []byte("signed"), []byte("signeD"), 1)
		}
		sig := strings.Repeat("0", 64)
		var b bytes.Buffer
		for len(data) > 0 {
			n := min(7, len(data))
			fmt.Fprintf(&b, "%x;chunk-signature=%s\r\n%s\r\n", n, sig, data[:n])
			data = data[n:]
		}
		fmt.Fprintf(&b, "0;chunk-signature=%s\r\n%sx-amz-trailer-signature:%s\r\n\r\n", sig, trailers, sig)
		r.Header.Set("X-Amz-Content-Sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER")
		r.Body = io.NopCloser(&b)
		r.ContentLength = int64(b.Len())
	}
}

func TestSignedChunkedFraming(t *testing.T) {
	t.Parallel()
	srv := mems3.New(mems3.Options{})
	setup := newClient(srv, nil, clientConfig{})
	if _, err := setup.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String("signed")}); err != nil {
		t.Fatal(err)
	}
	const body = "a signed, chunked payload of some length"
	for _, corrupt := range []bool{false, true} {
		c := newClient(srv, nil, clientConfig{https: true, mangle: reframeSigned(t, corrupt)})
		f := &fixture{srv: srv, c: c, bucket: "signed"}
		_, err := f.tryPut(t.Context(), "k", body, func(in *s3.PutObjectInput) { in.ChecksumAlgorithm = s3types.ChecksumAlgorithmSha256 })
		if corrupt {
			wantError(t, "corrupted signed chunks", err, "BadDigest", 400)
			continue
		}
		if err != nil {
			t.Fatalf("PutObject in signed chunks: %v", err)
		}
		if got := f.mustGet(t, "k", ""); got != body {
			t.Fatalf("GET after signed chunks: %q", got)
		}
	}
}

package blockstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/sluice-dev/sluice/shared/s3errors"
)

// StreamUpload writes one object from a stream of unknown length, holding
// at most MultipartThreshold bytes plus the part being filled and the
// parts in flight (Parallelism, or the slots of a shared Buffers) in
// memory, and nothing on disk. It follows Upload's rules, so an attempt
// that writes the same bytes writes the same object: under
// MultipartThreshold one PUT, else parts of PartSize; If-None-Match on the
// PUT and on CompleteMultipartUpload; on 412 an object of the same size
// and checksum is adopted, any other is ErrNotDeterministic.
//
// It is not safe for concurrent use. Close or Abort must be called.
type StreamUpload struct {
	ctx    context.Context
	api    S3API
	bucket string
	key    string
	opts   UploadOptions

	held [][]byte // full parts held before the upload is known to be multipart
	cur  []byte   // the part being filled
	size int64

	// multipart, once started
	uploadID *string
	next     int // parts handed to an uploader
	wg       sync.WaitGroup
	mu       sync.Mutex
	parts    []types.CompletedPart // by part index
	digests  [][]byte              // each part's SHA-256
	partErr  error
	holding  atomic.Int64 // bytes held, counted in opts.Buffers too

	err    error // sticky
	done   bool
	result Uploaded
}

// NewStreamUpload starts writing bucket/key; relPath is what Uploaded
// reports as RelPath.
func NewStreamUpload(ctx context.Context, api S3API, bucket, key, relPath string, opts UploadOptions) *StreamUpload {
	opts = opts.withDefaults()
	if opts.Buffers == nil {
		opts.Buffers = NewBuffers(opts.Parallelism)
	}
	return &StreamUpload{ctx: ctx, api: api, bucket: bucket, key: key, opts: opts,
		result: Uploaded{RelPath: relPath, Key: key}}
}

// account adds n to the bytes the upload holds (n < 0: gives them up):
// each part's buffer from the moment it is taken until it is sent, or
// until the single PUT it belongs to is. It takes no lock: parts finish
// on their own goroutines.
func (u *StreamUpload) account(n int64) {
	u.holding.Add(n)
	u.opts.Buffers.add(n)
}

// releaseAll gives up whatever the upload still holds; called once no
// part is in flight.
func (u *StreamUpload) releaseAll() {
	u.account(-u.holding.Load())
}

// Write buffers p and sends every full part once the object is known to
// need a multipart upload.
func (u *StreamUpload) Write(p []byte) (int, error) {
	if u.err != nil {
		return 0, u.err
	}
	if u.done {
		return 0, errors.New("write after close")
	}
	written := 0
	for len(p) > 0 {
		if u.cur == nil {
			u.cur = u.opts.Buffers.part(u.opts.PartSize)
			u.account(int64(cap(u.cur)))
		}
		n := min(len(p), cap(u.cur)-len(u.cur))
		u.cur = append(u.cur, p[:n]...)
		p, written, u.size = p[n:], written+n, u.size+int64(n)
		if len(u.cur) < cap(u.cur) {
			continue
		}
		full := u.cur
		u.cur = nil
		if err := u.partFull(full); err != nil {
			return written, u.fail(err)
		}
	}
	return written, nil
}

// partFull takes a full part: held while the object may still be a single
// PUT, sent once it is bigger than the threshold.
func (u *StreamUpload) partFull(part []byte) error {
	if u.uploadID == nil {
		u.held = append(u.held, part)
		// Upload's rule is size >= threshold; a stream that has reached
		// the threshold and goes on is past it.
		if u.size <= u.opts.MultipartThreshold {
			return nil
		}
		if err := u.startMultipart(); err != nil {
			return err
		}
		return nil
	}
	return u.send(part)
}

func (u *StreamUpload) startMultipart() error {
	created, err := u.api.CreateMultipartUpload(u.ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(u.bucket), Key: aws.String(u.key),
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256})
	if err != nil {
		return fmt.Errorf("create multipart upload: %w", err)
	}
	u.uploadID = created.UploadId
	held := u.held
	u.held = nil
	for _, part := range held {
		if err := u.send(part); err != nil {
			return err
		}
	}
	return nil
}

// send uploads one part in the background, at most Parallelism at once.
func (u *StreamUpload) send(part []byte) error {
	i := u.next
	u.next++
	sem := u.opts.Buffers.slots
	select {
	case sem <- struct{}{}:
	case <-u.ctx.Done():
		return u.ctx.Err()
	}
	u.mu.Lock()
	err := u.partErr
	u.parts = append(u.parts, types.CompletedPart{})
	u.digests = append(u.digests, nil)
	u.mu.Unlock()
	if err != nil {
		<-sem
		return err
	}
	u.wg.Add(1)
	go func() {
		defer func() { u.account(-int64(cap(part))); <-sem; u.wg.Done() }()
		h := sha256.Sum256(part)
		sum := h[:]
		num := int32(i + 1)
		out, err := u.api.UploadPart(u.ctx, &s3.UploadPartInput{
			Bucket:            aws.String(u.bucket),
			Key:               aws.String(u.key),
			UploadId:          u.uploadID,
			PartNumber:        aws.Int32(num),
			Body:              bytes.NewReader(part),
			ContentLength:     aws.Int64(int64(len(part))),
			ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
			ChecksumSHA256:    aws.String(base64.StdEncoding.EncodeToString(sum)),
		}, signedWith(sum))
		u.mu.Lock()
		defer u.mu.Unlock()
		if err != nil {
			if u.partErr == nil {
				u.partErr = fmt.Errorf("upload part %d: %w", num, err)
			}
			return
		}
		u.opts.Buffers.giveBack(part)
		u.digests[i] = sum
		u.parts[i] = types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num), ChecksumSHA256: aws.String(base64.StdEncoding.EncodeToString(sum))}
	}()
	return nil
}

// Close finishes the object: one PUT, or the last part and
// CompleteMultipartUpload. Uploaded then describes it.
func (u *StreamUpload) Close() error {
	if u.err != nil {
		return u.err
	}
	if u.done {
		return nil
	}
	u.done = true
	var err error
	if u.uploadID == nil && u.size < u.opts.MultipartThreshold {
		err = u.putSingle()
	} else {
		err = u.complete()
	}
	if err != nil {
		return u.fail(fmt.Errorf("upload s3://%s/%s: %w", u.bucket, u.key, err))
	}
	return nil
}

func (u *StreamUpload) putSingle() error {
	parts := append(u.held, u.cur)
	u.held, u.cur = nil, nil
	defer u.releaseAll()
	// The parts are sent as they are, one after another: copying them
	// into one body cost a segment's bytes of fresh memory and a pass
	// over them (a fifth of a small job's CPU, in page faults and memmove).
	body := partsAt(parts)
	sums, err := partChecksums(body, u.size, false, 0)
	if err != nil {
		return err
	}
	u.result.Size, u.result.Checksum = u.size, checksumOf(sums, false)
	w, adopted, err := putIfAbsent(u.ctx, u.api, u.bucket, u.key, u.result.Size, u.result.Checksum, func() (written, error) {
		return putSingle(u.ctx, u.api, u.bucket, u.key, io.NewSectionReader(body, 0, u.size), u.size, sums[0])
	})
	if err != nil {
		return err
	}
	u.opts.Buffers.giveBack(parts...)
	u.result.VersionID, u.result.ETag, u.result.Adopted = w.versionID, w.etag, adopted
	return nil
}

// partsAt reads parts one after another as one body (io.ReaderAt).
type partsAt [][]byte

func (p partsAt) ReadAt(b []byte, off int64) (int, error) {
	n := 0
	for _, part := range p {
		if off >= int64(len(part)) {
			off -= int64(len(part))
			continue
		}
		n += copy(b[n:], part[off:])
		off = 0
		if n == len(b) {
			return n, nil
		}
	}
	return n, io.EOF
}

func (u *StreamUpload) complete() error {
	if u.uploadID == nil {
		if err := u.startMultipart(); err != nil {
			return err
		}
	}
	if len(u.cur) > 0 {
		last := u.cur
		u.cur = nil
		if err := u.send(last); err != nil {
			return err
		}
	}
	u.wg.Wait()
	if u.partErr != nil {
		return u.partErr
	}
	u.result.Size, u.result.Checksum = u.size, checksumOf(u.digests, true)
	w, adopted, err := putIfAbsent(u.ctx, u.api, u.bucket, u.key, u.size, u.result.Checksum, func() (written, error) {
		out, err := u.api.CompleteMultipartUpload(u.ctx, &s3.CompleteMultipartUploadInput{
			Bucket:          aws.String(u.bucket),
			Key:             aws.String(u.key),
			UploadId:        u.uploadID,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: u.parts},
			IfNoneMatch:     aws.String("*"),
		})
		if err != nil {
			return written{}, err
		}
		u.uploadID = nil // completed: nothing to abort
		return writtenBy(out.VersionId, out.ETag), nil
	})
	if err != nil {
		return err
	}
	u.result.VersionID, u.result.ETag, u.result.Adopted = w.versionID, w.etag, adopted
	u.abortUpload() // an adopted object leaves our own upload open
	return nil
}

// fail makes err sticky and gives up the multipart upload, if any.
func (u *StreamUpload) fail(err error) error {
	if u.err == nil {
		u.err = err
	}
	u.wg.Wait()
	u.abortUpload()
	u.held, u.cur = nil, nil
	u.releaseAll()
	return u.err
}

func (u *StreamUpload) abortUpload() {
	if u.uploadID == nil {
		return
	}
	// Best effort, also when ctx is cancelled; a lifecycle rule cleans up
	// what this misses.
	actx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), 30*time.Second)
	defer cancel()
	_, _ = u.api.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: aws.String(u.bucket), Key: aws.String(u.key), UploadId: u.uploadID})
	u.uploadID = nil
}

// Abort gives the upload up: no part of it stays in S3.
func (u *StreamUpload) Abort() {
	if u.done && u.err == nil {
		return
	}
	u.done = true
	_ = u.fail(errors.New("upload aborted"))
}

// Uploaded describes the object once Close returned nil.
func (u *StreamUpload) Uploaded() Uploaded { return u.result }

// OpenRange returns object o's bytes from offset to its end, read by its
// VersionID, after checking that the stored object has o's Size (from
// Content-Range; SizeUnknown skips it). Errors wrap ErrNotFound or
// ErrSizeMismatch where they apply.
//
// The caller checks the bytes it keeps (a chunk stream checks each
// chunk's CRC32C), so the SDK does not check the object's checksum as
// well: a stream from offset 0 is the whole object, for which S3 returns
// it, and the SDK would hash every byte read again (SHA-256 for Sluice's
// own blocks), those the caller skips included.
func OpenRange(ctx context.Context, api S3API, bucket string, o Object, offset int64) (io.ReadCloser, error) {
	where := fmt.Sprintf("read s3://%s/%s (version %q) from %d", bucket, o.Key, o.VersionID, offset)
	in := &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(o.Key), Range: aws.String(fmt.Sprintf("bytes=%d-", offset))}
	if o.VersionID != "" {
		in.VersionId = aws.String(o.VersionID)
	}
	out, err := api.GetObject(ctx, in, func(o *s3.Options) {
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	if err != nil {
		if s3errors.IsNotFound(err) {
			return nil, fmt.Errorf("%s: %w: %w", where, ErrNotFound, err)
		}
		if s3errors.Classify(err) == s3errors.OutOfRange {
			return nil, fmt.Errorf("%s: past the object's end, recorded %d bytes: %w: %w", where, o.Size, ErrSizeMismatch, err)
		}
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	total := int64(-1)
	if cr := deref(out.ContentRange); cr != "" {
		if i := strings.LastIndexByte(cr, '/'); i >= 0 {
			if n, err := strconv.ParseInt(cr[i+1:], 10, 64); err == nil {
				total = n
			}
		}
	} else if out.ContentLength != nil && offset == 0 {
		total = *out.ContentLength
	}
	if o.Size != SizeUnknown && total >= 0 && total != o.Size {
		_ = out.Body.Close()
		return nil, fmt.Errorf("%s: %d bytes, recorded %d: %w", where, total, o.Size, ErrSizeMismatch)
	}
	return out.Body, nil
}

// Buffers is what the streamed uploads of one job share: slots for the
// parts in flight, so that a job writing many outputs at once sends as
// many parts as one; the count of the buffers they hold (each part from
// the moment it is taken, while it fills, waits for a multipart upload to
// start or is in flight), with its peak, so a job can report the memory
// its outputs took; and the part buffers S3 has taken, to be filled again.
//
// A part is given back only once the PUT that sent it has succeeded.
// Any request that may still be reading it then (an earlier attempt,
// answered before it finished sending) has been answered already, so
// filling the part again cannot change a stored object; after a PUT that
// failed the part is dropped. Filling a given-back part costs no fresh
// memory: a new 16 MiB buffer costs its page faults as it is first
// written, more than copying the chunks into it.
type Buffers struct {
	slots      chan struct{}
	held, peak atomic.Int64

	mu   sync.Mutex
	free [][]byte // given back, empty, kept as long as the job
}

// NewBuffers returns Buffers with slots parts in flight (at least 1).
func NewBuffers(slots int) *Buffers {
	return &Buffers{slots: make(chan struct{}, max(slots, 1))}
}

func (b *Buffers) add(n int64) {
	held := b.held.Add(n)
	for peak := b.peak.Load(); held > peak && !b.peak.CompareAndSwap(peak, held); peak = b.peak.Load() {
	}
}

// part returns an empty buffer of capacity size: one given back if there
// is one, else a new one. A new one is made only when every one made so
// far is in use, so the free list adds nothing to the peak: the job's
// part buffers never add up to more than the most it held at once.
func (b *Buffers) part(size int64) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := len(b.free) - 1; i >= 0; i-- {
		if p := b.free[i]; int64(cap(p)) == size {
			b.free = slices.Delete(b.free, i, i+1)
			return p[:0]
		}
	}
	return make([]byte, 0, size)
}

// giveBack keeps parts no one reads any more for part to hand out again.
func (b *Buffers) giveBack(parts ...[]byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range parts {
		if cap(p) > 0 {
			b.free = append(b.free, p[:0])
		}
	}
}

// Held is the bytes the uploads hold now.
func (b *Buffers) Held() int64 { return b.held.Load() }

// Peak is the most bytes the uploads held at once.
func (b *Buffers) Peak() int64 { return b.peak.Load() }

package mems3

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/xml"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

const maxKeyLength = 1024

func xmlTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func httpTime(t time.Time) string { return t.UTC().Format(http.TimeFormat) }

func quotedMD5(data []byte) string {
	sum := md5.Sum(data)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

func checkKey(key string) *s3Error {
	if len(key) > maxKeyLength {
		return newError(http.StatusBadRequest, "KeyTooLongError", "Your key is too long").
			with("MaxSizeAllowed", strconv.Itoa(maxKeyLength)).with("Size", strconv.Itoa(len(key)))
	}
	return nil
}

// checkWriteConditions evaluates If-None-Match and If-Match of a write
// (PutObject, CompleteMultipartUpload, CopyObject) against the key's
// current version. It is called under s.mu, in the same critical section
// as the write, so the condition and the write are one atomic step. A
// delete marker as current version counts as no object, as in S3.
func checkWriteConditions(h http.Header, b *bucket, key string) *s3Error {
	live := b.live(key)
	if inm := h.Get("If-None-Match"); inm != "" {
		if strings.TrimSpace(inm) != "*" {
			return errNotImplemented("If-None-Match other than * on a write")
		}
		if live != nil {
			return errPreconditionFailed("If-None-Match")
		}
	}
	if im := h.Get("If-Match"); im != "" {
		if live == nil {
			return errNoSuchKey(key)
		}
		if !etagMatches(im, live.etag) {
			return errPreconditionFailed("If-Match")
		}
	}
	return nil
}

// etagMatches matches an If-Match value (one ETag, "*", or a list) with an
// ETag, quoted or not.
func etagMatches(header, etag string) bool {
	want := strings.Trim(etag, `"`)
	for _, v := range strings.Split(header, ",") {
		v = strings.TrimPrefix(strings.TrimSpace(v), "W/")
		if v == "*" || strings.Trim(v, `"`) == want {
			return true
		}
	}
	return false
}

func (s *Server) putObject(rq *request) (*response, *s3Error) {
	if err := checkKey(rq.key); err != nil {
		return nil, err
	}
	attrs, err := attrsFrom(rq.r.Header)
	if err != nil {
		return nil, err
	}
	data, trailers, err := readPayload(rq.r)
	if err != nil {
		return nil, err
	}
	ck, err := payloadChecksum(rq.r.Header, trailers, data, "CRC64NVME")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	if err := checkWriteConditions(rq.r.Header, b, rq.key); err != nil {
		return nil, err
	}
	now := s.clock()
	v := newVersion(data, quotedMD5(data), ck, attrs, now)
	s.nextVersion(b, v)
	b.store(rq.key, v)
	s.recordEvent(rq, b, createdEvent(eventPut, rq.key, v, now))
	resp := newResponse()
	resp.header.Set("ETag", v.etag)
	setEncryptionHeader(resp.header)
	setVersionHeader(resp.header, v)
	setChecksumHeaders(resp.header, v.checksum)
	return resp, nil
}

// setEncryptionHeader says what S3 says of every object since default
// encryption: it is stored with SSE-S3.
func setEncryptionHeader(h http.Header) { h.Set("x-amz-server-side-encryption", "AES256") }

// setVersionHeader sets x-amz-version-id for versions that have a real id
// (objects of never-versioned and suspended buckets have "null", which S3
// leaves out of write responses).
func setVersionHeader(h http.Header, v *version) {
	if v.id != nullVersion {
		h.Set("x-amz-version-id", v.id)
	}
}

// getObject serves GetObject and HeadObject (which has no body).
func (s *Server) getObject(rq *request) (*response, *s3Error) {
	vid, hasVID := rq.query.Get("versionId"), rq.query.Has("versionId")
	if hasVID && !wellFormedVersionID(vid) {
		return nil, errInvalidVersionID(vid)
	}
	s.mu.Lock()
	b, err := s.bucket(rq.bucket)
	var v *version
	if err == nil {
		if hasVID {
			v = b.find(rq.key, vid)
		} else {
			v = b.current(rq.key)
		}
	}
	var versioned bool
	if b != nil {
		versioned = b.versioned()
	}
	s.mu.Unlock()
	switch {
	case err != nil:
		return nil, err
	case v == nil && hasVID:
		return nil, errNoSuchVersion(rq.key, vid)
	case v == nil:
		return nil, errNoSuchKey(rq.key)
	case v.deleteMarker && hasVID:
		return nil, newError(http.StatusMethodNotAllowed, "MethodNotAllowed",
			"The specified method is not allowed against this resource.").
			with("Method", rq.r.Method).with("ResourceType", "DeleteMarker").
			withHeader("x-amz-delete-marker", "true").withHeader("x-amz-version-id", v.id).
			withHeader("Last-Modified", httpTime(v.modified)).withHeader("Allow", "DELETE")
	case v.deleteMarker:
		return nil, errNoSuchKey(rq.key).withHeader("x-amz-delete-marker", "true").withHeader("x-amz-version-id", v.id)
	}
	if rq.query.Has("partNumber") {
		return nil, errNotImplemented("GetObject by partNumber")
	}
	size := int64(len(v.data))
	first, last, ranged, rerr := parseRange(rq.r.Header.Get("Range"), size)
	if rerr != nil {
		return nil, rerr
	}
	resp := newResponse()
	h := resp.header
	h.Set("ETag", v.etag)
	h.Set("Last-Modified", httpTime(v.modified))
	h.Set("Accept-Ranges", "bytes")
	setEncryptionHeader(h)
	ct := v.contentType
	if ct == "" {
		ct = "binary/octet-stream"
	}
	h.Set("Content-Type", ct)
	for name, value := range v.headers {
		h.Set(name, value)
	}
	for name, value := range v.meta {
		h["X-Amz-Meta-"+name] = []string{value}
	}
	if versioned || v.id != nullVersion {
		h.Set("x-amz-version-id", v.id)
	}
	body := v.data
	if ranged {
		resp.status = http.StatusPartialContent
		body = v.data[first : last+1]
		h.Set("Content-Range", "bytes "+strconv.FormatInt(first, 10)+"-"+strconv.FormatInt(last, 10)+"/"+strconv.FormatInt(size, 10))
	}
	// S3 returns the object's checksum only when asked, and for a range
	// only when the range is the whole object: a full-object checksum
	// describes no other slice, and the SDK validates what it is given.
	if strings.EqualFold(rq.r.Header.Get("X-Amz-Checksum-Mode"), "ENABLED") && int64(len(body)) == size {
		setChecksumHeaders(h, v.checksum)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if rq.r.Method != http.MethodHead {
		resp.body = body
	}
	return resp, nil
}

// parseRange interprets a Range header for an object of size bytes. A
// header S3 would ignore (not bytes=, several ranges, malformed) gives the
// whole object; a range that starts past the end is InvalidRange.
func parseRange(header string, size int64) (first, last int64, ranged bool, err *s3Error) {
	spec, ok := strings.CutPrefix(strings.TrimSpace(header), "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, 0, false, nil
	}
	a, b, ok := strings.Cut(strings.TrimSpace(spec), "-")
	if !ok {
		return 0, 0, false, nil
	}
	invalid := newError(http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "The requested range is not satisfiable").
		with("RangeRequested", header).with("ActualObjectSize", strconv.FormatInt(size, 10)).
		withHeader("Content-Range", "bytes */"+strconv.FormatInt(size, 10))
	switch {
	case a == "":
		n, perr := strconv.ParseInt(b, 10, 64)
		if perr != nil || n < 0 {
			return 0, 0, false, nil
		}
		if n == 0 || size == 0 {
			return 0, 0, false, invalid
		}
		first = max(size-n, 0)
		return first, size - 1, true, nil
	default:
		f, perr := strconv.ParseInt(a, 10, 64)
		if perr != nil || f < 0 {
			return 0, 0, false, nil
		}
		l := size - 1
		if b != "" {
			if l, perr = strconv.ParseInt(b, 10, 64); perr != nil || l < f {
				return 0, 0, false, nil
			}
		}
		if f >= size {
			return 0, 0, false, invalid
		}
		return f, min(l, size-1), true, nil
	}
}

func (s *Server) deleteObject(rq *request) (*response, *s3Error) {
	vid, hasVID := rq.query.Get("versionId"), rq.query.Has("versionId")
	if hasVID && !wellFormedVersionID(vid) {
		return nil, errInvalidVersionID(vid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	if err := checkDeleteCondition(rq.r.Header.Get("If-Match"), b, rq.key); err != nil {
		return nil, err
	}
	res := s.deleteOne(rq, b, rq.key, vid, hasVID)
	resp := newResponse()
	resp.status = http.StatusNoContent
	if res.deleteMarker {
		resp.header.Set("x-amz-delete-marker", "true")
	}
	if res.versionID != "" {
		resp.header.Set("x-amz-version-id", res.versionID)
	}
	return resp, nil
}

// checkDeleteCondition evaluates a conditional delete's If-Match (an ETag
// or "*") against the key's current version, under s.mu with the delete.
func checkDeleteCondition(ifMatch string, b *bucket, key string) *s3Error {
	if ifMatch == "" {
		return nil
	}
	live := b.live(key)
	if live == nil {
		return errNoSuchKey(key)
	}
	if !etagMatches(ifMatch, live.etag) {
		return errPreconditionFailed("If-Match")
	}
	return nil
}

// deleteResult is what one delete did, as DeleteObject's headers and
// DeleteObjects' <Deleted> report it.
type deleteResult struct {
	versionID    string // the version removed, or the marker created ("" if neither has an id to report)
	deleteMarker bool   // a marker was created, or the version removed was one
	created      bool   // a marker was created
}

// deleteOne applies one delete under s.mu: with a version id it removes
// exactly that version or marker (succeeding when there is none, as S3
// does); without, it removes the null version and, in a versioned bucket,
// adds a delete marker.
func (s *Server) deleteOne(rq *request, b *bucket, key, vid string, hasVID bool) deleteResult {
	now := s.clock()
	if hasVID {
		v := b.removeVersion(key, vid)
		if v == nil {
			return deleteResult{versionID: vid}
		}
		s.recordEvent(rq, b, removedEvent(eventDelete, key, v, now))
		return deleteResult{versionID: vid, deleteMarker: v.deleteMarker}
	}
	if !b.versioned() {
		if v := b.removeVersion(key, nullVersion); v != nil {
			s.recordEvent(rq, b, removedEvent(eventDelete, key, v, now))
		}
		return deleteResult{}
	}
	marker := &version{deleteMarker: true, modified: storedTime(now)}
	s.nextVersion(b, marker)
	b.store(key, marker)
	s.recordEvent(rq, b, removedEvent(eventDeleteMarkerCreated, key, marker, now))
	return deleteResult{versionID: marker.id, deleteMarker: true, created: true}
}

type copyObjectOut struct {
	XMLName      xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ CopyObjectResult"`
	ETag         string   `xml:"ETag"`
	LastModified string   `xml:"LastModified"`
	checksumFields
}

// checksumFields are the Checksum<alg> and ChecksumType elements of a
// response document.
type checksumFields struct {
	ChecksumCRC32     string `xml:"ChecksumCRC32,omitempty"`
	ChecksumCRC32C    string `xml:"ChecksumCRC32C,omitempty"`
	ChecksumCRC64NVME string `xml:"ChecksumCRC64NVME,omitempty"`
	ChecksumSHA1      string `xml:"ChecksumSHA1,omitempty"`
	ChecksumSHA256    string `xml:"ChecksumSHA256,omitempty"`
	ChecksumSHA512    string `xml:"ChecksumSHA512,omitempty"`
	ChecksumMD5       string `xml:"ChecksumMD5,omitempty"`
	ChecksumType      string `xml:"ChecksumType,omitempty"`
}

func checksumXML(c checksum) checksumFields {
	var f checksumFields
	switch c.alg {
	case "CRC32":
		f.ChecksumCRC32 = c.value
	case "CRC32C":
		f.ChecksumCRC32C = c.value
	case "CRC64NVME":
		f.ChecksumCRC64NVME = c.value
	case "SHA1":
		f.ChecksumSHA1 = c.value
	case "SHA256":
		f.ChecksumSHA256 = c.value
	case "SHA512":
		f.ChecksumSHA512 = c.value
	case "MD5":
		f.ChecksumMD5 = c.value
	}
	if c.alg != "" {
		f.ChecksumType = c.typ
	}
	return f
}

// copyObject copies a version, in one bucket or across buckets, keeping
// its metadata (x-amz-metadata-directive COPY) or taking the request's
// (REPLACE). The copy is a new single-part object: its ETag is the MD5 of
// its bytes and its checksum a FULL_OBJECT one.
func (s *Server) copyObject(rq *request) (*response, *s3Error) {
	if err := checkKey(rq.key); err != nil {
		return nil, err
	}
	src := rq.r.Header.Get("X-Amz-Copy-Source")
	srcPath, srcQuery, _ := strings.Cut(src, "?")
	srcPath, perr := url.PathUnescape(strings.TrimPrefix(srcPath, "/"))
	srcBucket, srcKey, ok := strings.Cut(srcPath, "/")
	if perr != nil || !ok || srcKey == "" {
		return nil, errInvalidArgument("x-amz-copy-source", src, "Copy Source must mention the source bucket and key: sourcebucket/sourcekey")
	}
	q, _ := url.ParseQuery(srcQuery)
	srcVID, hasSrcVID := q.Get("versionId"), q.Has("versionId")
	if hasSrcVID && !wellFormedVersionID(srcVID) {
		return nil, errInvalidVersionID(srcVID)
	}
	replace := strings.EqualFold(rq.r.Header.Get("X-Amz-Metadata-Directive"), "REPLACE")
	attrs, err := attrsFrom(rq.r.Header)
	if err != nil {
		return nil, err
	}
	alg := strings.ToUpper(rq.r.Header.Get("X-Amz-Checksum-Algorithm"))
	if alg != "" && !knownAlgorithm(alg) {
		return nil, errInvalidRequest("Checksum algorithm " + alg + " is not supported.")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, err := s.bucket(srcBucket)
	if err != nil {
		return nil, err
	}
	var sv *version
	if hasSrcVID {
		sv = sb.find(srcKey, srcVID)
		if sv == nil {
			return nil, errNoSuchVersion(srcKey, srcVID)
		}
		if sv.deleteMarker {
			return nil, errInvalidRequest("The source of a copy request may not specifically refer to a delete marker by version id.")
		}
	} else if sv = sb.live(srcKey); sv == nil {
		return nil, errNoSuchKey(srcKey)
	}
	if srcBucket == rq.bucket && srcKey == rq.key && !hasSrcVID && !replace && alg == "" {
		return nil, errInvalidRequest("This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes.")
	}
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	if err := checkWriteConditions(rq.r.Header, b, rq.key); err != nil {
		return nil, err
	}
	if !replace {
		attrs = sv.attrs()
	}
	ck := sv.checksum
	if alg == "" {
		alg = ck.alg
	}
	if alg == "" {
		alg = "CRC64NVME"
	}
	if ck.alg != alg || ck.typ != fullObject {
		ck = fullChecksum(alg, sv.data)
	}
	now := s.clock()
	v := newVersion(sv.data, quotedMD5(sv.data), ck, attrs, now)
	s.nextVersion(b, v)
	b.store(rq.key, v)
	s.recordEvent(rq, b, createdEvent(eventCopy, rq.key, v, now))
	resp := xmlResponse(copyObjectOut{ETag: v.etag, LastModified: xmlTime(v.modified), checksumFields: checksumXML(v.checksum)})
	setVersionHeader(resp.header, v)
	setEncryptionHeader(resp.header)
	if sv.id != nullVersion {
		resp.header.Set("x-amz-copy-source-version-id", sv.id)
	}
	return resp, nil
}

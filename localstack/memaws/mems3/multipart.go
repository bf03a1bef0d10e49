package mems3

import (
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

const maxPartNumber = 10000

// upload is an in-progress multipart upload.
type upload struct {
	id        string
	key       string
	seq       uint64
	initiated time.Time
	alg       string // checksum algorithm named at creation, or ""
	typ       string // its checksum type (COMPOSITE or FULL_OBJECT), or ""
	attrs     objectAttrs
	parts     map[int]*part
}

// part is an uploaded part; like a version it never changes once stored.
type part struct {
	number   int
	data     []byte
	md5      [md5.Size]byte
	dataHash [sha256.Size]byte
	etag     string
	checksum checksum
	modified time.Time
}

func (s *Server) findUpload(b *bucket, key, id string) (*upload, *s3Error) {
	u := b.uploads[id]
	if u == nil || u.key != key {
		return nil, errNoSuchUpload(id)
	}
	return u, nil
}

type initiateOut struct {
	XMLName  xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ InitiateMultipartUploadResult"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	UploadID string   `xml:"UploadId"`
}

func (s *Server) createMultipartUpload(rq *request) (*response, *s3Error) {
	if err := checkKey(rq.key); err != nil {
		return nil, err
	}
	attrs, err := attrsFrom(rq.r.Header)
	if err != nil {
		return nil, err
	}
	alg := strings.ToUpper(rq.r.Header.Get("X-Amz-Checksum-Algorithm"))
	typ := strings.ToUpper(rq.r.Header.Get("X-Amz-Checksum-Type"))
	switch {
	case alg == "" && typ != "":
		return nil, errInvalidRequest("The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header.")
	case alg != "" && !knownAlgorithm(alg):
		return nil, errInvalidRequest("Checksum algorithm " + alg + " is not supported.")
	case typ != "" && typ != fullObject && typ != composite:
		return nil, errInvalidRequest("Value for x-amz-checksum-type header is invalid.")
	case typ == fullObject && !crcAlgorithm(alg):
		return nil, errInvalidRequest(fmt.Sprintf("The FULL_OBJECT checksum type cannot be used with the %s checksum algorithm.", strings.ToLower(alg)))
	case typ == composite && alg == "CRC64NVME":
		return nil, errInvalidRequest("The COMPOSITE checksum type cannot be used with the crc64nvme checksum algorithm.")
	}
	if alg != "" && typ == "" {
		typ = composite
		if alg == "CRC64NVME" {
			typ = fullObject
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	s.uploadSeq++
	u := &upload{
		id:        uploadID(s.uploadSeq),
		key:       rq.key,
		seq:       s.uploadSeq,
		initiated: storedTime(s.clock()),
		alg:       alg,
		typ:       typ,
		attrs:     attrs,
		parts:     map[int]*part{},
	}
	b.uploads[u.id] = u
	resp := xmlResponse(initiateOut{Bucket: b.name, Key: rq.key, UploadID: u.id})
	setEncryptionHeader(resp.header)
	if alg != "" {
		resp.header.Set("x-amz-checksum-algorithm", alg)
		resp.header.Set("x-amz-checksum-type", typ)
	}
	return resp, nil
}

func parsePartNumber(v string) (int, *s3Error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxPartNumber {
		return 0, errInvalidArgument("partNumber", v, "Part number must be an integer between 1 and 10000, inclusive")
	}
	return n, nil
}

func (s *Server) uploadPart(rq *request) (*response, *s3Error) {
	number, err := parsePartNumber(rq.query.Get("partNumber"))
	if err != nil {
		return nil, err
	}
	id := rq.query.Get("uploadId")
	data, trailers, err := readPayload(rq.r)
	if err != nil {
		return nil, err
	}
	if err := verifyContentMD5(rq.r.Header, data); err != nil {
		return nil, err
	}
	alg, value, err := requestChecksum(rq.r.Header, trailers)
	if err != nil {
		return nil, err
	}
	if alg != "" {
		if err := verifyChecksum(alg, value, data); err != nil {
			return nil, err
		}
	}
	// The part's checksum is computed outside the lock when the client
	// sent none but the upload has an algorithm, which needs the upload.
	s.mu.Lock()
	uploadAlg, err := s.uploadAlgorithm(rq, id)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ck := checksum{alg: alg, value: value}
	switch {
	case uploadAlg != "" && alg != "" && alg != uploadAlg:
		return nil, errInvalidRequest(fmt.Sprintf("Checksum Type mismatch occurred, expected checksum Type: %s, actual checksum Type: %s",
			strings.ToLower(uploadAlg), strings.ToLower(alg)))
	case uploadAlg != "" && alg == "":
		ck = checksum{alg: uploadAlg, value: base64Digest(uploadAlg, data)}
	}
	sum := md5.Sum(data)
	p := &part{
		number:   number,
		data:     data,
		md5:      sum,
		dataHash: sha256.Sum256(data),
		etag:     `"` + hex.EncodeToString(sum[:]) + `"`,
		checksum: ck,
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	u, err := s.findUpload(b, rq.key, id)
	if err != nil {
		return nil, err
	}
	p.modified = storedTime(s.clock())
	u.parts[number] = p
	resp := newResponse()
	resp.header.Set("ETag", p.etag)
	setEncryptionHeader(resp.header)
	if ck.alg != "" {
		resp.header.Set(checksumHeader(ck.alg), ck.value)
	}
	return resp, nil
}

func (s *Server) uploadAlgorithm(rq *request, id string) (string, *s3Error) {
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return "", err
	}
	u, err := s.findUpload(b, rq.key, id)
	if err != nil {
		return "", err
	}
	return u.alg, nil
}

type completeIn struct {
	Parts []struct {
		PartNumber        int    `xml:"PartNumber"`
		ETag              string `xml:"ETag"`
		ChecksumCRC32     string `xml:"ChecksumCRC32"`
		ChecksumCRC32C    string `xml:"ChecksumCRC32C"`
		ChecksumCRC64NVME string `xml:"ChecksumCRC64NVME"`
		ChecksumSHA1      string `xml:"ChecksumSHA1"`
		ChecksumSHA256    string `xml:"ChecksumSHA256"`
		ChecksumSHA512    string `xml:"ChecksumSHA512"`
		ChecksumMD5       string `xml:"ChecksumMD5"`
	} `xml:"Part"`
}

type completeOut struct {
	XMLName  xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ CompleteMultipartUploadResult"`
	Location string   `xml:"Location"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	ETag     string   `xml:"ETag"`
	checksumFields
}

func (s *Server) completeMultipartUpload(rq *request) (*response, *s3Error) {
	id := rq.query.Get("uploadId")
	body, _, err := readPayload(rq.r)
	if err != nil {
		return nil, err
	}
	var in completeIn
	if xml.Unmarshal(body, &in) != nil || len(in.Parts) == 0 {
		return nil, errMalformedXML()
	}
	h := rq.r.Header
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	u, err := s.findUpload(b, rq.key, id)
	if err != nil {
		return nil, err
	}
	parts := make([]*part, 0, len(in.Parts))
	for i, p := range in.Parts {
		if i > 0 && p.PartNumber <= in.Parts[i-1].PartNumber {
			return nil, newError(http.StatusBadRequest, "InvalidPartOrder",
				"The list of parts was not in ascending order. The parts list must be specified in order by part number.").
				with("UploadId", id)
		}
		stored := u.parts[p.PartNumber]
		invalid := newError(http.StatusBadRequest, "InvalidPart",
			"One or more of the specified parts could not be found.  The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.").
			with("UploadId", id).with("PartNumber", strconv.Itoa(p.PartNumber)).with("ETag", p.ETag)
		if stored == nil || strings.Trim(p.ETag, `"`) != strings.Trim(stored.etag, `"`) {
			return nil, invalid
		}
		if u.alg != "" {
			sent := map[string]string{
				"CRC32": p.ChecksumCRC32, "CRC32C": p.ChecksumCRC32C, "CRC64NVME": p.ChecksumCRC64NVME,
				"SHA1": p.ChecksumSHA1, "SHA256": p.ChecksumSHA256, "SHA512": p.ChecksumSHA512, "MD5": p.ChecksumMD5,
			}[u.alg]
			if sent == "" && u.typ == composite {
				return nil, errInvalidRequest(fmt.Sprintf("The upload was created using a %s checksum. The complete request must include the checksum for each part. It was missing for part %d in the request.",
					strings.ToLower(u.alg), p.PartNumber))
			}
			if sent != "" && sent != stored.checksum.value {
				return nil, invalid
			}
		}
		parts = append(parts, stored)
	}
	var size int64
	for i, p := range parts {
		if i < len(parts)-1 && int64(len(p.data)) < s.minPartSize {
			return nil, newError(http.StatusBadRequest, "EntityTooSmall", "Your proposed upload is smaller than the minimum allowed object size.").
				with("ProposedSize", strconv.Itoa(len(p.data))).with("MinSizeAllowed", strconv.FormatInt(s.minPartSize, 10)).
				with("PartNumber", strconv.Itoa(p.number)).with("ETag", p.etag)
		}
		size += int64(len(p.data))
	}
	if v := h.Get("X-Amz-Mp-Object-Size"); v != "" {
		if n, perr := strconv.ParseInt(v, 10, 64); perr != nil || n != size {
			return nil, errInvalidRequest(fmt.Sprintf("The provided x-amz-mp-object-size %s does not match the object size %d.", v, size))
		}
	}
	if err := checkWriteConditions(h, b, rq.key); err != nil {
		return nil, err
	}
	data := make([]byte, 0, size)
	etagHash := md5.New()
	for _, p := range parts {
		data = append(data, p.data...)
		etagHash.Write(p.md5[:])
	}
	etag := fmt.Sprintf(`"%s-%d"`, hex.EncodeToString(etagHash.Sum(nil)), len(parts))
	ck, err := s.multipartChecksum(u, parts, data, h)
	if err != nil {
		return nil, err
	}
	now := s.clock()
	v := newVersion(data, etag, ck, u.attrs, now)
	s.nextVersion(b, v)
	b.store(rq.key, v)
	delete(b.uploads, id)
	s.recordEvent(rq, b, createdEvent(eventCompleteMultipart, rq.key, v, now))
	resp := xmlResponse(completeOut{
		Location:       location(rq),
		Bucket:         b.name,
		Key:            rq.key,
		ETag:           etag,
		checksumFields: checksumXML(ck),
	})
	setVersionHeader(resp.header, v)
	setEncryptionHeader(resp.header)
	return resp, nil
}

// multipartChecksum is the object checksum of a completed upload:
// COMPOSITE (digest of the part digests, "-N") or FULL_OBJECT (digest of
// the whole object) as the upload was created, or S3's default full-object
// CRC64NVME for an upload created without one. A full-object checksum the
// client sends with the completion is verified.
func (s *Server) multipartChecksum(u *upload, parts []*part, data []byte, h http.Header) (checksum, *s3Error) {
	var ck checksum
	switch {
	case u.alg == "":
		ck = fullChecksum("CRC64NVME", data)
	case u.typ == composite:
		values := make([]string, len(parts))
		for i, p := range parts {
			values[i] = p.checksum.value
		}
		c, err := compositeChecksum(u.alg, values)
		if err != nil {
			return checksum{}, errInvalidRequest(err.Error())
		}
		ck = c
	default:
		ck = fullChecksum(u.alg, data)
	}
	if t := h.Get("X-Amz-Checksum-Type"); t != "" && u.alg != "" && !strings.EqualFold(t, u.typ) {
		return checksum{}, errInvalidRequest(fmt.Sprintf("The upload was created using the %s checksum mode. The complete request must use the same checksum mode.", u.typ))
	}
	alg, value, err := requestChecksum(h, nil)
	if err != nil || alg == "" {
		return ck, err
	}
	if u.alg != "" && alg != u.alg {
		return checksum{}, errInvalidRequest(fmt.Sprintf("The upload was created using a %s checksum. The complete request must use the same checksum algorithm.", strings.ToLower(u.alg)))
	}
	want, _, _ := strings.Cut(value, "-")
	got, _, _ := strings.Cut(ck.value, "-")
	if u.alg == "" {
		got = base64Digest(alg, data)
	}
	if want != got {
		return checksum{}, errBadDigest(alg)
	}
	return ck, nil
}

func location(rq *request) string {
	scheme := "http"
	if rq.r.TLS != nil || rq.r.URL.Scheme == "https" {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: rq.r.Host, Path: "/" + rq.bucket + "/" + rq.key}
	return u.String()
}

func (s *Server) abortMultipartUpload(rq *request) (*response, *s3Error) {
	id := rq.query.Get("uploadId")
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	if _, err := s.findUpload(b, rq.key, id); err != nil {
		return nil, err
	}
	delete(b.uploads, id)
	resp := newResponse()
	resp.status = http.StatusNoContent
	return resp, nil
}

type listPartsOut struct {
	XMLName              xml.Name    `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListPartsResult"`
	Bucket               string      `xml:"Bucket"`
	Key                  string      `xml:"Key"`
	UploadID             string      `xml:"UploadId"`
	PartNumberMarker     int         `xml:"PartNumberMarker"`
	NextPartNumberMarker int         `xml:"NextPartNumberMarker,omitempty"`
	MaxParts             int         `xml:"MaxParts"`
	IsTruncated          bool        `xml:"IsTruncated"`
	Parts                []partEntry `xml:"Part"`
	Initiator            owner       `xml:"Initiator"`
	Owner                owner       `xml:"Owner"`
	StorageClass         string      `xml:"StorageClass"`
	ChecksumAlgorithm    string      `xml:"ChecksumAlgorithm,omitempty"`
	ChecksumType         string      `xml:"ChecksumType,omitempty"`
}

type partEntry struct {
	PartNumber   int    `xml:"PartNumber"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Size         int64  `xml:"Size"`
	checksumFields
}

func (s *Server) listParts(rq *request) (*response, *s3Error) {
	id := rq.query.Get("uploadId")
	maxParts := 1000
	if v := rq.query.Get("max-parts"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, errInvalidArgument("max-parts", v, "Argument max-parts must be an integer between 0 and 2147483647")
		}
		maxParts = min(n, 1000)
	}
	marker := 0
	if v := rq.query.Get("part-number-marker"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, errInvalidArgument("part-number-marker", v, "Argument part-number-marker must be an integer")
		}
		marker = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	u, err := s.findUpload(b, rq.key, id)
	if err != nil {
		return nil, err
	}
	numbers := make([]int, 0, len(u.parts))
	for n := range u.parts {
		if n > marker {
			numbers = append(numbers, n)
		}
	}
	sort.Ints(numbers)
	out := listPartsOut{
		Bucket: b.name, Key: u.key, UploadID: u.id, PartNumberMarker: marker, MaxParts: maxParts,
		Initiator: theOwner, Owner: theOwner, StorageClass: "STANDARD", ChecksumAlgorithm: u.alg, ChecksumType: u.typ,
	}
	if len(numbers) > maxParts {
		numbers, out.IsTruncated = numbers[:maxParts], true
	}
	for _, n := range numbers {
		p := u.parts[n]
		e := partEntry{PartNumber: n, LastModified: xmlTime(p.modified), ETag: p.etag, Size: int64(len(p.data))}
		if u.alg != "" {
			e.checksumFields = checksumXML(checksum{alg: p.checksum.alg, value: p.checksum.value})
		}
		out.Parts = append(out.Parts, e)
	}
	if out.IsTruncated {
		out.NextPartNumberMarker = numbers[len(numbers)-1]
	}
	return xmlResponse(out), nil
}

type listUploadsOut struct {
	XMLName            xml.Name       `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListMultipartUploadsResult"`
	Bucket             string         `xml:"Bucket"`
	KeyMarker          string         `xml:"KeyMarker"`
	UploadIDMarker     string         `xml:"UploadIdMarker"`
	NextKeyMarker      string         `xml:"NextKeyMarker,omitempty"`
	NextUploadIDMarker string         `xml:"NextUploadIdMarker,omitempty"`
	Prefix             string         `xml:"Prefix"`
	Delimiter          string         `xml:"Delimiter,omitempty"`
	MaxUploads         int            `xml:"MaxUploads"`
	IsTruncated        bool           `xml:"IsTruncated"`
	Uploads            []uploadEntry  `xml:"Upload"`
	CommonPrefixes     []commonPrefix `xml:"CommonPrefixes"`
}

type uploadEntry struct {
	Key               string `xml:"Key"`
	UploadID          string `xml:"UploadId"`
	Initiator         owner  `xml:"Initiator"`
	Owner             owner  `xml:"Owner"`
	StorageClass      string `xml:"StorageClass"`
	Initiated         string `xml:"Initiated"`
	ChecksumAlgorithm string `xml:"ChecksumAlgorithm,omitempty"`
	ChecksumType      string `xml:"ChecksumType,omitempty"`
}

// listMultipartUploads lists in-progress uploads by key, and by creation
// within a key, as S3 does.
func (s *Server) listMultipartUploads(rq *request) (*response, *s3Error) {
	prefix, delim := rq.query.Get("prefix"), rq.query.Get("delimiter")
	keyMarker, idMarker := rq.query.Get("key-marker"), rq.query.Get("upload-id-marker")
	maxUploads := 1000
	if v := rq.query.Get("max-uploads"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, errInvalidArgument("max-uploads", v, "Argument max-uploads must be an integer between 0 and 2147483647")
		}
		maxUploads = min(n, 1000)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	var markerSeq uint64
	if m := b.uploads[idMarker]; m != nil && m.key == keyMarker {
		markerSeq = m.seq
	}
	all := make([]*upload, 0, len(b.uploads))
	for _, u := range b.uploads {
		if !strings.HasPrefix(u.key, prefix) || u.key < keyMarker {
			continue
		}
		if u.key == keyMarker && (idMarker == "" || u.seq <= markerSeq) {
			continue
		}
		all = append(all, u)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].key != all[j].key {
			return all[i].key < all[j].key
		}
		return all[i].seq < all[j].seq
	})
	out := listUploadsOut{Bucket: b.name, KeyMarker: keyMarker, UploadIDMarker: idMarker, Prefix: prefix, Delimiter: delim, MaxUploads: maxUploads}
	lastCP := ""
	count := 0
	for _, u := range all {
		cp, isCP := commonPrefixOf(u.key, prefix, delim)
		if isCP && (cp == lastCP || cp <= keyMarker) {
			continue
		}
		if count == maxUploads {
			out.IsTruncated = true
			break
		}
		count++
		if isCP {
			lastCP = cp
			out.CommonPrefixes = append(out.CommonPrefixes, commonPrefix{Prefix: cp})
			out.NextKeyMarker, out.NextUploadIDMarker = cp, ""
			continue
		}
		out.Uploads = append(out.Uploads, uploadEntry{
			Key: u.key, UploadID: u.id, Initiator: theOwner, Owner: theOwner, StorageClass: "STANDARD",
			Initiated: xmlTime(u.initiated), ChecksumAlgorithm: u.alg, ChecksumType: u.typ,
		})
		out.NextKeyMarker, out.NextUploadIDMarker = u.key, u.id
	}
	if !out.IsTruncated {
		out.NextKeyMarker, out.NextUploadIDMarker = "", ""
	}
	return xmlResponse(out), nil
}

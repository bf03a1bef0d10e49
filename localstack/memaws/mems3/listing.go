package mems3

import (
	"encoding/base64"
	"encoding/xml"
	"sort"
	"strconv"
	"strings"
)

const defaultMaxKeys = 1000

// listEntry is one entry of a listing: an object version, or a common
// prefix standing for every key under it.
type listEntry struct {
	key    string // object key, or the common prefix
	prefix bool
	v      *version
	latest bool // v is the key's current version
}

// commonPrefixOf returns the common prefix key rolls up into, if any.
func commonPrefixOf(key, prefix, delim string) (string, bool) {
	if delim == "" {
		return "", false
	}
	if i := strings.Index(key[len(prefix):], delim); i >= 0 {
		return key[:len(prefix)+i+len(delim)], true
	}
	return "", false
}

// keysFrom returns the bucket's keys with prefix, in S3 order, from the
// first one not before from.
func keysFrom(b *bucket, prefix, from string) []string {
	keys := b.sortedKeys()
	start := max(from, prefix)
	i := sort.SearchStrings(keys, start)
	j := i
	for j < len(keys) && strings.HasPrefix(keys[j], prefix) {
		j++
	}
	return keys[i:j]
}

// listCurrent lists the keys after `after` whose current version is an
// object, rolled up into common prefixes by delim, up to limit entries.
// truncated says whether more entries follow.
func listCurrent(b *bucket, prefix, delim, after string, limit int) (out []listEntry, truncated bool) {
	if limit == 0 {
		return nil, false
	}
	lastCP := ""
	for _, k := range keysFrom(b, prefix, after) {
		if k <= after {
			continue
		}
		v := b.live(k)
		if v == nil {
			continue
		}
		e := listEntry{key: k, v: v, latest: true}
		if cp, ok := commonPrefixOf(k, prefix, delim); ok {
			if cp <= after || cp == lastCP {
				continue
			}
			lastCP = cp
			e = listEntry{key: cp, prefix: true}
		}
		if len(out) == limit {
			return out, true
		}
		out = append(out, e)
	}
	return out, false
}

// listAllVersions lists versions and delete markers in S3 order (keys
// ascending, newest first within a key), starting after the key marker
// or, with a version id marker, after that version of the marker key.
// Version ids do not sort, so the position of the marker version is found
// from the creation order it encodes; this holds even if that version has
// since been deleted, as S3's listing does.
func listAllVersions(b *bucket, prefix, delim, keyMarker string, markerSeq uint64, hasVIDMarker bool, limit int) (out []listEntry, truncated bool) {
	if limit == 0 {
		return nil, false
	}
	lastCP := ""
	for _, k := range keysFrom(b, prefix, keyMarker) {
		if k < keyMarker || (k == keyMarker && !hasVIDMarker) {
			continue
		}
		if cp, ok := commonPrefixOf(k, prefix, delim); ok {
			if cp <= keyMarker || cp == lastCP {
				continue
			}
			lastCP = cp
			if len(out) == limit {
				return out, true
			}
			out = append(out, listEntry{key: cp, prefix: true})
			continue
		}
		vs := b.objects[k].versions
		for i := len(vs) - 1; i >= 0; i-- {
			if k == keyMarker && vs[i].seq >= markerSeq {
				continue
			}
			if len(out) == limit {
				return out, true
			}
			out = append(out, listEntry{key: k, v: vs[i], latest: i == len(vs)-1})
		}
	}
	return out, false
}

// listParams are the parameters every listing shares.
type listParams struct {
	prefix, delimiter string
	maxKeys           int
	urlEncoding       bool
}

func parseListParams(rq *request) (listParams, *s3Error) {
	p := listParams{prefix: rq.query.Get("prefix"), delimiter: rq.query.Get("delimiter"), maxKeys: defaultMaxKeys}
	if v := rq.query.Get("max-keys"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return p, errInvalidArgument("max-keys", v, "Provided max-keys not an integer or within integer range")
		}
		p.maxKeys = min(n, defaultMaxKeys)
	}
	switch e := rq.query.Get("encoding-type"); e {
	case "":
	case "url":
		p.urlEncoding = true
	default:
		return p, errInvalidArgument("encoding-type", e, "Invalid Encoding Method specified in Request")
	}
	return p, nil
}

// enc encodes a key or prefix for a listing answered with
// encoding-type=url.
func (p listParams) enc(s string) string {
	if p.urlEncoding {
		return eventKey(s)
	}
	return s
}

func (p listParams) encodingType() string {
	if p.urlEncoding {
		return "url"
	}
	return ""
}

type contentEntry struct {
	Key               string `xml:"Key"`
	LastModified      string `xml:"LastModified"`
	ETag              string `xml:"ETag"`
	ChecksumAlgorithm string `xml:"ChecksumAlgorithm,omitempty"`
	ChecksumType      string `xml:"ChecksumType,omitempty"`
	Size              int64  `xml:"Size"`
	StorageClass      string `xml:"StorageClass"`
	Owner             *owner `xml:"Owner,omitempty"`
}

type commonPrefix struct {
	Prefix string `xml:"Prefix"`
}

func (p listParams) contents(entries []listEntry, withOwner bool) ([]contentEntry, []commonPrefix) {
	var cs []contentEntry
	var ps []commonPrefix
	for _, e := range entries {
		if e.prefix {
			ps = append(ps, commonPrefix{Prefix: p.enc(e.key)})
			continue
		}
		c := contentEntry{
			Key:               p.enc(e.key),
			LastModified:      xmlTime(e.v.modified),
			ETag:              e.v.etag,
			ChecksumAlgorithm: e.v.checksum.alg,
			ChecksumType:      e.v.checksum.typ,
			Size:              int64(len(e.v.data)),
			StorageClass:      "STANDARD",
		}
		if withOwner {
			o := theOwner
			c.Owner = &o
		}
		cs = append(cs, c)
	}
	return cs, ps
}

type listV2Out struct {
	XMLName               xml.Name       `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListBucketResult"`
	Name                  string         `xml:"Name"`
	Prefix                string         `xml:"Prefix"`
	Delimiter             string         `xml:"Delimiter,omitempty"`
	MaxKeys               int            `xml:"MaxKeys"`
	KeyCount              int            `xml:"KeyCount"`
	IsTruncated           bool           `xml:"IsTruncated"`
	ContinuationToken     string         `xml:"ContinuationToken,omitempty"`
	NextContinuationToken string         `xml:"NextContinuationToken,omitempty"`
	StartAfter            string         `xml:"StartAfter,omitempty"`
	EncodingType          string         `xml:"EncodingType,omitempty"`
	Contents              []contentEntry `xml:"Contents"`
	CommonPrefixes        []commonPrefix `xml:"CommonPrefixes"`
}

func (s *Server) listObjectsV2(rq *request) (*response, *s3Error) {
	p, err := parseListParams(rq)
	if err != nil {
		return nil, err
	}
	token, hasToken := rq.query.Get("continuation-token"), rq.query.Has("continuation-token")
	after := rq.query.Get("start-after")
	if hasToken {
		raw, derr := base64.RawURLEncoding.DecodeString(token)
		if derr != nil || token == "" {
			return nil, errInvalidArgument("continuation-token", token, "The continuation token provided is incorrect")
		}
		after = string(raw)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	entries, truncated := listCurrent(b, p.prefix, p.delimiter, after, p.maxKeys)
	out := listV2Out{
		Name:              b.name,
		Prefix:            p.enc(p.prefix),
		Delimiter:         p.enc(p.delimiter),
		MaxKeys:           p.maxKeys,
		KeyCount:          len(entries),
		IsTruncated:       truncated,
		ContinuationToken: token,
		StartAfter:        p.enc(rq.query.Get("start-after")),
		EncodingType:      p.encodingType(),
	}
	out.Contents, out.CommonPrefixes = p.contents(entries, rq.query.Get("fetch-owner") == "true")
	if truncated {
		out.NextContinuationToken = base64.RawURLEncoding.EncodeToString([]byte(entries[len(entries)-1].key))
	}
	return xmlResponse(out), nil
}

type listV1Out struct {
	XMLName        xml.Name       `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListBucketResult"`
	Name           string         `xml:"Name"`
	Prefix         string         `xml:"Prefix"`
	Marker         string         `xml:"Marker"`
	NextMarker     string         `xml:"NextMarker,omitempty"`
	Delimiter      string         `xml:"Delimiter,omitempty"`
	MaxKeys        int            `xml:"MaxKeys"`
	IsTruncated    bool           `xml:"IsTruncated"`
	EncodingType   string         `xml:"EncodingType,omitempty"`
	Contents       []contentEntry `xml:"Contents"`
	CommonPrefixes []commonPrefix `xml:"CommonPrefixes"`
}

func (s *Server) listObjects(rq *request) (*response, *s3Error) {
	p, err := parseListParams(rq)
	if err != nil {
		return nil, err
	}
	marker := rq.query.Get("marker")
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	entries, truncated := listCurrent(b, p.prefix, p.delimiter, marker, p.maxKeys)
	out := listV1Out{
		Name:         b.name,
		Prefix:       p.enc(p.prefix),
		Marker:       p.enc(marker),
		Delimiter:    p.enc(p.delimiter),
		MaxKeys:      p.maxKeys,
		IsTruncated:  truncated,
		EncodingType: p.encodingType(),
	}
	out.Contents, out.CommonPrefixes = p.contents(entries, true)
	// S3 gives NextMarker only with a delimiter; without one the client
	// continues from the last key.
	if truncated && p.delimiter != "" {
		out.NextMarker = p.enc(entries[len(entries)-1].key)
	}
	return xmlResponse(out), nil
}

type listVersionsOut struct {
	XMLName             xml.Name       `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListVersionsResult"`
	Name                string         `xml:"Name"`
	Prefix              string         `xml:"Prefix"`
	KeyMarker           string         `xml:"KeyMarker"`
	VersionIDMarker     string         `xml:"VersionIdMarker"`
	NextKeyMarker       string         `xml:"NextKeyMarker,omitempty"`
	NextVersionIDMarker string         `xml:"NextVersionIdMarker,omitempty"`
	MaxKeys             int            `xml:"MaxKeys"`
	Delimiter           string         `xml:"Delimiter,omitempty"`
	IsTruncated         bool           `xml:"IsTruncated"`
	EncodingType        string         `xml:"EncodingType,omitempty"`
	Entries             []versionEntry // <Version> and <DeleteMarker>, interleaved in listing order
	CommonPrefixes      []commonPrefix `xml:"CommonPrefixes"`
}

// versionEntry is a <Version> or <DeleteMarker>, as its XMLName says.
type versionEntry struct {
	XMLName           xml.Name
	Key               string `xml:"Key"`
	VersionID         string `xml:"VersionId"`
	IsLatest          bool   `xml:"IsLatest"`
	LastModified      string `xml:"LastModified"`
	ETag              string `xml:"ETag,omitempty"`
	ChecksumAlgorithm string `xml:"ChecksumAlgorithm,omitempty"`
	ChecksumType      string `xml:"ChecksumType,omitempty"`
	Size              *int64 `xml:"Size,omitempty"`
	StorageClass      string `xml:"StorageClass,omitempty"`
	Owner             owner  `xml:"Owner"`
}

func (s *Server) listObjectVersions(rq *request) (*response, *s3Error) {
	p, err := parseListParams(rq)
	if err != nil {
		return nil, err
	}
	keyMarker := rq.query.Get("key-marker")
	vidMarker, hasVIDMarker := rq.query.Get("version-id-marker"), rq.query.Get("version-id-marker") != ""
	if hasVIDMarker && keyMarker == "" {
		return nil, errInvalidArgument("version-id-marker", vidMarker, "A version-id marker cannot be specified without a key marker.")
	}
	var markerSeq uint64
	if hasVIDMarker && vidMarker != nullVersion {
		seq, ok := versionSeq(vidMarker)
		if !ok {
			return nil, errInvalidArgument("version-id-marker", vidMarker, "Invalid version id specified")
		}
		markerSeq = seq
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	if vidMarker == nullVersion {
		if v := b.find(keyMarker, nullVersion); v != nil {
			markerSeq = v.seq
		}
	}
	entries, truncated := listAllVersions(b, p.prefix, p.delimiter, keyMarker, markerSeq, hasVIDMarker, p.maxKeys)
	out := listVersionsOut{
		Name:            b.name,
		Prefix:          p.enc(p.prefix),
		KeyMarker:       p.enc(keyMarker),
		VersionIDMarker: vidMarker,
		MaxKeys:         p.maxKeys,
		Delimiter:       p.enc(p.delimiter),
		IsTruncated:     truncated,
		EncodingType:    p.encodingType(),
	}
	for _, e := range entries {
		if e.prefix {
			out.CommonPrefixes = append(out.CommonPrefixes, commonPrefix{Prefix: p.enc(e.key)})
			continue
		}
		ve := versionEntry{
			XMLName:      xml.Name{Local: "Version"},
			Key:          p.enc(e.key),
			VersionID:    e.v.id,
			IsLatest:     e.latest,
			LastModified: xmlTime(e.v.modified),
			Owner:        theOwner,
		}
		if e.v.deleteMarker {
			ve.XMLName.Local = "DeleteMarker"
		} else {
			size := int64(len(e.v.data))
			ve.ETag, ve.Size, ve.StorageClass = e.v.etag, &size, "STANDARD"
			ve.ChecksumAlgorithm, ve.ChecksumType = e.v.checksum.alg, e.v.checksum.typ
		}
		out.Entries = append(out.Entries, ve)
	}
	if truncated {
		last := entries[len(entries)-1]
		out.NextKeyMarker = p.enc(last.key)
		if !last.prefix {
			out.NextVersionIDMarker = last.v.id
		}
	}
	return xmlResponse(out), nil
}

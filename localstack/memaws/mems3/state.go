package mems3

import (
	"crypto/sha256"
	"net/http"
	"sort"
	"strings"
	"time"
)

// Versioning states as S3 names them; "" is a bucket that was never
// versioned (its objects have the version id "null").
const (
	versioningEnabled   = "Enabled"
	versioningSuspended = "Suspended"
)

type bucket struct {
	name         string
	region       string
	created      time.Time
	versioning   string
	notification []queueConfig
	objects      map[string]*object
	uploads      map[string]*upload
}

// object is every version and delete marker of one key, oldest first: the
// last one is the current version.
type object struct {
	versions []*version
}

// version is an object version or a delete marker. Its fields never
// change once it is stored, so a reader may use it after unlocking.
type version struct {
	id           string
	seq          uint64 // creation order among all versions of the server
	deleteMarker bool
	modified     time.Time
	data         []byte
	dataHash     [sha256.Size]byte
	etag         string // quoted, as in the ETag header
	checksum     checksum
	contentType  string
	headers      map[string]string // stored standard headers (Cache-Control, ...)
	meta         map[string]string // user metadata, names lower-cased
}

// storedHeaders are the standard headers S3 keeps with an object and
// returns on GET and HEAD.
var storedHeaders = []string{"Cache-Control", "Content-Disposition", "Content-Language", "Expires"}

// objectAttrs are what a write keeps beside the bytes: content type,
// standard headers and user metadata.
type objectAttrs struct {
	contentType string
	headers     map[string]string
	meta        map[string]string
}

// attrsFrom reads the attributes of a PutObject or CreateMultipartUpload.
func attrsFrom(h http.Header) (objectAttrs, *s3Error) {
	a := objectAttrs{contentType: h.Get("Content-Type"), headers: map[string]string{}, meta: map[string]string{}}
	for _, name := range storedHeaders {
		if v := h.Get(name); v != "" {
			a.headers[name] = v
		}
	}
	if ce := storedContentEncoding(h); ce != "" {
		a.headers["Content-Encoding"] = ce
	}
	size := 0
	for name, vs := range h {
		if rest, ok := strings.CutPrefix(strings.ToLower(name), "x-amz-meta-"); ok && rest != "" {
			v := strings.Join(vs, ",")
			a.meta[rest] = v
			size += len(rest) + len(v)
		}
	}
	if size > 2048 {
		return a, newError(http.StatusBadRequest, "MetadataTooLarge",
			"Your metadata headers exceed the maximum allowed metadata size").with("MaxSizeAllowed", "2048")
	}
	return a, nil
}

func (v *version) attrs() objectAttrs {
	return objectAttrs{contentType: v.contentType, headers: v.headers, meta: v.meta}
}

func (b *bucket) versioned() bool { return b.versioning != "" }

// current is the key's current version (possibly a delete marker), or nil.
func (b *bucket) current(key string) *version {
	o := b.objects[key]
	if o == nil || len(o.versions) == 0 {
		return nil
	}
	return o.versions[len(o.versions)-1]
}

// live is the key's current version unless that is a delete marker: the
// object a plain GET would return.
func (b *bucket) live(key string) *version {
	if v := b.current(key); v != nil && !v.deleteMarker {
		return v
	}
	return nil
}

func (b *bucket) find(key, id string) *version {
	if o := b.objects[key]; o != nil {
		for _, v := range o.versions {
			if v.id == id {
				return v
			}
		}
	}
	return nil
}

// nextVersion gives v the identity its write gets in b: a fresh version id
// when versioning is enabled, otherwise "null" (replacing the key's null
// version, as S3 does in unversioned and suspended buckets).
func (s *Server) nextVersion(b *bucket, v *version) {
	s.versionSeq++
	v.seq = s.versionSeq
	v.id = nullVersion
	if b.versioning == versioningEnabled {
		v.id = versionID(v.seq)
	}
}

// store makes v the key's current version.
func (b *bucket) store(key string, v *version) {
	o := b.objects[key]
	if o == nil {
		o = &object{}
		b.objects[key] = o
	}
	if v.id == nullVersion {
		o.remove(nullVersion)
	}
	o.versions = append(o.versions, v)
}

// remove deletes the version with the given id and returns it (nil if
// there is none).
func (o *object) remove(id string) *version {
	for i, v := range o.versions {
		if v.id == id {
			o.versions = append(o.versions[:i:i], o.versions[i+1:]...)
			return v
		}
	}
	return nil
}

func (b *bucket) removeVersion(key, id string) *version {
	o := b.objects[key]
	if o == nil {
		return nil
	}
	v := o.remove(id)
	if len(o.versions) == 0 {
		delete(b.objects, key)
	}
	return v
}

// sortedKeys returns the bucket's keys in S3 order (by UTF-8 bytes).
func (b *bucket) sortedKeys() []string {
	keys := make([]string, 0, len(b.objects))
	for k := range b.objects {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (s *Server) bucket(name string) (*bucket, *s3Error) {
	b := s.buckets[name]
	if b == nil {
		return nil, errNoSuchBucket(name)
	}
	return b, nil
}

// storedTime is a time as S3 keeps it for objects, parts and buckets:
// whole seconds (listings show ".000Z", Last-Modified has no fraction), so
// a time read from a listing equals one read from HEAD. Event times keep
// their milliseconds.
func storedTime(t time.Time) time.Time { return t.Truncate(time.Second) }

// newVersion makes an object version of data, not yet identified or stored.
func newVersion(data []byte, etag string, ck checksum, a objectAttrs, now time.Time) *version {
	return &version{
		modified:    storedTime(now),
		data:        data,
		dataHash:    sha256.Sum256(data),
		etag:        etag,
		checksum:    ck,
		contentType: a.contentType,
		headers:     a.headers,
		meta:        a.meta,
	}
}

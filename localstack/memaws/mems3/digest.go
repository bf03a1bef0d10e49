package mems3

import (
	"encoding/binary"
	"hash"
	"sort"
)

// digestWriter writes length-prefixed fields, so that no two different
// states serialize to the same bytes.
type digestWriter struct{ h hash.Hash }

func (d digestWriter) str(s string) {
	d.num(uint64(len(s)))
	d.h.Write([]byte(s))
}

func (d digestWriter) num(n uint64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	d.h.Write(b[:])
}

func (d digestWriter) flag(b bool) {
	if b {
		d.num(1)
	} else {
		d.num(0)
	}
}

func (d digestWriter) bytes(b []byte) {
	d.num(uint64(len(b)))
	d.h.Write(b)
}

func (d digestWriter) strMap(m map[string]string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	d.num(uint64(len(keys)))
	for _, k := range keys {
		d.str(k)
		d.str(m[k])
	}
}

func (d digestWriter) checksum(c checksum) {
	d.str(c.alg)
	d.str(c.value)
	d.str(c.typ)
}

func (d digestWriter) attrs(a objectAttrs) {
	d.str(a.contentType)
	d.strMap(a.headers)
	d.strMap(a.meta)
}

// digest serializes the durable state: what S3 would still hold after a
// restart. Times are left out (they come from the clock, not from the
// requests), as are request ids and undelivered notifications. Called
// with s.mu held.
func (s *Server) digest(h hash.Hash) {
	d := digestWriter{h}
	d.str("mems3 digest v1")
	names := make([]string, 0, len(s.buckets))
	for n := range s.buckets {
		names = append(names, n)
	}
	sort.Strings(names)
	d.num(uint64(len(names)))
	for _, n := range names {
		b := s.buckets[n]
		d.str(b.name)
		d.str(b.region)
		d.str(b.versioning)
		d.num(uint64(len(b.notification)))
		for _, q := range b.notification {
			d.str(q.id)
			d.str(q.arn)
			d.num(uint64(len(q.events)))
			for _, e := range q.events {
				d.str(e)
			}
			d.num(uint64(len(q.rules)))
			for _, r := range q.rules {
				d.str(r.name)
				d.str(r.value)
			}
		}
		keys := b.sortedKeys()
		d.num(uint64(len(keys)))
		for _, k := range keys {
			d.str(k)
			vs := b.objects[k].versions
			d.num(uint64(len(vs)))
			for _, v := range vs {
				d.str(v.id)
				d.flag(v.deleteMarker)
				if v.deleteMarker {
					continue
				}
				d.num(uint64(len(v.data)))
				d.bytes(v.dataHash[:])
				d.str(v.etag)
				d.checksum(v.checksum)
				d.attrs(v.attrs())
			}
		}
		ids := make([]string, 0, len(b.uploads))
		for id := range b.uploads {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		d.num(uint64(len(ids)))
		for _, id := range ids {
			u := b.uploads[id]
			d.str(u.id)
			d.str(u.key)
			d.str(u.alg)
			d.str(u.typ)
			d.attrs(u.attrs)
			numbers := make([]int, 0, len(u.parts))
			for n := range u.parts {
				numbers = append(numbers, n)
			}
			sort.Ints(numbers)
			d.num(uint64(len(numbers)))
			for _, n := range numbers {
				p := u.parts[n]
				d.num(uint64(n))
				d.num(uint64(len(p.data)))
				d.bytes(p.dataHash[:])
				d.str(p.etag)
				d.checksum(p.checksum)
			}
		}
	}
}

package mems3

import "maps"

// Snapshot is the server's durable state at one moment: buckets, their
// settings, every version and delete marker, uploads in progress, and the
// id counters. Restore puts a server back to it; a snapshot can be
// restored any number of times. The explorer (tests/explore) backtracks
// this way instead of replaying every schedule from the start.
type Snapshot struct {
	buckets                         map[string]*bucket
	versionSeq, uploadSeq, eventSeq uint64
}

// Snapshot copies the durable state. Notifications not yet delivered are
// not part of it: take snapshots between requests.
func (s *Server) Snapshot() *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &Snapshot{buckets: copyBuckets(s.buckets), versionSeq: s.versionSeq, uploadSeq: s.uploadSeq, eventSeq: s.eventSeq}
}

// Restore makes snap the server's state.
func (s *Server) Restore(snap *Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buckets = copyBuckets(snap.buckets)
	s.versionSeq, s.uploadSeq, s.eventSeq = snap.versionSeq, snap.uploadSeq, snap.eventSeq
	s.pending = nil
}

// copyBuckets copies what a request may change — the maps and slices —
// and shares versions and parts, which never change once stored.
func copyBuckets(in map[string]*bucket) map[string]*bucket {
	out := make(map[string]*bucket, len(in))
	for name, b := range in {
		c := *b
		c.notification = append([]queueConfig(nil), b.notification...)
		c.objects = make(map[string]*object, len(b.objects))
		for k, o := range b.objects {
			c.objects[k] = &object{versions: append([]*version(nil), o.versions...)}
		}
		c.uploads = make(map[string]*upload, len(b.uploads))
		for id, u := range b.uploads {
			cu := *u
			cu.parts = maps.Clone(u.parts)
			c.uploads[id] = &cu
		}
		out[name] = &c
	}
	return out
}

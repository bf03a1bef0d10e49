package memsqs

import (
	"encoding/binary"
	"hash"
	"strconv"
)

// Digest writes to h a canonical serialization of the durable state:
// every queue (by name) with its kind, settable attributes and tags; its
// messages in queue order with id, body, message and system attributes,
// group and deduplication ids, sequence number, receive count and state
// (visible, delayed or in flight); and its live deduplication ids.
// Timestamps, receipt handles and counters are left out, so that two
// servers fed the same requests in the same order digest equal even on
// the real clock. Expired messages are dropped first, as a request would.
func (s *Server) Digest(h hash.Hash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	d := digester{h: h}
	d.str("memsqs digest v1")
	names := sortedKeys(s.queues)
	d.num(len(names))
	for _, name := range names {
		q := s.queues[name]
		q.expire(now)
		d.str(name)
		d.str(strconv.FormatBool(q.fifo))
		var attrs []string
		for _, a := range readableAttributes() {
			if v, ok := q.attribute(a, now); ok && configured(a) {
				attrs = append(attrs, a, v)
			}
		}
		d.strs(attrs)
		var tags []string
		for _, k := range sortedKeys(q.tags) {
			tags = append(tags, k, q.tags[k])
		}
		d.strs(tags)

		d.num(len(q.messages))
		for _, m := range q.messages {
			d.str(m.id)
			d.str(m.body)
			d.num(len(m.attrs))
			for _, n := range sortedKeys(m.attrs) {
				a := m.attrs[n]
				d.str(n)
				d.str(a.dataType)
				d.str(a.str)
				d.str(string(a.bin))
			}
			trace := ""
			if m.trace != nil {
				trace = m.trace.str
			}
			state := "visible"
			switch {
			case m.inFlight(now):
				state = "in flight"
			case m.delayed(now):
				state = "delayed"
			}
			d.strs([]string{trace, m.group, m.dedupID, m.seq, m.sender, m.dlqSource, state})
			d.num(m.receives)
		}

		keys := sortedKeys(q.dedup)
		d.num(len(keys))
		for _, k := range keys {
			d.strs([]string{k, q.dedup[k].messageID, q.dedup[k].seq})
		}
	}
}

// digester writes length-prefixed fields, so that no two states
// serialize alike.
type digester struct{ h hash.Hash }

func (d digester) num(n int) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	d.h.Write(b[:])
}

func (d digester) str(s string) {
	d.num(len(s))
	d.h.Write([]byte(s))
}

func (d digester) strs(ss []string) {
	d.num(len(ss))
	for _, s := range ss {
		d.str(s)
	}
}

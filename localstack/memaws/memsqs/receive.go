package memsqs

import (
	"context"
	"strconv"
	"strings"
	"time"
)

type receiveMessageRequest struct {
	QueueUrl                    string
	AttributeNames              []string
	MessageSystemAttributeNames []string
	MessageAttributeNames       []string
	MaxNumberOfMessages         *int
	VisibilityTimeout           *int
	WaitTimeSeconds             *int
	// ReceiveRequestAttemptId is accepted and ignored: a retried receive
	// is a new receive.
	ReceiveRequestAttemptId string
}

func (r receiveMessageRequest) target() string { return queueNameOf(r.QueueUrl) }

type wireMessage struct {
	MessageId              string
	ReceiptHandle          string
	MD5OfBody              string
	Body                   string
	Attributes             map[string]string   `json:",omitempty"`
	MD5OfMessageAttributes string              `json:",omitempty"`
	MessageAttributes      map[string]wireAttr `json:",omitempty"`
}

type receiveMessageResponse struct {
	Messages []wireMessage `json:",omitempty"`
}

// receiveMessage returns up to MaxNumberOfMessages messages. With a wait
// (WaitTimeSeconds, else the queue's ReceiveMessageWaitTimeSeconds) and
// nothing to return, it long-polls: it waits, in real time, until a
// message may have become available — a send, a visibility change, a
// redrive, Wake, or the moment (by Clock) a delay or visibility timeout
// ends — and looks again, until it has messages, the wait is over or the
// request's context ends.
func (s *Server) receiveMessage(ctx context.Context, req *receiveMessageRequest) (*receiveMessageResponse, *apiError) {
	limit := 1
	if req.MaxNumberOfMessages != nil {
		limit = *req.MaxNumberOfMessages
		if limit < 1 || limit > 10 {
			return nil, errInvalidParameter("Value %d for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.", limit)
		}
	}
	if v := req.VisibilityTimeout; v != nil && (*v < 0 || *v > 12*3600) {
		return nil, errInvalidParameter("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and 43200, if provided.", *v)
	}
	if w := req.WaitTimeSeconds; w != nil && (*w < 0 || *w > 20) {
		return nil, errInvalidParameter("Value %d for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided.", *w)
	}
	sel := newSelection(req)
	start := time.Now()
	var deadline time.Time
	for first := true; ; first = false {
		s.mu.Lock()
		now := s.now()
		q, aerr := s.queueByURL(req.QueueUrl, now)
		if aerr != nil {
			s.mu.Unlock()
			return nil, aerr
		}
		if first {
			wait := q.attrs.wait
			if req.WaitTimeSeconds != nil {
				wait = *req.WaitTimeSeconds
			}
			deadline = start.Add(time.Duration(wait) * time.Second)
		}
		if ctx.Err() != nil {
			// Nobody is listening: take nothing, or it would be lost until
			// its visibility timeout ends.
			s.mu.Unlock()
			return &receiveMessageResponse{}, nil
		}
		visibility := q.attrs.visibility
		if req.VisibilityTimeout != nil {
			visibility = *req.VisibilityTimeout
		}
		msgs := s.take(q, limit, time.Duration(visibility)*time.Second, sel, now)
		wake, next := s.wake, q.nextChange(now)
		s.mu.Unlock()

		remaining := time.Until(deadline)
		if len(msgs) > 0 || remaining <= 0 {
			return &receiveMessageResponse{Messages: msgs}, nil
		}
		pause := remaining
		if !next.IsZero() && next.Sub(now) < pause {
			pause = max(next.Sub(now), time.Millisecond)
		}
		t := time.NewTimer(pause)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// take receives up to limit messages of q: marks them received (a new
// receipt handle, the receive count up, invisible for visibility) and
// returns them as the response shows them. A message already received
// maxReceiveCount times moves to the dead-letter queue instead. The
// caller holds s.mu.
func (s *Server) take(q *queue, limit int, visibility time.Duration, sel selection, now time.Time) []wireMessage {
	var out []wireMessage
	for _, group := range q.candidates(now) {
		for _, m := range group {
			if len(out) == limit {
				return out
			}
			if dlq := s.overReceived(q, m); dlq != nil {
				s.moveToDeadLetter(q, dlq, m, now)
				continue
			}
			s.ids.receipt++
			m.receipt = s.ids.receipt
			m.receives++
			if m.receives == 1 {
				m.firstReceive = now
			}
			m.receivedAt = now
			m.visibleAt = now.Add(visibility)
			out = append(out, sel.show(q, m))
		}
	}
	return out
}

// candidates lists the messages a receive may return, in the order it
// returns them, as runs that a receive takes in turn. Standard queue: one
// run of every available message, oldest first (SQS does not promise an
// order; oldest first is one it may give). FIFO queue: one run per message
// group, in group order, for the groups with no message in flight, each
// run cut at the group's first message still delayed; the runs ordered by
// their oldest message. Taking runs whole follows SQS, which returns as
// many messages of one group as it can before moving to the next.
func (q *queue) candidates(now time.Time) [][]*message {
	if !q.fifo {
		var run []*message
		for _, m := range q.messages {
			if m.available(now) {
				run = append(run, m)
			}
		}
		return [][]*message{run}
	}
	blocked := map[string]bool{}
	for _, m := range q.messages {
		if m.inFlight(now) {
			blocked[m.group] = true
		}
	}
	index := map[string]int{}
	var runs [][]*message
	for _, m := range q.messages {
		if blocked[m.group] {
			continue
		}
		if !m.available(now) {
			blocked[m.group] = true
			continue
		}
		i, ok := index[m.group]
		if !ok {
			i = len(runs)
			index[m.group] = i
			runs = append(runs, nil)
		}
		runs[i] = append(runs[i], m)
	}
	return runs
}

// selection is what a receive asked to see of each message.
type selection struct {
	system    map[string]bool // nil: none; has "All": all
	userAll   bool
	userNames map[string]bool
	prefixes  []string
}

func newSelection(req *receiveMessageRequest) selection {
	var sel selection
	for _, n := range append(append([]string(nil), req.AttributeNames...), req.MessageSystemAttributeNames...) {
		if sel.system == nil {
			sel.system = map[string]bool{}
		}
		sel.system[n] = true
	}
	for _, n := range req.MessageAttributeNames {
		switch {
		case n == "All" || n == ".*":
			sel.userAll = true
		case strings.HasSuffix(n, ".*"):
			sel.prefixes = append(sel.prefixes, strings.TrimSuffix(n, "*"))
		default:
			if sel.userNames == nil {
				sel.userNames = map[string]bool{}
			}
			sel.userNames[n] = true
		}
	}
	return sel
}

func (sel selection) wantsSystem(name string) bool {
	return sel.system["All"] || sel.system[name]
}

func (sel selection) wantsUser(name string) bool {
	if sel.userAll || sel.userNames[name] {
		return true
	}
	for _, p := range sel.prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// show renders m as a receive returns it. MD5OfMessageAttributes covers
// the attributes returned, as SQS computes it.
func (sel selection) show(q *queue, m *message) wireMessage {
	w := wireMessage{
		MessageId:     m.id,
		ReceiptHandle: receiptHandle(handleRef{queue: q.id, message: m.serial, receipt: m.receipt}),
		MD5OfBody:     m.md5Body,
		Body:          m.body,
	}
	system := map[string]string{
		"SenderId":                         m.sender,
		"SentTimestamp":                    formatMillis(m.sentAt),
		"ApproximateReceiveCount":          strconv.Itoa(m.receives),
		"ApproximateFirstReceiveTimestamp": formatMillis(m.firstReceive),
	}
	if m.group != "" {
		system["MessageGroupId"] = m.group
	}
	if q.fifo {
		system["SequenceNumber"] = m.seq
		system["MessageDeduplicationId"] = m.dedupID
	}
	if m.trace != nil {
		system["AWSTraceHeader"] = m.trace.str
	}
	if m.dlqSource != "" {
		system["DeadLetterQueueSourceArn"] = m.dlqSource
	}
	for name, v := range system {
		if sel.wantsSystem(name) {
			if w.Attributes == nil {
				w.Attributes = map[string]string{}
			}
			w.Attributes[name] = v
		}
	}
	shown := map[string]attrValue{}
	for name, a := range m.attrs {
		if sel.wantsUser(name) {
			shown[name] = a
		}
	}
	if len(shown) > 0 {
		w.MessageAttributes = make(map[string]wireAttr, len(shown))
		for name, a := range shown {
			w.MessageAttributes[name] = a.wire()
		}
		w.MD5OfMessageAttributes = md5OfAttributes(shown)
	}
	return w
}

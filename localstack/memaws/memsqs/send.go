package memsqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// dedupInterval is how long SQS remembers a FIFO deduplication id.
const dedupInterval = 5 * time.Minute

// dedupRecord is the message a FIFO deduplication id was first sent with.
type dedupRecord struct {
	messageID, seq string
	at             time.Time
}

// sendEntry is one message to send, from SendMessage, a batch entry or
// SendToARN.
type sendEntry struct {
	Body             *string             `json:"MessageBody"`
	DelaySeconds     *int                `json:"DelaySeconds"`
	Attributes       map[string]wireAttr `json:"MessageAttributes"`
	SystemAttributes map[string]wireAttr `json:"MessageSystemAttributes"`
	DedupID          *string             `json:"MessageDeduplicationId"`
	GroupID          *string             `json:"MessageGroupId"`
}

// sent is the outcome of one accepted send.
type sent struct {
	id, seq, md5Body, md5Attrs, md5System string
}

// prepare validates e for q as SQS does and builds the message it sends,
// without an identity yet. The caller holds s.mu.
func (s *Server) prepare(q *queue, e sendEntry, sender string, now time.Time) (*message, *apiError) {
	if e.Body == nil {
		return nil, errMissingParameter("MessageBody")
	}
	body := *e.Body
	if body == "" {
		return nil, errInvalidParameter("The request must contain a non-empty message body.")
	}
	if !validText(body) {
		return nil, newError("InvalidMessageContents", "Invalid character in the message body; "+allowedChars)
	}
	attrs, attrBytes, aerr := parseAttributes(e.Attributes)
	if aerr != nil {
		return nil, aerr
	}
	if size := len(body) + attrBytes; size > q.attrs.maxSize {
		return nil, errInvalidParameter("One or more parameters are invalid. Reason: Message must be shorter than %d bytes (it has %d bytes of body and attributes).", q.attrs.maxSize, size)
	}
	m := &message{
		body: body, attrs: attrs, sender: sender, sentAt: now, enqueuedAt: now,
		md5Body: md5Hex(body), md5Attrs: md5OfAttributes(attrs),
	}
	if aerr := setTrace(m, e.SystemAttributes); aerr != nil {
		return nil, aerr
	}

	delay := q.attrs.delay
	if e.DelaySeconds != nil {
		if q.fifo {
			return nil, errInvalidParameter("Value %d for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.", *e.DelaySeconds)
		}
		if *e.DelaySeconds < 0 || *e.DelaySeconds > 900 {
			return nil, errInvalidParameter("Value %d for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900.", *e.DelaySeconds)
		}
		delay = *e.DelaySeconds
	}
	m.visibleAt = now.Add(time.Duration(delay) * time.Second)

	// Standard queues take a MessageGroupId too (fair queues); only a FIFO
	// queue orders by it.
	if e.GroupID != nil {
		if aerr := checkMessageID("MessageGroupId", *e.GroupID); aerr != nil {
			return nil, aerr
		}
		m.group = *e.GroupID
	}
	if !q.fifo {
		if e.DedupID != nil {
			return nil, errInvalidParameter("Value %s for parameter MessageDeduplicationId is invalid. Reason: The request include parameter that is not valid for this queue type.", *e.DedupID)
		}
		return m, nil
	}
	if e.GroupID == nil {
		return nil, errMissingParameter("MessageGroupId")
	}
	switch {
	case e.DedupID != nil:
		if aerr := checkMessageID("MessageDeduplicationId", *e.DedupID); aerr != nil {
			return nil, aerr
		}
		m.dedupID = *e.DedupID
	case q.attrs.contentDedup:
		sum := sha256.Sum256([]byte(body))
		m.dedupID = hex.EncodeToString(sum[:])
	default:
		return nil, errInvalidParameter("The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
	}
	return m, nil
}

// checkMessageID validates a MessageGroupId or MessageDeduplicationId: 1
// to 128 alphanumeric and punctuation characters.
func checkMessageID(param, v string) *apiError {
	bad := strings.IndexFunc(v, func(r rune) bool { return r < '!' || r > '~' })
	if v == "" || len(v) > 128 || bad >= 0 {
		return errInvalidParameter("Value %s for parameter %s is invalid. Reason: %s can only include alphanumeric and punctuation characters. 1 to 128 in length.", v, param, param)
	}
	return nil
}

// setTrace takes the message system attributes: SQS knows only
// AWSTraceHeader, a String.
func setTrace(m *message, in map[string]wireAttr) *apiError {
	for name, w := range in {
		if name != "AWSTraceHeader" {
			return errInvalidParameter("Message system attribute name '%s' is invalid.", name)
		}
		if w.DataType != "String" || w.StringValue == nil || *w.StringValue == "" || w.BinaryValue != nil {
			return errInvalidParameter("Message system attribute 'AWSTraceHeader' must be a non-empty String.")
		}
		a := attrValue{dataType: "String", str: *w.StringValue}
		m.trace = &a
		m.md5System = md5OfAttributes(map[string]attrValue{name: a})
	}
	return nil
}

// enqueue gives a prepared message its identity and puts it on q, unless
// it is a FIFO duplicate: a message whose deduplication id (per group
// under DeduplicationScope=messageGroup) was sent within 5 minutes is
// accepted, with the original's MessageId and SequenceNumber, and not
// enqueued again. Deleting the original does not end the interval. The
// caller holds s.mu.
func (s *Server) enqueue(q *queue, m *message, now time.Time) sent {
	out := sent{md5Body: m.md5Body, md5Attrs: m.md5Attrs, md5System: m.md5System}
	var key string
	if q.fifo {
		key = m.dedupID
		if q.attrs.dedupScope == "messageGroup" {
			key = m.group + "\x00" + m.dedupID
		}
		if d, ok := q.dedup[key]; ok && now.Sub(d.at) < dedupInterval {
			out.id, out.seq = d.messageID, d.seq
			return out
		}
	}
	s.ids.message++
	m.serial = s.ids.message
	m.id = messageID(s.ids.message)
	if q.fifo {
		s.ids.sequence++
		m.seq = sequenceNumber(s.ids.sequence)
		q.dedup[key] = dedupRecord{messageID: m.id, seq: m.seq, at: now}
	}
	q.messages = append(q.messages, m)
	s.broadcast()
	out.id, out.seq = m.id, m.seq
	return out
}

type sendMessageRequest struct {
	QueueUrl string
	sendEntry
}

func (r sendMessageRequest) target() string { return queueNameOf(r.QueueUrl) }

type sendMessageResponse struct {
	MD5OfMessageAttributes       string `json:",omitempty"`
	MD5OfMessageBody             string
	MD5OfMessageSystemAttributes string `json:",omitempty"`
	MessageId                    string
	SequenceNumber               string `json:",omitempty"`
}

func (s *Server) sendMessage(_ context.Context, req *sendMessageRequest) (*sendMessageResponse, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	q, aerr := s.queueByURL(req.QueueUrl, now)
	if aerr != nil {
		return nil, aerr
	}
	m, aerr := s.prepare(q, req.sendEntry, s.opts.Account, now)
	if aerr != nil {
		return nil, aerr
	}
	r := s.enqueue(q, m, now)
	return &sendMessageResponse{
		MD5OfMessageAttributes: r.md5Attrs, MD5OfMessageBody: r.md5Body, MD5OfMessageSystemAttributes: r.md5System,
		MessageId: r.id, SequenceNumber: r.seq,
	}, nil
}

type sendMessageBatchRequest struct {
	QueueUrl string
	Entries  []sendBatchEntry
}

type sendBatchEntry struct {
	ID string `json:"Id"`
	sendEntry
}

func (r sendMessageBatchRequest) target() string { return queueNameOf(r.QueueUrl) }

type sendBatchResult struct {
	ID string `json:"Id"`
	sendMessageResponse
}

// batchError is one failed entry of a batch.
type batchError struct {
	ID          string `json:"Id"`
	SenderFault bool
	Code        string
	Message     string
}

func failed(id string, e *apiError) batchError {
	return batchError{ID: id, SenderFault: e.status < 500, Code: e.code, Message: e.message}
}

type sendMessageBatchResponse struct {
	Successful []sendBatchResult
	Failed     []batchError
}

// maxBatchEntries is SQS's limit of entries per batch request.
const maxBatchEntries = 10

// checkBatchIDs applies SQS's whole-request checks on a batch's entry ids.
func checkBatchIDs(ids []string) *apiError {
	if len(ids) == 0 {
		return newError("EmptyBatchRequest", "There should be at least one entry in the request.")
	}
	if len(ids) > maxBatchEntries {
		return newError("TooManyEntriesInBatchRequest", "Maximum number of entries per request are %d. You have sent %d.", maxBatchEntries, len(ids))
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" || len(id) > 80 || strings.IndexFunc(id, func(r rune) bool { return !isAlnum(r) && r != '-' && r != '_' }) >= 0 {
			return newError("InvalidBatchEntryId", "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long (%q).", id)
		}
		if seen[id] {
			return newError("BatchEntryIdsNotDistinct", "Id %s repeated.", id)
		}
		seen[id] = true
	}
	return nil
}

// sendMessageBatch sends each entry as SendMessage would, in order; an
// entry that fails is reported in Failed and does not stop the others.
// The entries' bodies and attributes together may not exceed the queue's
// MaximumMessageSize (BatchRequestTooLong).
func (s *Server) sendMessageBatch(_ context.Context, req *sendMessageBatchRequest) (*sendMessageBatchResponse, *apiError) {
	ids := make([]string, len(req.Entries))
	for i, e := range req.Entries {
		ids[i] = e.ID
	}
	if aerr := checkBatchIDs(ids); aerr != nil {
		return nil, aerr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	q, aerr := s.queueByURL(req.QueueUrl, now)
	if aerr != nil {
		return nil, aerr
	}
	total := 0
	for _, e := range req.Entries {
		if e.Body != nil {
			total += len(*e.Body)
		}
		for name, a := range e.Attributes {
			total += len(name) + len(a.DataType) + len(a.BinaryValue)
			if a.StringValue != nil {
				total += len(*a.StringValue)
			}
		}
	}
	if total > q.attrs.maxSize {
		return nil, newError("BatchRequestTooLong", "Batch requests cannot be longer than %d bytes. You have sent %d bytes.", q.attrs.maxSize, total)
	}
	out := &sendMessageBatchResponse{Successful: []sendBatchResult{}, Failed: []batchError{}}
	for _, e := range req.Entries {
		m, aerr := s.prepare(q, e.sendEntry, s.opts.Account, now)
		if aerr != nil {
			out.Failed = append(out.Failed, failed(e.ID, aerr))
			continue
		}
		r := s.enqueue(q, m, now)
		out.Successful = append(out.Successful, sendBatchResult{ID: e.ID, sendMessageResponse: sendMessageResponse{
			MD5OfMessageAttributes: r.md5Attrs, MD5OfMessageBody: r.md5Body, MD5OfMessageSystemAttributes: r.md5System,
			MessageId: r.id, SequenceNumber: r.seq,
		}})
	}
	return out, nil
}

// s3SenderID stands in for the AWS principal SenderId shows for a message
// S3 sent.
const s3SenderID = "s3.amazonaws.com"

// SendToARN enqueues body on the queue with that ARN
// (arn:aws:sqs:<region>:<account>:<name>), as S3 event notifications do:
// no message attributes, the queue's DelaySeconds, the same validation as
// SendMessage. S3 notifies standard queues only, so a FIFO queue is an
// error, as is an unknown queue. The fault function is consulted with op
// "SendToARN".
func (s *Server) SendToARN(ctx context.Context, arn string, body []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memsqs: send to %s: %w", arn, err)
	}
	name := arn[strings.LastIndex(arn, ":")+1:]
	if aerr := s.injected("SendToARN", name); aerr != nil {
		return fmt.Errorf("memsqs: send to %s: %w", arn, aerr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	q := s.queueByARN(arn)
	if q == nil {
		return fmt.Errorf("memsqs: send to %s: %w", arn, errQueueDoesNotExist(arn))
	}
	if q.fifo {
		return fmt.Errorf("memsqs: send to %s: S3 event notifications cannot target a FIFO queue", arn)
	}
	q.expire(now)
	text := string(body)
	m, aerr := s.prepare(q, sendEntry{Body: &text}, s3SenderID, now)
	if aerr != nil {
		return fmt.Errorf("memsqs: send to %s: %w", arn, aerr)
	}
	s.enqueue(q, m, now)
	return nil
}

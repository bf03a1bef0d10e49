package memsqs

import (
	"context"
	"time"
)

// maxVisibility caps a visibility timeout, and the total visibility
// timeout of one receive.
const maxVisibility = 12 * time.Hour

// handleUse is what a receipt handle is presented for.
type handleUse int

const (
	forDelete handleUse = iota
	forVisibility
)

// resolve finds the message a receipt handle names, by these rules (a
// handle names one receive of one message):
//
//   - Malformed, of another queue (or of a deleted queue's predecessor of
//     the same name), or never issued: ReceiptHandleIsInvalid.
//   - Its message is gone (deleted, expired, purged, moved to the
//     dead-letter queue): DeleteMessage succeeds, as SQS's delete is
//     idempotent; ChangeMessageVisibility fails with InvalidParameterValue
//     ("Message does not exist or is not available for visibility timeout
//     change"), as SQS answers.
//   - FIFO queue: a handle expires with its visibility timeout, and a later
//     receive supersedes it. Both DeleteMessage and ChangeMessageVisibility
//     then fail with InvalidParameterValue "The receipt handle has
//     expired", as SQS documents; ChangeMessageVisibility with the latest
//     handle of a message no longer in flight fails with MessageNotInflight.
//   - Standard queue: SQS documents that an older handle "succeeds, but the
//     message might not be deleted". memsqs takes the outcome that is the
//     harder one for a protocol and deletes it: a consumer that outlived
//     its visibility timeout can delete a message that another consumer is
//     working on now, and a protocol must survive that (the other outcome,
//     one more delivery, it must survive anyway). A handle whose visibility timeout is over still
//     deletes. ChangeMessageVisibility takes any handle of the message too,
//     and fails with MessageNotInflight when the message is not in flight.
//
// It returns nil (with no error) when a delete finds the message gone. The
// caller holds s.mu.
func (s *Server) resolve(q *queue, handle string, use handleUse, now time.Time) (*message, *apiError) {
	if handle == "" {
		return nil, errMissingParameter("ReceiptHandle")
	}
	ref, ok := parseReceiptHandle(handle)
	if !ok || ref.queue != q.id || ref.receipt == 0 || ref.receipt > s.ids.receipt || ref.message > s.ids.message {
		return nil, errInvalidReceiptHandle(handle)
	}
	m := q.find(ref.message)
	if m == nil {
		if use == forDelete {
			return nil, nil
		}
		return nil, errInvalidParameter("Value %s for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.", handle)
	}
	if ref.receipt > m.receipt {
		return nil, errInvalidReceiptHandle(handle)
	}
	latest := ref.receipt == m.receipt
	if q.fifo && (!latest || (use == forDelete && !m.inFlight(now))) {
		return nil, errExpiredReceiptHandle(handle)
	}
	if use == forVisibility && !m.inFlight(now) {
		return nil, newError("MessageNotInflight", "The message referred to by receipt handle %s is not in flight.", handle)
	}
	return m, nil
}

// changeVisibility makes m visible again after timeout from now. SQS caps
// one receive's total visibility at 12 hours, counted from the receive.
func (s *Server) changeVisibility(q *queue, handle string, timeout int, now time.Time) *apiError {
	if timeout < 0 || time.Duration(timeout)*time.Second > maxVisibility {
		return errInvalidParameter("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and 43200.", timeout)
	}
	m, aerr := s.resolve(q, handle, forVisibility, now)
	if aerr != nil {
		return aerr
	}
	until := now.Add(time.Duration(timeout) * time.Second)
	if until.Sub(m.receivedAt) > maxVisibility {
		return errInvalidParameter("Value %d for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds].", timeout)
	}
	m.visibleAt = until
	s.broadcast()
	return nil
}

func (s *Server) deleteByHandle(q *queue, handle string, now time.Time) *apiError {
	m, aerr := s.resolve(q, handle, forDelete, now)
	if aerr != nil || m == nil {
		return aerr
	}
	q.remove(m)
	if q.fifo {
		// The next message of its group may be receivable now.
		s.broadcast()
	}
	return nil
}

type changeMessageVisibilityRequest struct {
	QueueUrl          string
	ReceiptHandle     string
	VisibilityTimeout *int
}

func (r changeMessageVisibilityRequest) target() string { return queueNameOf(r.QueueUrl) }

func (s *Server) changeMessageVisibility(_ context.Context, req *changeMessageVisibilityRequest) (empty, *apiError) {
	if req.VisibilityTimeout == nil {
		return empty{}, errMissingParameter("VisibilityTimeout")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	q, aerr := s.queueByURL(req.QueueUrl, now)
	if aerr != nil {
		return empty{}, aerr
	}
	return empty{}, s.changeVisibility(q, req.ReceiptHandle, *req.VisibilityTimeout, now)
}

type changeMessageVisibilityBatchRequest struct {
	QueueUrl string
	Entries  []struct {
		ID                string `json:"Id"`
		ReceiptHandle     string
		VisibilityTimeout *int
	}
}

func (r changeMessageVisibilityBatchRequest) target() string { return queueNameOf(r.QueueUrl) }

type batchSuccess struct {
	ID string `json:"Id"`
}

type batchResponse struct {
	Successful []batchSuccess
	Failed     []batchError
}

func (s *Server) changeMessageVisibilityBatch(_ context.Context, req *changeMessageVisibilityBatchRequest) (*batchResponse, *apiError) {
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
	out := &batchResponse{Successful: []batchSuccess{}, Failed: []batchError{}}
	for _, e := range req.Entries {
		timeout := 0
		if e.VisibilityTimeout != nil {
			timeout = *e.VisibilityTimeout
		}
		if aerr := s.changeVisibility(q, e.ReceiptHandle, timeout, now); aerr != nil {
			out.Failed = append(out.Failed, failed(e.ID, aerr))
			continue
		}
		out.Successful = append(out.Successful, batchSuccess{ID: e.ID})
	}
	return out, nil
}

type deleteMessageRequest struct {
	QueueUrl      string
	ReceiptHandle string
}

func (r deleteMessageRequest) target() string { return queueNameOf(r.QueueUrl) }

func (s *Server) deleteMessage(_ context.Context, req *deleteMessageRequest) (empty, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	q, aerr := s.queueByURL(req.QueueUrl, now)
	if aerr != nil {
		return empty{}, aerr
	}
	return empty{}, s.deleteByHandle(q, req.ReceiptHandle, now)
}

type deleteMessageBatchRequest struct {
	QueueUrl string
	Entries  []struct {
		ID            string `json:"Id"`
		ReceiptHandle string
	}
}

func (r deleteMessageBatchRequest) target() string { return queueNameOf(r.QueueUrl) }

func (s *Server) deleteMessageBatch(_ context.Context, req *deleteMessageBatchRequest) (*batchResponse, *apiError) {
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
	out := &batchResponse{Successful: []batchSuccess{}, Failed: []batchError{}}
	for _, e := range req.Entries {
		if aerr := s.deleteByHandle(q, e.ReceiptHandle, now); aerr != nil {
			out.Failed = append(out.Failed, failed(e.ID, aerr))
			continue
		}
		out.Successful = append(out.Successful, batchSuccess{ID: e.ID})
	}
	return out, nil
}

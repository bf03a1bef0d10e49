package memsqs

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"time"
)

// redrivePolicy is a queue's RedrivePolicy.
type redrivePolicy struct {
	target      string // dead-letter queue ARN
	maxReceives int
	// countJSON is maxReceiveCount as the policy gave it: AWS documents
	// a string ("5") and tools also send a number (5); the policy is
	// returned in the form it was set, which Sluice's readers accept both of.
	countJSON string
}

func (p *redrivePolicy) String() string {
	target, _ := json.Marshal(p.target)
	return `{"deadLetterTargetArn":` + string(target) + `,"maxReceiveCount":` + p.countJSON + `}`
}

// parseRedrivePolicy validates a RedrivePolicy for a queue of the given
// kind; "" removes the policy (nil). The caller holds s.mu: the target
// must exist and be of the same kind (FIFO with FIFO, standard with
// standard), as SQS checks.
func (s *Server) parseRedrivePolicy(fifo bool, value string) (*redrivePolicy, *apiError) {
	if value == "" {
		return nil, nil
	}
	invalid := func(reason string) *apiError {
		return errInvalidParameter("Value %s for parameter RedrivePolicy is invalid. Reason: %s", value, reason)
	}
	var raw struct {
		DeadLetterTargetArn *string         `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(value), &raw); err != nil {
		return nil, invalid("Redrive policy is not a valid JSON map.")
	}
	if raw.DeadLetterTargetArn == nil || raw.MaxReceiveCount == nil {
		return nil, invalid("Redrive policy must contain deadLetterTargetArn and maxReceiveCount.")
	}
	count := string(raw.MaxReceiveCount)
	n, err := strconv.Atoi(strings.Trim(count, `"`))
	if err != nil || n < 1 || n > 1000 {
		return nil, invalid("Invalid value for maxReceiveCount: " + count + ", valid values are from 1 to 1000 both inclusive.")
	}
	dlq := s.queueByARN(*raw.DeadLetterTargetArn)
	if dlq == nil {
		return nil, invalid("Dead letter target does not exist.")
	}
	if dlq.fifo != fifo {
		return nil, invalid("Dead-letter queue must be same type of queue as the source.")
	}
	return &redrivePolicy{target: dlq.arn, maxReceives: n, countJSON: count}, nil
}

// overReceived reports the dead-letter queue m must move to instead of
// being received again: it has been received maxReceiveCount times. nil
// when there is no policy, or its target has since been deleted (then
// the message stays and is delivered, having nowhere to go).
func (s *Server) overReceived(q *queue, m *message) *queue {
	p := q.attrs.redrive
	if p == nil || m.receives < p.maxReceives {
		return nil
	}
	dlq := s.queueByARN(p.target)
	if dlq == nil || dlq.fifo != q.fifo {
		return nil
	}
	return dlq
}

// moveToDeadLetter moves m from q to dlq, as SQS does on the receive that
// would exceed maxReceiveCount: same MessageId, body, attributes, group
// and deduplication ids and SentTimestamp; the receive count restarts and
// the message is visible at once. A standard queue's message keeps its
// enqueue time (so its retention is counted from its first send); a FIFO
// queue's is reset. The caller holds s.mu.
func (s *Server) moveToDeadLetter(q, dlq *queue, m *message, now time.Time) {
	q.remove(m)
	dlq.expire(now)
	s.ids.message++
	moved := *m
	moved.serial = s.ids.message
	moved.visibleAt = now
	moved.receives, moved.receipt = 0, 0
	moved.firstReceive, moved.receivedAt = time.Time{}, time.Time{}
	moved.dlqSource = q.arn
	if dlq.fifo {
		s.ids.sequence++
		moved.seq = sequenceNumber(s.ids.sequence)
		moved.enqueuedAt = now
	}
	dlq.messages = append(dlq.messages, &moved)
	s.broadcast()
}

type listDeadLetterSourceQueuesRequest struct {
	QueueUrl   string
	MaxResults *int
	NextToken  string
}

func (r listDeadLetterSourceQueuesRequest) target() string { return queueNameOf(r.QueueUrl) }

type listDeadLetterSourceQueuesResponse struct {
	QueueUrls []string `json:"queueUrls"`
	NextToken string   `json:",omitempty"`
}

func (s *Server) listDeadLetterSourceQueues(_ context.Context, req *listDeadLetterSourceQueuesRequest) (*listDeadLetterSourceQueuesResponse, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dlq, aerr := s.queueByURL(req.QueueUrl, s.now())
	if aerr != nil {
		return nil, aerr
	}
	var names []string
	for n, q := range s.queues {
		if q.attrs.redrive != nil && q.attrs.redrive.target == dlq.arn {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	urls, next, aerr := page(names, req.MaxResults, req.NextToken, s.queueURL)
	if aerr != nil {
		return nil, aerr
	}
	return &listDeadLetterSourceQueuesResponse{QueueUrls: urls, NextToken: next}, nil
}

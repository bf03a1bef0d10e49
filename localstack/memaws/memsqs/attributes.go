package memsqs

import (
	"context"
	"encoding/json"
	"strconv"
	"time"
)

// queueAttributes are a queue's settable attributes.
type queueAttributes struct {
	delay, maxSize, retention, wait, visibility int // seconds (maxSize: bytes)

	policy, redriveAllow string
	redrive              *redrivePolicy

	kmsKey       string
	kmsReuse     int
	sseSQS       bool
	contentDedup bool
	dedupScope   string // "queue" or "messageGroup"
	throughput   string // "perQueue" or "perMessageGroupId"
}

// defaultAttributes are SQS's defaults, except MaximumMessageSize: SQS's
// default is now 1 MiB, but Sluice is held to the 256 KiB that its
// messages are designed for (shared/awslimits), so that is memsqs's
// default; a queue may still set up to 1 MiB.
func defaultAttributes() queueAttributes {
	return queueAttributes{
		maxSize:    256 * 1024,
		retention:  4 * 24 * 3600,
		visibility: 30,
		kmsReuse:   300,
		sseSQS:     true,
		dedupScope: "queue",
		throughput: "perQueue",
	}
}

// Attribute names as SQS spells them.
const (
	attrAll                       = "All"
	attrPolicy                    = "Policy"
	attrVisibilityTimeout         = "VisibilityTimeout"
	attrMaximumMessageSize        = "MaximumMessageSize"
	attrMessageRetentionPeriod    = "MessageRetentionPeriod"
	attrApproxMessages            = "ApproximateNumberOfMessages"
	attrApproxNotVisible          = "ApproximateNumberOfMessagesNotVisible"
	attrApproxDelayed             = "ApproximateNumberOfMessagesDelayed"
	attrCreatedTimestamp          = "CreatedTimestamp"
	attrLastModifiedTimestamp     = "LastModifiedTimestamp"
	attrQueueArn                  = "QueueArn"
	attrDelaySeconds              = "DelaySeconds"
	attrReceiveWaitTime           = "ReceiveMessageWaitTimeSeconds"
	attrRedrivePolicy             = "RedrivePolicy"
	attrRedriveAllowPolicy        = "RedriveAllowPolicy"
	attrFifoQueue                 = "FifoQueue"
	attrContentBasedDeduplication = "ContentBasedDeduplication"
	attrKmsMasterKeyID            = "KmsMasterKeyId"
	attrKmsDataKeyReusePeriod     = "KmsDataKeyReusePeriodSeconds"
	attrDeduplicationScope        = "DeduplicationScope"
	attrFifoThroughputLimit       = "FifoThroughputLimit"
	attrSqsManagedSseEnabled      = "SqsManagedSseEnabled"
)

// readableAttributes lists, in the order All returns them, every
// attribute GetQueueAttributes knows.
func readableAttributes() []string {
	return []string{
		attrQueueArn, attrApproxMessages, attrApproxNotVisible, attrApproxDelayed,
		attrCreatedTimestamp, attrLastModifiedTimestamp, attrVisibilityTimeout,
		attrMaximumMessageSize, attrMessageRetentionPeriod, attrDelaySeconds,
		attrReceiveWaitTime, attrPolicy, attrRedrivePolicy, attrRedriveAllowPolicy,
		attrKmsMasterKeyID, attrKmsDataKeyReusePeriod, attrSqsManagedSseEnabled,
		attrFifoQueue, attrContentBasedDeduplication, attrDeduplicationScope, attrFifoThroughputLimit,
	}
}

// fifoOnly reports the attributes only a FIFO queue has.
func fifoOnly(name string) bool {
	switch name {
	case attrFifoQueue, attrContentBasedDeduplication, attrDeduplicationScope, attrFifoThroughputLimit:
		return true
	}
	return false
}

// configured lists the settable attributes, for CreateQueue's comparison
// and Digest.
func configured(name string) bool {
	switch name {
	case attrQueueArn, attrApproxMessages, attrApproxNotVisible, attrApproxDelayed,
		attrCreatedTimestamp, attrLastModifiedTimestamp:
		return false
	}
	return true
}

// set validates and applies one attribute of a CreateQueue or
// SetQueueAttributes. FifoQueue is the caller's business.
func (s *Server) setAttribute(a *queueAttributes, fifo bool, name, value string) *apiError {
	if fifoOnly(name) && !fifo {
		return newError("InvalidAttributeName", "Unknown Attribute %s.", name)
	}
	seconds := func(dst *int, lo, hi int) *apiError {
		n, err := strconv.Atoi(value)
		if err != nil || n < lo || n > hi {
			return newError("InvalidAttributeValue", "Invalid value for the parameter %s: %q is not an integer from %d to %d.", name, value, lo, hi)
		}
		*dst = n
		return nil
	}
	boolean := func(dst *bool) *apiError {
		switch value {
		case "true":
			*dst = true
		case "false":
			*dst = false
		default:
			return newError("InvalidAttributeValue", "Invalid value for the parameter %s: %q is neither true nor false.", name, value)
		}
		return nil
	}
	oneOf := func(dst *string, options ...string) *apiError {
		for _, o := range options {
			if value == o {
				*dst = value
				return nil
			}
		}
		return newError("InvalidAttributeValue", "Invalid value for the parameter %s: %q is not one of %q.", name, value, options)
	}
	jsonDoc := func(dst *string) *apiError {
		if value != "" && !json.Valid([]byte(value)) {
			return newError("InvalidAttributeValue", "Invalid value for the parameter %s: not a JSON document.", name)
		}
		*dst = value
		return nil
	}
	switch name {
	case attrDelaySeconds:
		return seconds(&a.delay, 0, 900)
	case attrMaximumMessageSize:
		return seconds(&a.maxSize, 1024, 1024*1024)
	case attrMessageRetentionPeriod:
		return seconds(&a.retention, 60, 14*24*3600)
	case attrReceiveWaitTime:
		return seconds(&a.wait, 0, 20)
	case attrVisibilityTimeout:
		return seconds(&a.visibility, 0, 12*3600)
	case attrKmsDataKeyReusePeriod:
		return seconds(&a.kmsReuse, 60, 24*3600)
	case attrPolicy:
		return jsonDoc(&a.policy)
	case attrRedriveAllowPolicy:
		return jsonDoc(&a.redriveAllow)
	case attrRedrivePolicy:
		p, aerr := s.parseRedrivePolicy(fifo, value)
		if aerr != nil {
			return aerr
		}
		a.redrive = p
		return nil
	case attrKmsMasterKeyID:
		a.kmsKey = value
		return nil
	case attrSqsManagedSseEnabled:
		return boolean(&a.sseSQS)
	case attrContentBasedDeduplication:
		return boolean(&a.contentDedup)
	case attrDeduplicationScope:
		return oneOf(&a.dedupScope, "messageGroup", "queue")
	case attrFifoThroughputLimit:
		return oneOf(&a.throughput, "perQueue", "perMessageGroupId")
	default:
		return newError("InvalidAttributeName", "Unknown Attribute %s.", name)
	}
}

// applyAttributes applies in (in name order, so that the first error is
// always the same) to a copy of base and checks the combination.
func (s *Server) applyAttributes(base queueAttributes, fifo bool, in map[string]string) (queueAttributes, *apiError) {
	a := base
	for _, name := range sortedKeys(in) {
		if name == attrFifoQueue {
			continue
		}
		if aerr := s.setAttribute(&a, fifo, name, in[name]); aerr != nil {
			return base, aerr
		}
	}
	if a.throughput == "perMessageGroupId" && a.dedupScope != "messageGroup" {
		return base, newError("InvalidAttributeValue",
			"Invalid value for the parameter FifoThroughputLimit: perMessageGroupId requires DeduplicationScope messageGroup.")
	}
	return a, nil
}

// attribute returns a queue attribute as GetQueueAttributes shows it; ok
// is false for one the queue does not have (a FIFO attribute of a
// standard queue, an unset policy).
func (q *queue) attribute(name string, now time.Time) (v string, ok bool) {
	a := &q.attrs
	itoa := strconv.Itoa
	switch name {
	case attrQueueArn:
		return q.arn, true
	case attrApproxMessages:
		visible, _, _ := q.counts(now)
		return itoa(visible), true
	case attrApproxNotVisible:
		_, inFlight, _ := q.counts(now)
		return itoa(inFlight), true
	case attrApproxDelayed:
		_, _, delayed := q.counts(now)
		return itoa(delayed), true
	case attrCreatedTimestamp:
		return strconv.FormatInt(q.created.Unix(), 10), true
	case attrLastModifiedTimestamp:
		return strconv.FormatInt(q.modified.Unix(), 10), true
	case attrVisibilityTimeout:
		return itoa(a.visibility), true
	case attrMaximumMessageSize:
		return itoa(a.maxSize), true
	case attrMessageRetentionPeriod:
		return itoa(a.retention), true
	case attrDelaySeconds:
		return itoa(a.delay), true
	case attrReceiveWaitTime:
		return itoa(a.wait), true
	case attrPolicy:
		return a.policy, a.policy != ""
	case attrRedriveAllowPolicy:
		return a.redriveAllow, a.redriveAllow != ""
	case attrRedrivePolicy:
		if a.redrive == nil {
			return "", false
		}
		return a.redrive.String(), true
	case attrKmsMasterKeyID:
		return a.kmsKey, a.kmsKey != ""
	case attrKmsDataKeyReusePeriod:
		return itoa(a.kmsReuse), a.kmsKey != ""
	case attrSqsManagedSseEnabled:
		return strconv.FormatBool(a.sseSQS), true
	case attrFifoQueue:
		return "true", q.fifo
	case attrContentBasedDeduplication:
		return strconv.FormatBool(a.contentDedup), q.fifo
	case attrDeduplicationScope:
		return a.dedupScope, q.fifo
	case attrFifoThroughputLimit:
		return a.throughput, q.fifo
	}
	return "", false
}

type getQueueAttributesRequest struct {
	QueueUrl       string
	AttributeNames []string
}

func (r getQueueAttributesRequest) target() string { return queueNameOf(r.QueueUrl) }

type getQueueAttributesResponse struct {
	Attributes map[string]string `json:",omitempty"`
}

func (s *Server) getQueueAttributes(_ context.Context, req *getQueueAttributesRequest) (*getQueueAttributesResponse, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	q, aerr := s.queueByURL(req.QueueUrl, now)
	if aerr != nil {
		return nil, aerr
	}
	names := req.AttributeNames
	for _, n := range names {
		if n == attrAll {
			names = readableAttributes()
			break
		}
	}
	out := map[string]string{}
	for _, n := range names {
		known := false
		for _, k := range readableAttributes() {
			known = known || k == n
		}
		if !known {
			return nil, newError("InvalidAttributeName", "Unknown Attribute %s.", n)
		}
		if v, ok := q.attribute(n, now); ok {
			out[n] = v
		}
	}
	return &getQueueAttributesResponse{Attributes: out}, nil
}

type setQueueAttributesRequest struct {
	QueueUrl   string
	Attributes map[string]string
}

func (r setQueueAttributesRequest) target() string { return queueNameOf(r.QueueUrl) }

func (s *Server) setQueueAttributes(_ context.Context, req *setQueueAttributesRequest) (empty, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	q, aerr := s.queueByURL(req.QueueUrl, now)
	if aerr != nil {
		return empty{}, aerr
	}
	if v, ok := req.Attributes[attrFifoQueue]; ok && v != strconv.FormatBool(q.fifo) {
		return empty{}, newError("InvalidAttributeValue", "Invalid value for the parameter FifoQueue: a queue's type cannot change.")
	}
	a, aerr := s.applyAttributes(q.attrs, q.fifo, req.Attributes)
	if aerr != nil {
		return empty{}, aerr
	}
	q.attrs = a
	q.modified = now
	// A shorter retention or delay may make a difference to a waiting poll.
	q.expire(now)
	s.broadcast()
	return empty{}, nil
}

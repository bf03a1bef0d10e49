package memsqs

import (
	"context"
	"encoding/base64"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// queue is one queue and its messages.
type queue struct {
	// id tells incarnations of one name apart, so that a receipt handle of
	// a deleted queue is not valid for its successor.
	id   uint64
	name string
	arn  string
	url  string
	fifo bool

	attrs             queueAttributes
	tags              map[string]string
	created, modified time.Time
	lastPurge         time.Time

	// messages in send order (ascending serial), which is FIFO order.
	messages []*message
	// dedup holds the deduplication ids of a FIFO queue's last 5 minutes.
	dedup map[string]dedupRecord
}

// The intervals SQS applies to queues.
const (
	reuseNameAfter = 60 * time.Second // a deleted queue's name
	purgeInterval  = 60 * time.Second // one PurgeQueue per queue
)

func (s *Server) queueURL(name string) string {
	return s.opts.Endpoint + "/" + s.opts.Account + "/" + name
}

func (s *Server) queueARN(name string) string {
	return "arn:aws:sqs:" + s.opts.Region + ":" + s.opts.Account + ":" + name
}

// queueNameOf extracts the queue name from a queue URL: the last path
// segment of .../<account>/<name>; "" when there is none.
func queueNameOf(queueURL string) string {
	_, name, _ := splitQueueURL(queueURL)
	return name
}

func splitQueueURL(queueURL string) (account, name string, ok bool) {
	u, err := url.Parse(queueURL)
	if err != nil {
		return "", "", false
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) < 2 || parts[len(parts)-1] == "" {
		return "", "", false
	}
	return parts[len(parts)-2], parts[len(parts)-1], true
}

// queueByURL finds the queue a request addresses (any host is accepted:
// only the account and the name in the path matter) and drops its expired
// messages. The caller holds s.mu.
func (s *Server) queueByURL(queueURL string, now time.Time) (*queue, *apiError) {
	if queueURL == "" {
		return nil, errMissingParameter("QueueUrl")
	}
	account, name, ok := splitQueueURL(queueURL)
	if !ok {
		return nil, newError("InvalidAddress", "The address %s is not valid for this endpoint.", queueURL)
	}
	q := s.queues[name]
	if q == nil || account != s.opts.Account {
		return nil, errQueueDoesNotExist(queueURL)
	}
	q.expire(now)
	return q, nil
}

// queueByARN finds a queue by its ARN; nil when there is none.
func (s *Server) queueByARN(arn string) *queue {
	i := strings.LastIndex(arn, ":")
	if i < 0 {
		return nil
	}
	if q := s.queues[arn[i+1:]]; q != nil && q.arn == arn {
		return q
	}
	return nil
}

// validQueueName applies SQS's rule: 1 to 80 alphanumerics, hyphens and
// underscores, a FIFO queue's name ending in ".fifo" (counted in the 80).
func validQueueName(name string, fifo bool) bool {
	base := name
	if fifo {
		var ok bool
		if base, ok = strings.CutSuffix(name, ".fifo"); !ok {
			return false
		}
	}
	return len(name) <= 80 && base != "" && strings.IndexFunc(base, func(r rune) bool {
		return !isAlnum(r) && r != '-' && r != '_'
	}) < 0
}

// expire drops the messages older than the retention period and the
// deduplication ids older than the deduplication interval.
func (q *queue) expire(now time.Time) {
	retention := time.Duration(q.attrs.retention) * time.Second
	kept := q.messages[:0]
	for _, m := range q.messages {
		if now.Sub(m.enqueuedAt) < retention {
			kept = append(kept, m)
		}
	}
	clear(q.messages[len(kept):])
	q.messages = kept
	for k, d := range q.dedup {
		if now.Sub(d.at) >= dedupInterval {
			delete(q.dedup, k)
		}
	}
}

// counts classifies the messages as ApproximateNumberOfMessages (visible),
// …NotVisible (in flight) and …Delayed.
func (q *queue) counts(now time.Time) (visible, inFlight, delayed int) {
	for _, m := range q.messages {
		switch {
		case m.inFlight(now):
			inFlight++
		case m.delayed(now):
			delayed++
		default:
			visible++
		}
	}
	return visible, inFlight, delayed
}

// find returns the message with that serial, nil if it is gone.
func (q *queue) find(serial uint64) *message {
	i := sort.Search(len(q.messages), func(i int) bool { return q.messages[i].serial >= serial })
	if i < len(q.messages) && q.messages[i].serial == serial {
		return q.messages[i]
	}
	return nil
}

func (q *queue) remove(m *message) {
	i := sort.Search(len(q.messages), func(i int) bool { return q.messages[i].serial >= m.serial })
	if i < len(q.messages) && q.messages[i] == m {
		q.messages = slices.Delete(q.messages, i, i+1)
	}
}

// nextChange is the earliest future moment a message becomes visible
// (a delay or a visibility timeout ending); zero if none will.
func (q *queue) nextChange(now time.Time) time.Time {
	var next time.Time
	for _, m := range q.messages {
		if m.visibleAt.After(now) && (next.IsZero() || m.visibleAt.Before(next)) {
			next = m.visibleAt
		}
	}
	return next
}

type createQueueRequest struct {
	QueueName  string
	Attributes map[string]string
	Tags       map[string]string `json:"tags"`
}

func (r createQueueRequest) target() string { return r.QueueName }

type queueURLResponse struct {
	QueueUrl string
}

// createQueue creates a queue, or returns the URL of an existing one when
// every attribute the request names has the value the queue has (SQS
// ignores the attributes the request does not name); otherwise
// QueueNameExists.
func (s *Server) createQueue(_ context.Context, req *createQueueRequest) (*queueURLResponse, *apiError) {
	name := req.QueueName
	if name == "" {
		return nil, errMissingParameter("QueueName")
	}
	fifo := false
	if v, ok := req.Attributes[attrFifoQueue]; ok {
		switch v {
		case "true":
			fifo = true
		case "false":
		default:
			return nil, newError("InvalidAttributeValue", "Invalid value for the parameter FifoQueue: %q is neither true nor false.", v)
		}
	}
	if !validQueueName(name, fifo) {
		if fifo {
			return nil, errInvalidParameter("The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length.")
		}
		return nil, errInvalidParameter("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length. (A FIFO queue's name ends in .fifo and needs FifoQueue=true.)")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	attrs, aerr := s.applyAttributes(defaultAttributes(), fifo, req.Attributes)
	if aerr != nil {
		return nil, aerr
	}
	if q := s.queues[name]; q != nil {
		want := &queue{fifo: fifo, attrs: attrs}
		for _, n := range sortedKeys(req.Attributes) {
			if !configured(n) {
				continue
			}
			have, _ := q.attribute(n, now)
			asked, _ := want.attribute(n, now)
			if q.fifo != fifo || have != asked {
				return nil, newError("QueueNameExists", "A queue already exists with the same name and a different value for attribute %s", n)
			}
		}
		return &queueURLResponse{QueueUrl: q.url}, nil
	}
	if t, ok := s.deleted[name]; ok && now.Sub(t) < reuseNameAfter {
		return nil, newError("QueueDeletedRecently", "You must wait 60 seconds after deleting a queue before you can create another with the same name (%s).", name)
	}
	s.ids.queue++
	q := &queue{
		id: s.ids.queue, name: name, arn: s.queueARN(name), url: s.queueURL(name), fifo: fifo,
		attrs: attrs, tags: map[string]string{}, created: now, modified: now,
		dedup: map[string]dedupRecord{},
	}
	for k, v := range req.Tags {
		q.tags[k] = v
	}
	s.queues[name] = q
	delete(s.deleted, name)
	return &queueURLResponse{QueueUrl: q.url}, nil
}

type getQueueURLRequest struct {
	QueueName              string
	QueueOwnerAWSAccountId string
}

func (r getQueueURLRequest) target() string { return r.QueueName }

func (s *Server) getQueueURL(_ context.Context, req *getQueueURLRequest) (*queueURLResponse, *apiError) {
	if req.QueueName == "" {
		return nil, errMissingParameter("QueueName")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[req.QueueName]
	if q == nil || (req.QueueOwnerAWSAccountId != "" && req.QueueOwnerAWSAccountId != s.opts.Account) {
		return nil, errQueueDoesNotExist(req.QueueName)
	}
	return &queueURLResponse{QueueUrl: q.url}, nil
}

type listQueuesRequest struct {
	QueueNamePrefix string
	MaxResults      *int
	NextToken       string
}

func (listQueuesRequest) target() string { return "" }

type listQueuesResponse struct {
	QueueUrls []string `json:",omitempty"`
	NextToken string   `json:",omitempty"`
}

// listQueues lists queues in name order: up to 1000 without MaxResults (as
// SQS does), else pages of MaxResults with a NextToken.
func (s *Server) listQueues(_ context.Context, req *listQueuesRequest) (*listQueuesResponse, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for n := range s.queues {
		if strings.HasPrefix(n, req.QueueNamePrefix) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	urls, next, aerr := page(names, req.MaxResults, req.NextToken, s.queueURL)
	if aerr != nil {
		return nil, aerr
	}
	return &listQueuesResponse{QueueUrls: urls, NextToken: next}, nil
}

// page cuts a page out of sorted names. A token is the last name of the
// previous page.
func page(names []string, maxResults *int, token string, url func(string) string) (urls []string, next string, aerr *apiError) {
	limit := 1000
	if maxResults != nil {
		if *maxResults < 1 || *maxResults > 1000 {
			return nil, "", errInvalidParameter("Value %d for parameter MaxResults is invalid. Reason: MaxResults must be an integer between 1 and 1000.", *maxResults)
		}
		limit = *maxResults
	} else if token != "" {
		return nil, "", errInvalidParameter("MaxResults is required with NextToken.")
	}
	if token != "" {
		after, err := base64.RawURLEncoding.DecodeString(token)
		if err != nil {
			return nil, "", errInvalidParameter("Invalid NextToken %q.", token)
		}
		names = names[sort.SearchStrings(names, string(after)+"\x00"):]
	}
	if len(names) > limit {
		names = names[:limit]
		if maxResults != nil {
			next = base64.RawURLEncoding.EncodeToString([]byte(names[limit-1]))
		}
	}
	for _, n := range names {
		urls = append(urls, url(n))
	}
	return urls, next, nil
}

type queueURLRequest struct {
	QueueUrl string
}

func (r queueURLRequest) target() string { return queueNameOf(r.QueueUrl) }

// deleteQueue deletes a queue and its messages at once (SQS takes up to
// 60 seconds); long polls on it end with QueueDoesNotExist.
func (s *Server) deleteQueue(_ context.Context, req *queueURLRequest) (empty, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	q, aerr := s.queueByURL(req.QueueUrl, now)
	if aerr != nil {
		return empty{}, aerr
	}
	delete(s.queues, q.name)
	s.deleted[q.name] = now
	s.broadcast()
	return empty{}, nil
}

// purgeQueue deletes every message, in flight or not, at once; SQS allows
// one purge per queue every 60 seconds. Deduplication ids stay.
func (s *Server) purgeQueue(_ context.Context, req *queueURLRequest) (empty, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	q, aerr := s.queueByURL(req.QueueUrl, now)
	if aerr != nil {
		return empty{}, aerr
	}
	if !q.lastPurge.IsZero() && now.Sub(q.lastPurge) < purgeInterval {
		return empty{}, newError("PurgeQueueInProgress", "Only one PurgeQueue operation on %s is allowed every 60 seconds.", q.name)
	}
	q.lastPurge = now
	clear(q.messages)
	q.messages = q.messages[:0]
	return empty{}, nil
}

type tagQueueRequest struct {
	QueueUrl string
	Tags     map[string]string
}

func (r tagQueueRequest) target() string { return queueNameOf(r.QueueUrl) }

func (s *Server) tagQueue(_ context.Context, req *tagQueueRequest) (empty, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, aerr := s.queueByURL(req.QueueUrl, s.now())
	if aerr != nil {
		return empty{}, aerr
	}
	for k, v := range req.Tags {
		q.tags[k] = v
	}
	return empty{}, nil
}

type untagQueueRequest struct {
	QueueUrl string
	TagKeys  []string
}

func (r untagQueueRequest) target() string { return queueNameOf(r.QueueUrl) }

func (s *Server) untagQueue(_ context.Context, req *untagQueueRequest) (empty, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, aerr := s.queueByURL(req.QueueUrl, s.now())
	if aerr != nil {
		return empty{}, aerr
	}
	for _, k := range req.TagKeys {
		delete(q.tags, k)
	}
	return empty{}, nil
}

type listQueueTagsResponse struct {
	Tags map[string]string `json:",omitempty"`
}

func (s *Server) listQueueTags(_ context.Context, req *queueURLRequest) (*listQueueTagsResponse, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, aerr := s.queueByURL(req.QueueUrl, s.now())
	if aerr != nil {
		return nil, aerr
	}
	tags := make(map[string]string, len(q.tags))
	for k, v := range q.tags {
		tags[k] = v
	}
	return &listQueueTagsResponse{Tags: tags}, nil
}

// formatMillis formats a time as SQS's message timestamps: epoch
// milliseconds.
func formatMillis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

package mems3

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"
)

// Event names S3 gives the records it sends.
const (
	eventPut                 = "ObjectCreated:Put"
	eventCopy                = "ObjectCreated:Copy"
	eventCompleteMultipart   = "ObjectCreated:CompleteMultipartUpload"
	eventDelete              = "ObjectRemoved:Delete"
	eventDeleteMarkerCreated = "ObjectRemoved:DeleteMarkerCreated"
)

// Identities in event records: requests are not authenticated, so every
// change is made by one fixed principal in one fixed account.
const (
	principalID = "AWS:AIDAMEMS3EXAMPLE"
	ownerID     = "A1MEMS3OWNEREXAMPLE"
	ownerName   = "mems3"
)

const eventTimeFormat = "2006-01-02T15:04:05.000Z"

// delivery is one message for one queue, waiting to be handed to Notify.
type delivery struct {
	arn  string
	body []byte
}

// objectEvent is a committed change of one key that may be notified.
type objectEvent struct {
	name string // e.g. "ObjectCreated:Put"
	key  string
	v    *version  // the version created or removed, or the delete marker created
	at   time.Time // when the change was committed
}

func createdEvent(name, key string, v *version, at time.Time) objectEvent {
	return objectEvent{name: name, key: key, v: v, at: at}
}

func removedEvent(name, key string, v *version, at time.Time) objectEvent {
	return objectEvent{name: name, key: key, v: v, at: at}
}

// recordEvent queues the notifications of a committed change for every
// matching queue configuration. It runs under s.mu, so the queue holds
// events in commit order; deliver hands them to Notify after unlocking.
func (s *Server) recordEvent(rq *request, b *bucket, ev objectEvent) {
	s.eventSeq++
	if s.notify == nil {
		return
	}
	seq := fmt.Sprintf("%016X", s.eventSeq)
	for _, q := range b.notification {
		if !q.wants(ev.name, ev.key) {
			continue
		}
		rec := eventRecord{
			EventVersion:      "2.1",
			EventSource:       "aws:s3",
			AWSRegion:         b.region,
			EventTime:         ev.at.UTC().Format(eventTimeFormat),
			EventName:         ev.name,
			UserIdentity:      identity{principalID},
			RequestParameters: requestParameters{sourceIP(rq)},
			ResponseElements:  responseElements{RequestID: rq.id, HostID: rq.hostID},
			S3: eventS3{
				SchemaVersion:   "1.0",
				ConfigurationID: q.id,
				Bucket:          eventBucket{Name: b.name, OwnerIdentity: identity{ownerID}, ARN: "arn:aws:s3:::" + b.name},
				Object:          eventObject{Key: eventKey(ev.key), Sequencer: seq},
			},
		}
		if ev.v.id != nullVersion {
			rec.S3.Object.VersionID = ev.v.id
		}
		if strings.HasPrefix(ev.name, "ObjectCreated:") {
			size := int64(len(ev.v.data))
			rec.S3.Object.Size = &size
			rec.S3.Object.ETag = strings.Trim(ev.v.etag, `"`)
		}
		body, err := json.Marshal(eventMessage{Records: []eventRecord{rec}})
		if err != nil {
			panic("mems3: marshal event: " + err.Error())
		}
		s.pending = append(s.pending, delivery{arn: q.arn, body: body})
		rq.queued = true
	}
}

// deliver hands every queued notification to Notify, in commit order. A
// request that queued events calls it before answering, and waits here
// while another request delivers, so by the time a write is answered its
// events have been delivered.
func (s *Server) deliver(ctx context.Context) {
	s.deliverMu.Lock()
	defer s.deliverMu.Unlock()
	for {
		s.mu.Lock()
		batch := s.pending
		s.pending = nil
		s.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		for _, d := range batch {
			if err := s.notify(ctx, d.arn, d.body); err != nil {
				s.dropped.Add(1)
			}
		}
	}
}

// sendTestEvents sends S3's s3:TestEvent to each queue of a configuration
// being put, as S3 does to validate the destinations. It returns the ARN
// of the first queue that could not take it.
func (s *Server) sendTestEvents(ctx context.Context, rq *request, queues []queueConfig) (string, error) {
	if s.notify == nil {
		return "", nil
	}
	s.deliverMu.Lock()
	defer s.deliverMu.Unlock()
	body, err := json.Marshal(testEvent{
		Service:   "Amazon S3",
		Event:     "s3:TestEvent",
		Time:      s.clock().UTC().Format(eventTimeFormat),
		Bucket:    rq.bucket,
		RequestID: rq.id,
		HostID:    rq.hostID,
	})
	if err != nil {
		panic("mems3: marshal test event: " + err.Error())
	}
	sent := map[string]bool{}
	for _, q := range queues {
		if sent[q.arn] {
			continue
		}
		sent[q.arn] = true
		if err := s.notify(ctx, q.arn, body); err != nil {
			return q.arn, err
		}
	}
	return "", nil
}

func sourceIP(rq *request) string {
	if host, _, err := net.SplitHostPort(rq.r.RemoteAddr); err == nil && host != "" {
		return host
	}
	return "127.0.0.1"
}

// eventKey encodes a key as S3 does in event records: form encoding (a
// space is '+') that leaves '/' and the characters A-Z a-z 0-9 . - _ *
// as they are, so url.QueryUnescape gives the key back.
func eventKey(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '.', c == '-', c == '_', c == '*', c == '/':
			b.WriteByte(c)
		case c == ' ':
			b.WriteByte('+')
		default:
			b.WriteString("%" + strings.ToUpper(hex.EncodeToString([]byte{c})))
		}
	}
	return b.String()
}

type eventMessage struct {
	Records []eventRecord `json:"Records"`
}

type eventRecord struct {
	EventVersion      string            `json:"eventVersion"`
	EventSource       string            `json:"eventSource"`
	AWSRegion         string            `json:"awsRegion"`
	EventTime         string            `json:"eventTime"`
	EventName         string            `json:"eventName"`
	UserIdentity      identity          `json:"userIdentity"`
	RequestParameters requestParameters `json:"requestParameters"`
	ResponseElements  responseElements  `json:"responseElements"`
	S3                eventS3           `json:"s3"`
}

type identity struct {
	PrincipalID string `json:"principalId"`
}

type requestParameters struct {
	SourceIPAddress string `json:"sourceIPAddress"`
}

type responseElements struct {
	RequestID string `json:"x-amz-request-id"`
	HostID    string `json:"x-amz-id-2"`
}

type eventS3 struct {
	SchemaVersion   string      `json:"s3SchemaVersion"`
	ConfigurationID string      `json:"configurationId"`
	Bucket          eventBucket `json:"bucket"`
	Object          eventObject `json:"object"`
}

type eventBucket struct {
	Name          string   `json:"name"`
	OwnerIdentity identity `json:"ownerIdentity"`
	ARN           string   `json:"arn"`
}

type eventObject struct {
	Key       string `json:"key"`
	Size      *int64 `json:"size,omitempty"`
	ETag      string `json:"eTag,omitempty"`
	VersionID string `json:"versionId,omitempty"`
	Sequencer string `json:"sequencer"`
}

type testEvent struct {
	Service   string `json:"Service"`
	Event     string `json:"Event"`
	Time      string `json:"Time"`
	Bucket    string `json:"Bucket"`
	RequestID string `json:"RequestId"`
	HostID    string `json:"HostId"`
}

// Package s3event decodes the S3 event notifications that arrive on the
// block-events queue, tolerating what real S3, LocalStack and moto each send.
//
// The three disagree in small ways that matter (docs/design.md §7):
//
//   - keys are URL-encoded: S3 encodes a space as '+', moto also encodes '/'
//     (quote_plus), LocalStack encodes a space as %20 (quote);
//   - moto sends no sequencer and no versionId; LocalStack sends a constant
//     sequencer;
//   - moto 5.2.1 writes eventTime without a zone ("2024-05-01T10:00:00.123456"),
//     which aws-lambda-go's events.S3Event fails to unmarshal, so this package
//     has its own record type and time parsing.
//
// Decode returns only ObjectCreated records: the planner acts on arrivals,
// and removals of our own deletes need no reaction. s3:TestEvent (sent when a
// notification configuration is set) yields no records and no error.
package s3event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"
)

// ErrMalformed is wrapped by every Decode error: the body is not an S3 event
// notification Sluice can act on. Retrying such a message cannot help.
var ErrMalformed = errors.New("malformed S3 event")

// ObjectCreated is one s3:ObjectCreated:* record.
type ObjectCreated struct {
	Bucket string
	// Key is URL-decoded: the object's real key.
	Key string
	// VersionID is empty when the sender omits it (moto, unversioned buckets).
	VersionID string
	Size      int64
	// ETag is without surrounding quotes.
	ETag string
	// Sequencer orders events of one key (hex, compare after left-padding);
	// empty when the sender omits it (moto).
	Sequencer string
	// EventName is e.g. "ObjectCreated:Put", without an "s3:" prefix.
	EventName string
	// EventTime is in UTC; a zone-less time is taken as UTC. Zero when the
	// record has none.
	EventTime time.Time
}

// envelope is the union of the bodies that may arrive: an S3 notification
// ({"Records": [...]}), S3's test event ({"Event": "s3:TestEvent"}), or an
// SNS envelope around either ({"Type": "Notification", "Message": "..."}).
type envelope struct {
	Records *[]json.RawMessage `json:"Records"`
	Event   string             `json:"Event"`
	Type    string             `json:"Type"`
	Message *string            `json:"Message"`
}

type record struct {
	EventSource string `json:"eventSource"`
	EventName   string `json:"eventName"`
	EventTime   string `json:"eventTime"`
	S3          *struct {
		Bucket struct {
			Name string `json:"name"`
		} `json:"bucket"`
		Object struct {
			Key       *string     `json:"key"`
			Size      json.Number `json:"size"`
			ETag      string      `json:"eTag"`
			VersionID string      `json:"versionId"`
			Sequencer string      `json:"sequencer"`
		} `json:"object"`
	} `json:"s3"`
}

// Decode parses an SQS message body carrying an S3 event notification and
// returns its ObjectCreated records in order. Records of other events
// (ObjectRemoved, ObjectTagging, ...) are skipped. Every error wraps
// ErrMalformed and says what was wrong.
func Decode(body []byte) ([]ObjectCreated, error) {
	return decode(body, 0)
}

// maxSNSDepth bounds SNS unwrapping: one envelope is real, more is abuse.
const maxSNSDepth = 1

func decode(body []byte, depth int) ([]ObjectCreated, error) {
	var env envelope
	if err := unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object: %w", ErrMalformed, err)
	}
	switch {
	case env.Records != nil:
		return decodeRecords(*env.Records)
	case env.Event == "s3:TestEvent":
		return nil, nil
	case env.Type == "Notification" && env.Message != nil && depth < maxSNSDepth:
		out, err := decode([]byte(*env.Message), depth+1)
		if err != nil {
			return nil, fmt.Errorf("SNS message: %w", err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: no Records (body starts %q)", ErrMalformed, prefix(body, 80))
}

func decodeRecords(raw []json.RawMessage) ([]ObjectCreated, error) {
	var out []ObjectCreated
	for i, r := range raw {
		oc, ok, err := decodeRecord(r)
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		if ok {
			out = append(out, oc)
		}
	}
	return out, nil
}

// decodeRecord returns ok=false for a well-formed record of another event.
func decodeRecord(raw json.RawMessage) (ObjectCreated, bool, error) {
	var r record
	if err := unmarshal(raw, &r); err != nil {
		return ObjectCreated{}, false, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if r.EventSource != "" && r.EventSource != "aws:s3" {
		return ObjectCreated{}, false, fmt.Errorf("%w: eventSource %q, want aws:s3", ErrMalformed, r.EventSource)
	}
	name := strings.TrimPrefix(r.EventName, "s3:")
	if name == "" {
		return ObjectCreated{}, false, fmt.Errorf("%w: no eventName", ErrMalformed)
	}
	if !strings.HasPrefix(name, "ObjectCreated:") {
		return ObjectCreated{}, false, nil
	}
	if r.S3 == nil {
		return ObjectCreated{}, false, fmt.Errorf("%w: %s without an s3 section", ErrMalformed, name)
	}
	obj := r.S3.Object
	if r.S3.Bucket.Name == "" {
		return ObjectCreated{}, false, fmt.Errorf("%w: %s without a bucket name", ErrMalformed, name)
	}
	if obj.Key == nil || *obj.Key == "" {
		return ObjectCreated{}, false, fmt.Errorf("%w: %s in bucket %q without an object key", ErrMalformed, name, r.S3.Bucket.Name)
	}
	key, err := url.QueryUnescape(*obj.Key)
	if err != nil {
		return ObjectCreated{}, false, fmt.Errorf("%w: key %q: %w", ErrMalformed, *obj.Key, err)
	}
	var size int64
	if obj.Size != "" {
		if size, err = obj.Size.Int64(); err != nil || size < 0 {
			return ObjectCreated{}, false, fmt.Errorf("%w: key %q: size %q is not a byte count", ErrMalformed, key, obj.Size)
		}
	}
	t, err := parseTime(r.EventTime)
	if err != nil {
		return ObjectCreated{}, false, fmt.Errorf("%w: key %q: %w", ErrMalformed, key, err)
	}
	return ObjectCreated{
		Bucket:    r.S3.Bucket.Name,
		Key:       key,
		VersionID: obj.VersionID,
		Size:      size,
		ETag:      strings.Trim(obj.ETag, `"`),
		Sequencer: obj.Sequencer,
		EventName: name,
		EventTime: t,
	}, true, nil
}

// timeLayouts are tried in order: RFC 3339 with a zone (S3, LocalStack),
// then zone-less (moto 5.2.1), taken as UTC.
var timeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999",
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range timeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("eventTime %q is neither RFC 3339 nor zone-less ISO 8601", s)
}

// unmarshal decodes exactly one JSON value, keeping numbers as json.Number.
func unmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

func prefix(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

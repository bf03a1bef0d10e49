package mems3

import (
	"context"
	"encoding/xml"
	"fmt"
	"strings"
)

// queueConfig is one QueueConfiguration of a bucket's notification
// configuration.
type queueConfig struct {
	id     string
	arn    string
	events []string // as configured, e.g. "s3:ObjectCreated:*"
	rules  []filterRule
}

// filterRule is an S3Key filter rule; name is "Prefix" or "Suffix", the
// spelling S3 answers with whatever case the request used.
type filterRule struct{ name, value string }

func (q queueConfig) filter(name string) string {
	for _, r := range q.rules {
		if r.name == name {
			return r.value
		}
	}
	return ""
}

// wants says whether a change named event (e.g. "ObjectCreated:Put") of
// key is notified to this queue.
func (q queueConfig) wants(event, key string) bool {
	if !strings.HasPrefix(key, q.filter("Prefix")) || !strings.HasSuffix(key, q.filter("Suffix")) {
		return false
	}
	for _, e := range q.events {
		if eventMatches(strings.TrimPrefix(e, "s3:"), event) {
			return true
		}
	}
	return false
}

// eventMatches matches a configured event type ("ObjectCreated:*" or
// "ObjectCreated:Put") with an event name.
func eventMatches(configured, event string) bool {
	if group, ok := strings.CutSuffix(configured, "*"); ok {
		return strings.HasPrefix(event, group)
	}
	return configured == event
}

// notificationEvents are the event types S3 accepts in a configuration.
var notificationEvents = map[string]bool{
	"s3:ObjectCreated:*": true, "s3:ObjectCreated:Put": true, "s3:ObjectCreated:Post": true,
	"s3:ObjectCreated:Copy": true, "s3:ObjectCreated:CompleteMultipartUpload": true,
	"s3:ObjectRemoved:*": true, "s3:ObjectRemoved:Delete": true, "s3:ObjectRemoved:DeleteMarkerCreated": true,
	"s3:ObjectRestore:*": true, "s3:ObjectRestore:Post": true, "s3:ObjectRestore:Completed": true,
	"s3:ObjectRestore:Delete": true, "s3:ReducedRedundancyLostObject": true,
	"s3:Replication:*": true, "s3:Replication:OperationFailedReplication": true,
	"s3:Replication:OperationMissedThreshold": true, "s3:Replication:OperationReplicatedAfterThreshold": true,
	"s3:Replication:OperationNotTracked": true,
	"s3:LifecycleExpiration:*":           true, "s3:LifecycleExpiration:Delete": true,
	"s3:LifecycleExpiration:DeleteMarkerCreated": true, "s3:LifecycleTransition": true,
	"s3:IntelligentTiering": true, "s3:ObjectTagging:*": true, "s3:ObjectTagging:Put": true,
	"s3:ObjectTagging:Delete": true, "s3:ObjectAcl:Put": true,
}

type notificationIn struct {
	Queues []struct {
		ID     string   `xml:"Id"`
		Queue  string   `xml:"Queue"`
		Events []string `xml:"Event"`
		Filter *struct {
			Rules []struct {
				Name  string `xml:"Name"`
				Value string `xml:"Value"`
			} `xml:"S3Key>FilterRule"`
		} `xml:"Filter"`
	} `xml:"QueueConfiguration"`
	Topics      []struct{} `xml:"TopicConfiguration"`
	Lambdas     []struct{} `xml:"CloudFunctionConfiguration"`
	EventBridge *struct{}  `xml:"EventBridgeConfiguration"`
}

type notificationOut struct {
	XMLName xml.Name   `xml:"http://s3.amazonaws.com/doc/2006-03-01/ NotificationConfiguration"`
	Queues  []queueOut `xml:"QueueConfiguration"`
}

type queueOut struct {
	ID     string      `xml:"Id"`
	Queue  string      `xml:"Queue"`
	Events []string    `xml:"Event"`
	Rules  []filterOut `xml:"Filter>S3Key>FilterRule,omitempty"`
}

type filterOut struct {
	Name  string `xml:"Name"`
	Value string `xml:"Value"`
}

// parseNotification reads and validates a NotificationConfiguration as S3
// does: known events, well-formed queue ARNs, at most one prefix and one
// suffix rule, and no two configurations that could both match a key for
// a common event type.
func parseNotification(body []byte) ([]queueConfig, *s3Error) {
	var in notificationIn
	if err := xml.Unmarshal(body, &in); err != nil {
		return nil, errMalformedXML()
	}
	if len(in.Topics) > 0 || len(in.Lambdas) > 0 || in.EventBridge != nil {
		return nil, errNotImplemented("notifications to SNS topics, Lambda functions or EventBridge")
	}
	var out []queueConfig
	for i, q := range in.Queues {
		c := queueConfig{id: q.ID, arn: q.Queue, events: q.Events}
		if c.id == "" {
			c.id = fmt.Sprintf("mems3-notification-%d", i+1)
		}
		if parts := strings.Split(c.arn, ":"); len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[5] == "" {
			return nil, errInvalidArgument(c.arn, c.arn, "The ARN is not well formed")
		}
		if len(c.events) == 0 {
			return nil, errInvalidArgument("Event", "", "A notification configuration must name at least one event")
		}
		for _, e := range c.events {
			if !notificationEvents[e] {
				return nil, errInvalidArgument(e, e, "The event is not supported for notifications")
			}
		}
		if q.Filter != nil {
			for _, r := range q.Filter.Rules {
				var name string
				switch strings.ToLower(r.Name) {
				case "prefix":
					name = "Prefix"
				case "suffix":
					name = "Suffix"
				default:
					return nil, errInvalidArgument("FilterRule", r.Name, "filter rule name must be either prefix or suffix")
				}
				for _, have := range c.rules {
					if have.name == name {
						return nil, errInvalidArgument("FilterRule", r.Name,
							"Cannot specify more than one "+strings.ToLower(name)+" rule in a filter.")
					}
				}
				c.rules = append(c.rules, filterRule{name: name, value: r.Value})
			}
		}
		for _, prev := range out {
			if overlap(prev, c) {
				return nil, errInvalidArgument("Event", strings.Join(c.events, ","),
					"Configurations overlap. Configurations on the same bucket cannot share a common event type.")
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// overlap says whether two configurations share an event type and could
// both match one key.
func overlap(a, b queueConfig) bool {
	shared := false
	for _, x := range a.events {
		for _, y := range b.events {
			x, y := strings.TrimPrefix(x, "s3:"), strings.TrimPrefix(y, "s3:")
			if eventMatches(x, y) || eventMatches(y, x) {
				shared = true
			}
		}
	}
	pa, pb := a.filter("Prefix"), b.filter("Prefix")
	sa, sb := a.filter("Suffix"), b.filter("Suffix")
	return shared &&
		(strings.HasPrefix(pa, pb) || strings.HasPrefix(pb, pa)) &&
		(strings.HasSuffix(sa, sb) || strings.HasSuffix(sb, sa))
}

func (s *Server) putBucketNotification(rq *request) (*response, *s3Error) {
	body, trailers, err := readPayload(rq.r)
	if err != nil {
		return nil, err
	}
	if err := verifyPayload(rq.r.Header, trailers, body); err != nil {
		return nil, err
	}
	queues, err := parseNotification(body)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	_, err = s.bucket(rq.bucket)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if arn, nerr := s.sendTestEvents(context.WithoutCancel(rq.r.Context()), rq, queues); nerr != nil &&
		!strings.EqualFold(rq.r.Header.Get("X-Amz-Skip-Destination-Validation"), "true") {
		return nil, errInvalidArgument(arn, "Permissions on the destination queue do not allow S3 to publish notifications from this bucket",
			"Unable to validate the following destination configurations: "+nerr.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	b.notification = queues
	return newResponse(), nil
}

func (s *Server) getBucketNotification(rq *request) (*response, *s3Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.bucket(rq.bucket)
	if err != nil {
		return nil, err
	}
	out := notificationOut{}
	for _, q := range b.notification {
		qo := queueOut{ID: q.id, Queue: q.arn, Events: q.events}
		for _, r := range q.rules {
			qo.Rules = append(qo.Rules, filterOut{Name: r.name, Value: r.value})
		}
		out.Queues = append(out.Queues, qo)
	}
	return xmlResponse(out), nil
}

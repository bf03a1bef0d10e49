package eventsource

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

func TestSettle(t *testing.T) {
	// msg builds a record "<id>" in group "<id's first letter>".
	msg := func(id string) events.SQSMessage {
		return events.SQSMessage{MessageId: id, Attributes: map[string]string{"MessageGroupId": id[:1]}}
	}
	batch := []events.SQSMessage{msg("a1"), msg("b1"), msg("a2"), msg("a3"), msg("b2"), msg("c1")}
	fail := func(ids ...string) events.SQSEventResponse {
		var r events.SQSEventResponse
		for _, id := range ids {
			r.BatchItemFailures = append(r.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
		}
		return r
	}
	tests := []struct {
		name string
		resp events.SQSEventResponse
		err  error
		fifo bool
		keep []string
		why  string
	}{
		{name: "all succeed", keep: nil},
		{name: "handler error fails all", err: errors.New("boom"), keep: []string{"a1", "a2", "a3", "b1", "b2", "c1"}, why: "handler error"},
		{name: "standard: only reported", resp: fail("a2"), keep: []string{"a2"}, why: "reported"},
		{name: "fifo: reported and the rest of its group", resp: fail("a2"), fifo: true, keep: []string{"a2", "a3"}, why: "later messages"},
		{name: "fifo: first of group keeps whole group", resp: fail("b1"), fifo: true, keep: []string{"b1", "b2"}, why: "later messages"},
		{name: "fifo: last of group keeps only it", resp: fail("a3", "c1"), fifo: true, keep: []string{"a3", "c1"}, why: "reported"},
		{name: "unknown identifier fails all", resp: fail("zz"), keep: []string{"a1", "a2", "a3", "b1", "b2", "c1"}, why: "names no message"},
		{name: "empty identifier fails all", resp: fail(""), fifo: true, keep: []string{"a1", "a2", "a3", "b1", "b2", "c1"}, why: "names no message"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			keep, why := settle(batch, tc.resp, tc.err, tc.fifo)
			var got []string
			for id := range keep {
				got = append(got, id)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.keep) {
				t.Errorf("kept %v, want %v", got, tc.keep)
			}
			if !strings.Contains(why, tc.why) {
				t.Errorf("reason %q does not say %q", why, tc.why)
			}
		})
	}
}

func TestRunRejectsMisconfiguration(t *testing.T) {
	c := sqs.New(sqs.Options{Region: "us-east-1"})
	h := func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
		return events.SQSEventResponse{}, nil
	}
	ok := Source{Name: "s", QueueURL: "http://q", Handler: h}
	with := func(f func(*Source)) Source { s := ok; f(&s); return s }
	tests := []struct {
		name    string
		sources []Source
		timer   string
		want    string
	}{
		{"no name", []Source{with(func(s *Source) { s.Name = "" })}, "", "has no name"},
		{"duplicate", []Source{ok, ok}, "", "two sources"},
		{"no URL", []Source{with(func(s *Source) { s.QueueURL = "" })}, "", "no queue URL"},
		{"no handler", []Source{with(func(s *Source) { s.Handler = nil })}, "", "no handler"},
		{"batch too big", []Source{with(func(s *Source) { s.BatchSize = 11 })}, "", "batch size 11"},
		{"negative concurrency", []Source{with(func(s *Source) { s.MaxConcurrency = -1 })}, "", "max concurrency"},
		{"timer named like a source", []Source{ok}, "s", "timer name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := New(c, nil, tc.sources...)
			if tc.timer != "" {
				r.Every(tc.timer, time.Second, func(context.Context) error { return nil })
			}
			err := r.Run(t.Context())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

package testworld

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sluice-dev/sluice/shared/messages"
)

// Mailbox is an in-memory SQS for step-by-step replays: every message the
// handlers send is kept, in send order, for the test to deliver — or to hold
// back, duplicate and reorder. Like a FIFO queue it drops a message whose
// deduplication id it has seen before.
type Mailbox struct {
	Queues messages.Queues

	mu    sync.Mutex
	mail  []Mail
	seen  map[string]bool
	count int
}

// Mail is one sent message.
type Mail struct {
	Seq   int
	Queue string // "jobs", "cleaner", "ops", "plan"
	Group string
	Body  string
	// Msg is the decoded message: messages.Job, CleanerNote, BlockOp or
	// PlanRequest.
	Msg any
}

// NewMailbox returns a mailbox standing in for queues (their URLs only
// tell the queues apart).
func NewMailbox(q messages.Queues) *Mailbox {
	return &Mailbox{Queues: q, seen: map[string]bool{}}
}

// SendMessage implements messages.SQS.
func (m *Mailbox) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d := aws.ToString(in.MessageDeduplicationId); d != "" {
		if m.seen[d] {
			return &sqs.SendMessageOutput{MessageId: aws.String("dup-" + d)}, nil
		}
		m.seen[d] = true
	}
	q := map[string]string{m.Queues.CompactionJobs: "jobs", m.Queues.CleanerEvents: "cleaner",
		m.Queues.BlockOps: "ops", m.Queues.BlockEvents: "plan"}[aws.ToString(in.QueueUrl)]
	if q == "" {
		return nil, fmt.Errorf("mailbox: unknown queue %q", aws.ToString(in.QueueUrl))
	}
	msg, err := messages.Decode(aws.ToString(in.MessageBody))
	if err != nil {
		return nil, fmt.Errorf("mailbox: %w", err)
	}
	m.count++
	m.mail = append(m.mail, Mail{Seq: m.count, Queue: q, Group: aws.ToString(in.MessageGroupId), Body: aws.ToString(in.MessageBody), Msg: msg})
	return &sqs.SendMessageOutput{MessageId: aws.String(fmt.Sprint(m.count))}, nil
}

// Take removes and returns, in send order, every message keep selects.
func (m *Mailbox) Take(keep func(Mail) bool) []Mail {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out, rest []Mail
	for _, x := range m.mail {
		if keep == nil || keep(x) {
			out = append(out, x)
		} else {
			rest = append(rest, x)
		}
	}
	m.mail = rest
	return out
}

// Peek returns, without removing, every message keep selects.
func (m *Mailbox) Peek(keep func(Mail) bool) []Mail {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Mail
	for _, x := range m.mail {
		if keep == nil || keep(x) {
			out = append(out, x)
		}
	}
	return out
}

// Put puts messages back (a delayed delivery, a duplicate), after the
// others.
func (m *Mailbox) Put(mail ...Mail) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mail = append(m.mail, mail...)
}

// Len is how many messages wait.
func (m *Mailbox) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mail)
}

// MailboxState is everything a Mailbox holds: its messages, the
// deduplication ids it has seen and its send count.
type MailboxState struct {
	Mail  []Mail
	Seen  map[string]bool
	Count int
}

// State copies the mailbox's contents (the explorer saves it with the
// rest of a state, to come back to it).
func (m *Mailbox) State() MailboxState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return MailboxState{Mail: append([]Mail(nil), m.mail...), Seen: maps.Clone(m.seen), Count: m.count}
}

// Restore makes st the mailbox's contents.
func (m *Mailbox) Restore(st MailboxState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mail = append([]Mail(nil), st.Mail...)
	m.seen = maps.Clone(st.Seen)
	if m.seen == nil {
		m.seen = map[string]bool{}
	}
	m.count = st.Count
}

package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/s3event"
	"github.com/sluice-dev/sluice/shared/spec"
)

func init() {
	register(&command{
		name:    "replay-dlq",
		summary: "move dead-lettered messages back to their queue, showing what moved",
		usage:   "QUEUE [--dry-run] [--max N]",
		aws:     true,
		help: `Moves every message in QUEUE's dead-letter queue back to QUEUE, so the
pipeline tries it again, and prints one line per message. QUEUE is a queue's
role — block-events, compaction-jobs, cleaner-events or block-ops — or a
queue URL or name (of the queue or of its DLQ).

FIFO messages keep their MessageGroupId, so per-block and per-group order
holds, and get a fresh deduplication id (replay-<message id>), so SQS does
not drop them as duplicates of their first delivery. Every Sluice handler is
idempotent and fenced, so a replayed message that is no longer current is
acknowledged and dropped, never acted on twice.

A message reaches a DLQ after failing five times: read the function's logs
for it first ('sluice status' shows DLQ depths), fix the cause, then replay.
--dry-run lists what would move and leaves every message where it is.`,
		setup: func(fs *flag.FlagSet) runFunc {
			dry := fs.Bool("dry-run", false, "list the messages, move nothing")
			maxN := fs.Int("max", 0, "move at most N messages (0 = all)")
			return func(ctx context.Context, e *Env, args []string) error {
				if len(args) != 1 {
					return usagef("want exactly one QUEUE (block-events, compaction-jobs, cleaner-events or block-ops), got %d arguments", len(args))
				}
				cfg, err := e.Config(false)
				if err != nil {
					return err
				}
				src, err := resolveQueueArg(args[0], func(id spec.QueueID) string {
					return queueURL(cfg, id)
				})
				if err != nil {
					return err
				}
				c, err := e.Clients(ctx)
				if err != nil {
					return err
				}
				res, err := ReplayDLQ(ctx, c.SQS, src, ReplayOptions{DryRun: *dry, Max: *maxN})
				if err != nil {
					return err
				}
				res.Render(e.Stdout)
				return nil
			}
		},
	})
}

// QueueRef names a queue the user gave: a URL, or a name to look up.
type QueueRef struct {
	Role string
	URL  string
	Name string
}

// resolveQueueArg maps a role, URL or name to a QueueRef.
func resolveQueueArg(arg string, urlOf func(spec.QueueID) string) (QueueRef, error) {
	for _, id := range queueOrder {
		if arg == string(id) || arg == string(id)+"-dlq" {
			u := urlOf(id)
			if u == "" {
				return QueueRef{}, usagef("queue %s: %s is not set (or use the queue's URL)", id, spec.QueueURLEnv(id))
			}
			return QueueRef{Role: string(id), URL: u}, nil
		}
	}
	if strings.HasPrefix(arg, "http://") || strings.HasPrefix(arg, "https://") {
		return QueueRef{URL: arg}, nil
	}
	if arg == "" || strings.ContainsAny(arg, " /") {
		return QueueRef{}, usagef("%q is not a queue role, URL or name", arg)
	}
	return QueueRef{Name: arg}, nil
}

// ReplayOptions tune ReplayDLQ.
type ReplayOptions struct {
	DryRun bool
	// Max bounds the messages moved (0 = all).
	Max int
}

// ReplayedMessage is one message moved (or, in a dry run, that would be).
type ReplayedMessage struct {
	MessageID string `json:"messageId"`
	Group     string `json:"group,omitempty"`
	Receives  string `json:"receives"`
	What      string `json:"what"`
	NewID     string `json:"newMessageId,omitempty"`
}

// ReplayResult is the outcome of ReplayDLQ.
type ReplayResult struct {
	Queue    string            `json:"queue"`
	QueueURL string            `json:"queueUrl"`
	DLQ      string            `json:"dlq"`
	DLQURL   string            `json:"dlqUrl"`
	DryRun   bool              `json:"dryRun"`
	Messages []ReplayedMessage `json:"messages"`
}

// Render prints what moved.
func (r *ReplayResult) Render(w io.Writer) {
	verb := "moved"
	if r.DryRun {
		verb = "would move"
	}
	if len(r.Messages) == 0 {
		fmt.Fprintf(w, "%s is empty: nothing to replay to %s\n", r.DLQ, r.Queue)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MESSAGE\tGROUP\tRECEIVES\tWHAT")
	for _, m := range r.Messages {
		g := m.Group
		if g == "" {
			g = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.MessageID, g, m.Receives, m.What)
	}
	tw.Flush()
	fmt.Fprintf(w, "%s %d message(s) from %s back to %s\n", verb, len(r.Messages), r.DLQ, r.Queue)
	if r.DryRun {
		fmt.Fprintln(w, "(dry run: every message is still in the dead-letter queue)")
	}
}

// ReplayDLQ moves the messages of src's dead-letter queue back to src.
func ReplayDLQ(ctx context.Context, q SQSAPI, src QueueRef, opts ReplayOptions) (*ReplayResult, error) {
	srcURL, dlqURL, err := queuePair(ctx, q, src)
	if err != nil {
		return nil, err
	}
	res := &ReplayResult{Queue: nameOfURL(srcURL), QueueURL: srcURL, DLQ: nameOfURL(dlqURL), DLQURL: dlqURL,
		DryRun: opts.DryRun, Messages: []ReplayedMessage{}}
	fifo := strings.HasSuffix(srcURL, ".fifo")
	var held []string // receipt handles to make visible again (dry run)
	defer func() {
		for _, h := range held {
			_, _ = q.ChangeMessageVisibility(context.WithoutCancel(ctx), &sqs.ChangeMessageVisibilityInput{
				QueueUrl: aws.String(dlqURL), ReceiptHandle: aws.String(h), VisibilityTimeout: 0})
		}
	}()
	for opts.Max == 0 || len(res.Messages) < opts.Max {
		n := int32(10)
		if opts.Max > 0 {
			n = int32(min(10, opts.Max-len(res.Messages)))
		}
		out, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(dlqURL), MaxNumberOfMessages: n, WaitTimeSeconds: 1, VisibilityTimeout: 120,
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			return res, fmt.Errorf("receive from %s: %w", res.DLQ, err)
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			rm := ReplayedMessage{
				MessageID: aws.ToString(m.MessageId),
				Group:     m.Attributes[string(sqstypes.MessageSystemAttributeNameMessageGroupId)],
				Receives:  m.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)],
				What:      describeMessage(aws.ToString(m.Body)),
			}
			if opts.DryRun {
				held = append(held, aws.ToString(m.ReceiptHandle))
				res.Messages = append(res.Messages, rm)
				continue
			}
			in := &sqs.SendMessageInput{QueueUrl: aws.String(srcURL), MessageBody: m.Body, MessageAttributes: m.MessageAttributes}
			if fifo {
				group := rm.Group
				if group == "" {
					group = "replay"
				}
				in.MessageGroupId = aws.String(group)
				in.MessageDeduplicationId = aws.String("replay-" + rm.MessageID)
			}
			sent, err := q.SendMessage(ctx, in)
			if err != nil {
				return res, fmt.Errorf("send message %s back to %s: %w", rm.MessageID, res.Queue, err)
			}
			rm.NewID = aws.ToString(sent.MessageId)
			if _, err := q.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(dlqURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
				return res, fmt.Errorf("message %s is back in %s but still in %s (it will be replayed twice; handlers are idempotent): %w",
					rm.MessageID, res.Queue, res.DLQ, err)
			}
			res.Messages = append(res.Messages, rm)
		}
	}
	return res, nil
}

// queuePair finds a queue and its DLQ from what the user named.
func queuePair(ctx context.Context, q SQSAPI, ref QueueRef) (src, dlq string, err error) {
	url := ref.URL
	if url == "" {
		out, err := q.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(ref.Name)})
		if err != nil {
			return "", "", fmt.Errorf("queue %s: %w", ref.Name, err)
		}
		url = aws.ToString(out.QueueUrl)
	}
	dlq, _, err = redriveOf(ctx, q, url)
	if err != nil {
		return "", "", err
	}
	if dlq != "" {
		return url, dlq, nil
	}
	// No redrive policy: url may be the DLQ itself; its source is the
	// queue of the same name without "-dlq".
	name := nameOfURL(url)
	base := strings.TrimSuffix(name, ".fifo")
	if !strings.HasSuffix(base, "-dlq") {
		return "", "", refusef("queue %s has no dead-letter queue", name)
	}
	srcName := strings.TrimSuffix(base, "-dlq")
	if strings.HasSuffix(name, ".fifo") {
		srcName += ".fifo"
	}
	out, err := q.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(srcName)})
	if err != nil {
		return "", "", fmt.Errorf("source queue %s of %s: %w", srcName, name, err)
	}
	return aws.ToString(out.QueueUrl), url, nil
}

func redriveOf(ctx context.Context, q SQSAPI, url string) (dlqURL, dlqName string, err error) {
	attrs, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameRedrivePolicy}})
	if err != nil {
		return "", "", fmt.Errorf("queue %s: %w", nameOfURL(url), err)
	}
	return deadLetterQueue(ctx, q, attrs.Attributes[string(sqstypes.QueueAttributeNameRedrivePolicy)])
}

func nameOfURL(url string) string {
	return url[strings.LastIndex(url, "/")+1:]
}

// describeMessage says in a few words what a queue message asks for.
func describeMessage(body string) string {
	m, err := messages.Decode(body)
	if err == nil {
		switch v := m.(type) {
		case messages.Job:
			return fmt.Sprintf("compaction job %s/%s@v%d/p%d", v.Tenant, v.Group, v.Version, v.Partition)
		case messages.CleanerNote:
			return fmt.Sprintf("cleaner note %s/%s (%s)", v.Tenant, v.Group, v.Why)
		case messages.BlockOp:
			return fmt.Sprintf("%s %s/%s gen %d", v.Op, v.Tenant, v.Block, v.Gen)
		case messages.PlanRequest:
			return fmt.Sprintf("plan %s/%s (%s)", v.Tenant, v.Group, v.Why)
		case messages.Sweep:
			return "sweep"
		}
	}
	if objs, err := s3event.Decode([]byte(body)); err == nil && len(objs) > 0 {
		keys := make([]string, 0, len(objs))
		for _, o := range objs {
			keys = append(keys, o.Key)
		}
		return "S3 event " + strings.Join(keys, ", ")
	} else if err == nil {
		return "S3 test event"
	}
	s := oneLine(body)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return "unrecognised: " + s
}

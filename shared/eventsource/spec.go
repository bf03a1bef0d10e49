package eventsource

import (
	"fmt"

	"github.com/sluice-dev/sluice/localstack/provision"
	"github.com/sluice-dev/sluice/shared/spec"
)

// Sources builds one Source per handler from a deployment, with the batch
// size, concurrency, FIFO-ness and timeout that the spec gives the queue and
// its consumer, so the local pipeline runs as the deployed one would.
// Named after the queue id; a queue without a handler is not polled.
func Sources(d provision.Deployment, handlers map[spec.QueueID]Handler) ([]Source, error) {
	for id := range handlers {
		if _, ok := d.QueueURLs[id]; !ok {
			return nil, fmt.Errorf("runner: deployment %s has no queue %s", d.Resources.Prefix, id)
		}
	}
	var out []Source
	for _, q := range d.Resources.Queues {
		h, ok := handlers[q.ID]
		if !ok {
			continue
		}
		out = append(out, Source{
			Name:           string(q.ID),
			QueueURL:       d.QueueURLs[q.ID],
			FIFO:           q.FIFO,
			BatchSize:      q.BatchSize,
			MaxConcurrency: q.MaxConcurrency,
			Timeout:        d.Resources.Function(q.Consumer).Timeout,
			Handler:        h,
		})
	}
	return out, nil
}

package provision

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sluice-dev/sluice/shared/spec"
)

// DeploymentFromEnv rebuilds a Deployment from the variables that Env
// writes (and that `sluice-provision` prints), so a shell, `make demo` or a
// test process finds what another process provisioned.
//
// The environment carries physical names only. The resource prefix is
// recovered from the table name (spec: "<prefix>-state"), Resources is
// spec.Default of that prefix (durations may differ from what was
// provisioned), and DLQ URLs follow spec.DLQName from the queue URLs.
func DeploymentFromEnv() (Deployment, error) {
	return deploymentFrom(os.Getenv)
}

// ErrMissingEnv is wrapped when DeploymentFromEnv lacks a variable.
var ErrMissingEnv = errors.New("environment variable not set")

func deploymentFrom(getenv func(string) string) (Deployment, error) {
	need := func(name string) (string, error) {
		v := getenv(name)
		if v == "" {
			return "", fmt.Errorf("deployment from environment: %s: %w (run `eval $(bin/sluice-provision)` or `make provision`)", name, ErrMissingEnv)
		}
		return v, nil
	}
	table, err := need(spec.EnvTable)
	if err != nil {
		return Deployment{}, err
	}
	bucket, err := need(spec.EnvBucket)
	if err != nil {
		return Deployment{}, err
	}
	prefix, ok := strings.CutSuffix(table, "-state")
	if !ok || prefix == "" {
		return Deployment{}, fmt.Errorf("deployment from environment: %s=%q does not end in -state", spec.EnvTable, table)
	}
	r := spec.Default(prefix)
	d := Deployment{
		Resources: r,
		Bucket:    bucket,
		Table:     table,
		QueueURLs: map[spec.QueueID]string{},
		DLQURLs:   map[spec.QueueID]string{},
	}
	for _, q := range r.Queues {
		u, err := need(spec.QueueURLEnv(q.ID))
		if err != nil {
			return Deployment{}, err
		}
		d.QueueURLs[q.ID] = u
		d.DLQURLs[q.ID] = dlqURL(u, q.FIFO)
	}
	return d, nil
}

// dlqURL derives a DLQ's URL from its queue's URL: spec.DLQName appends
// "-dlq" before any ".fifo".
func dlqURL(queueURL string, fifo bool) string {
	if fifo {
		return strings.TrimSuffix(queueURL, ".fifo") + "-dlq.fifo"
	}
	return queueURL + "-dlq"
}

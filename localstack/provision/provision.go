// Package provision creates a Sluice deployment's resources in the local
// emulator (moto or LocalStack) from the one resource spec (shared/spec),
// the same spec the CDK stack reads, so the two cannot drift.
//
// Provision is idempotent and converges: running it again with the same
// spec changes nothing, and with a changed spec (say, a shorter visibility
// timeout for tests) it updates what can be updated in place. It never
// deletes anything.
package provision

import (
	"context"
	"fmt"
	"regexp"

	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/spec"
)

// Deployment is a provisioned set of resources and their physical names.
type Deployment struct {
	// Resources is the spec the deployment was provisioned from.
	Resources spec.Resources
	Bucket    string
	Table     string
	// QueueURLs and DLQURLs map every queue of the spec to its URL and its
	// dead-letter queue's URL.
	QueueURLs map[spec.QueueID]string
	DLQURLs   map[spec.QueueID]string
	// TTLEnabled reports whether the emulator accepted the table's TTL
	// setting. moto accepts it but never expires items (docs/platform.md).
	TTLEnabled bool
}

// Env returns the environment variables through which functions and the
// CLI find this deployment (spec.Env* names).
func (d Deployment) Env() map[string]string {
	env := map[string]string{
		spec.EnvBucket: d.Bucket,
		spec.EnvTable:  d.Table,
	}
	for id, u := range d.QueueURLs {
		env[spec.QueueURLEnv(id)] = u
	}
	return env
}

// prefixPattern: the prefix must leave every physical name valid. The
// longest names are "<prefix>-compaction-jobs-dlq.fifo" (SQS: ≤ 80) and
// "<prefix>-blocks" (S3: ≤ 63, lowercase letters, digits and hyphens).
var prefixPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,54}$`)

// ValidatePrefix reports whether prefix yields valid bucket, table and
// queue names.
func ValidatePrefix(prefix string) error {
	if !prefixPattern.MatchString(prefix) {
		return fmt.Errorf("prefix %q: want 1 to 55 lowercase letters, digits or hyphens, not starting with a hyphen", prefix)
	}
	return nil
}

// Provision creates (or converges) every resource of r: the queues and
// their DLQs first, because the bucket's notification names the
// block-events queue, then the bucket, then the table.
func Provision(ctx context.Context, c *awsenv.Clients, r spec.Resources) (Deployment, error) {
	if err := ValidatePrefix(r.Prefix); err != nil {
		return Deployment{}, err
	}
	d := Deployment{
		Resources: r,
		Bucket:    r.BucketName(),
		Table:     r.TableName(),
		QueueURLs: map[spec.QueueID]string{},
		DLQURLs:   map[spec.QueueID]string{},
	}
	arns := map[spec.QueueID]string{}
	for _, q := range r.Queues {
		qu, arn, dlq, err := provisionQueue(ctx, c.SQS, r, q)
		if err != nil {
			return Deployment{}, err
		}
		d.QueueURLs[q.ID], d.DLQURLs[q.ID], arns[q.ID] = qu, dlq, arn
	}
	events, ok := arns[spec.BlockEvents]
	if !ok {
		return Deployment{}, fmt.Errorf("provision %s: the spec has no %s queue for the bucket's notifications", r.Prefix, spec.BlockEvents)
	}
	if err := provisionBucket(ctx, c, r, d.QueueURLs[spec.BlockEvents], events); err != nil {
		return Deployment{}, err
	}
	ttl, err := provisionTable(ctx, c.DynamoDB, r)
	if err != nil {
		return Deployment{}, err
	}
	d.TTLEnabled = ttl
	return d, nil
}

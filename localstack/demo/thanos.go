package demo

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/shared/blockgen"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/spec"
)

// The demo's second deployment is a Thanos bucket (docs/thanos.md): one
// tenant in the single-tenant layout, two Prometheus servers told apart by
// their cluster label, each shipping two replicas told apart by the
// replica label. Sluice writes one block per stream and range there (no
// partitions: Thanos' tools would call partitions overlapping blocks), and
// the demo shows Thanos' own verifier's verdict next to sluice verify's.
const (
	thanosTenant       = "thanos"
	thanosReplicaLabel = "replica"
)

var thanosClusters = []string{"east", "west"}

// thanosOptions are the main demo's options for the Thanos deployment:
// its own prefix, files and work directory.
func thanosOptions(o Options) Options {
	t := o
	t.Prefix = o.Prefix + "-thanos"
	t.Tenants = []Tenant{{Name: thanosTenant, ReplicationFactor: 2}}
	t.WorkDir = o.WorkDir + "-thanos"
	t.EnvFile = strings.TrimSuffix(o.EnvFile, ".env") + "-thanos.env"
	t.LogFile = strings.TrimSuffix(o.LogFile, ".log") + "-thanos.log"
	return t
}

// thanosConfig is the Thanos deployment's configuration on top of the
// deployment's: the single-tenant layout, the replica label, and one
// block per group (SLUICE_PARTITIONING=auto in that layout).
func thanosConfig(c *config.Config) {
	c.Layout = blockkey.Layout{SingleTenant: thanosTenant}
	c.ReplicaLabels = []string{thanosReplicaLabel}
	c.Policy.SingleBlock = true
}

// thanosEnv is the same, as the settings `sluice` reads.
func thanosEnv() map[string]string {
	return map[string]string{
		spec.EnvLayout:          spec.LayoutSingleTenant,
		"SLUICE_TENANT":         thanosTenant,
		config.EnvReplicaLabels: thanosReplicaLabel,
	}
}

func (r *run) generateThanos(from, start time.Time) error {
	total := 0
	for i, cluster := range thanosClusters {
		bs, err := blockgen.Generate(filepath.Join(r.opts.WorkDir, "in", cluster), blockgen.Options{
			Tenant: thanosTenant, Start: from, Blocks: r.opts.Hours / 2, Series: r.opts.Series, SamplesPerSeries: r.opts.SamplesPerSeries,
			ReplicationFactor: 2, Histograms: true, ThanosFiles: true, Seed: int64(100 + i),
			ExternalLabels: map[string]string{"cluster": cluster}, ReplicaLabel: thanosReplicaLabel,
		})
		if err != nil {
			return err
		}
		for _, b := range bs {
			r.inputs[thanosTenant] = append(r.inputs[thanosTenant], b.Dir)
		}
		total += len(bs)
	}
	r.sum.Tenants = append(r.sum.Tenants, TenantSummary{Tenant: thanosTenant, ReplicationFactor: 2, Uploaded: total})
	r.stepf("generate", "%d blocks: clusters %s, each two replicas (%s=\"0\", \"1\"), %d series each, %s → %s (%s)",
		total, strings.Join(thanosClusters, " and "), thanosReplicaLabel, r.opts.Series, from.Format("2006-01-02 15:04"),
		from.Add(time.Duration(r.opts.Hours)*time.Hour).Format("2006-01-02 15:04"), since(start))
	return nil
}

// thanosIssue is a line of `thanos tools bucket verify` that reports a
// problem.
var thanosIssue = regexp.MustCompile(`(?i)level=(warn|error)|found overlapped`)

// thanosVerdict runs Thanos' own verifier over the bucket, when a thanos
// binary is at hand, and records what it says; an issue it reports is a
// failure of the demo.
func (r *run) thanosVerdict(ctx context.Context) {
	bin := r.opts.ThanosBinary
	if bin == "" {
		bin = os.Getenv("THANOS")
	}
	if bin == "" {
		bin, _ = exec.LookPath("thanos")
	}
	if bin == "" {
		r.sum.ThanosVerdict = "not run: no thanos binary here (set THANOS=/path/to/thanos; 'make thanos-check' builds one from a snapshot)"
		return
	}
	issues, err := r.thanosVerify(ctx, bin)
	switch {
	case err != nil:
		r.sum.ThanosVerdict = "FAILED to run: " + err.Error()
		r.fail("thanos tools bucket verify: %v", err)
	case len(issues) > 0:
		r.sum.ThanosVerdict = fmt.Sprintf("FAILED: %d issue line(s): %s", len(issues), strings.Join(issues, "; "))
		r.fail("thanos tools bucket verify reported: %s", strings.Join(issues, "; "))
	default:
		r.sum.ThanosVerdict = "ok: thanos tools bucket verify (overlapped_blocks, index_known_issues, duplicated_compaction) found no issue"
	}
}

func (r *run) thanosVerify(ctx context.Context, bin string) ([]string, error) {
	u, err := url.Parse(r.opts.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", r.opts.Endpoint, err)
	}
	conf := filepath.Join(r.opts.WorkDir, "objstore.yml")
	body := fmt.Sprintf("type: S3\nconfig:\n  bucket: %s\n  endpoint: %s\n  region: us-east-1\n  access_key: test\n  secret_key: test\n"+
		"  insecure: %t\n  bucket_lookup_type: path\n", r.cfg.Bucket, u.Host, u.Scheme == "http")
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "tools", "bucket", "verify", "--objstore.config-file="+conf,
		"--issues=overlapped_blocks", "--issues=index_known_issues", "--issues=duplicated_compaction")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out.String())
	}
	var issues []string
	for _, line := range strings.Split(out.String(), "\n") {
		if thanosIssue.MatchString(line) {
			issues = append(issues, strings.TrimSpace(line))
		}
	}
	return issues, nil
}

package demo

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/sluice-dev/sluice/shared/cli"
	"github.com/sluice-dev/sluice/shared/records"
)

// statusPage writes the deployment's status page beside its env file, as
// `sluice status --html` would, so the demo ends with something to look
// at; a page that cannot be written is a failed check, not a stopped demo.
func (r *run) statusPage(ctx context.Context) {
	path := strings.TrimSuffix(r.opts.EnvFile, ".env") + "-status.html"
	store := records.NewStore(r.quiet.DynamoDB, r.cfg.Table, slog.New(slog.DiscardHandler))
	ov, ovErr := cli.LoadOverrides(ctx, r.quiet.S3, r.cfg)
	rep, err := cli.GatherStatus(ctx, store, r.quiet.SQS, r.cfg, cli.StatusOptions{
		AllGroups: true, Detail: true, Overrides: ov, OverridesError: ovErr})
	if err == nil {
		err = cli.WriteStatusPage(path, rep)
	}
	if err != nil {
		r.fail("status page: %v", err)
		return
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	r.sum.StatusPage = path
}

// statusPageLines say where the status pages are and how to serve them
// live.
func statusPageLines(s *Summary, envFile string) []string {
	var lines []string
	for _, sum := range []*Summary{s, s.Thanos} {
		if sum == nil || sum.StatusPage == "" {
			continue
		}
		lines = append(lines, fmt.Sprintf("status page of %s: file://%s", sum.Prefix, sum.StatusPage))
	}
	if len(lines) > 0 {
		lines = append(lines, fmt.Sprintf("served live: bin/sluice --env-file %s ui   (then open http://127.0.0.1:8080)", envFile))
	}
	return lines
}

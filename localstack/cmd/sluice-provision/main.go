// Command sluice-provision creates a Sluice deployment in the local
// emulator (AWS_ENDPOINT_URL, default http://127.0.0.1:4566) and prints the
// environment that finds it, for a shell to eval:
//
//	eval "$(bin/sluice-provision -prefix demo)"
//
// It is idempotent: run it again and it prints the same lines.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/localstack/provision"
	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/spec"
)

func main() {
	prefix := flag.String("prefix", "sluice-local", "resource name prefix (lowercase letters, digits, hyphens)")
	endpoint := flag.String("endpoint", "", "AWS endpoint (default: AWS_ENDPOINT_URL, else http://127.0.0.1:4566)")
	timeout := flag.Duration("timeout", time.Minute, "give up after this long")
	flag.Parse()
	if err := run(*prefix, *endpoint, *timeout); err != nil {
		slog.Error("sluice-provision failed", "prefix", *prefix, "err", err)
		os.Exit(1)
	}
}

func run(prefix, endpoint string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if endpoint == "" && os.Getenv("AWS_ENDPOINT_URL") == "" {
		endpoint = "http://127.0.0.1:4566"
	}
	c, err := awsenv.Load(ctx, awsenv.Options{Endpoint: endpoint})
	if err != nil {
		return err
	}
	d, err := provision.Provision(ctx, c, spec.Default(prefix))
	if err != nil {
		return err
	}
	env := d.Env()
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("export %s=%s\n", k, shellQuote(env[k]))
	}
	slog.Info("provisioned", "prefix", prefix, "bucket", d.Bucket, "table", d.Table, "queues", len(d.QueueURLs), "ttl", d.TTLEnabled)
	return nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

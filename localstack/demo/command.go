package demo

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/shared/cli"
)

func init() {
	cli.Register(cli.CommandSpec{
		Name:    "demo",
		Summary: "run the local demo against the emulator (what 'make demo' runs)",
		Usage:   "[--seed N] [--series N] [--hours N] [--name sluice-demo]",
		AWS:     true,
		Help: `Provisions a Sluice deployment in the local emulator (never in AWS: without
--endpoint or AWS_ENDPOINT_URL it uses http://127.0.0.1:4566), generates two
tenants' 2h blocks — team-a, and team-b with replication factor 2 — uploads
them in shuffled order as 'sluice upload' does, sends some S3 notifications
twice, and runs the planner, compact, cleaner and uploader locally until
nothing is left to do. Then, per tenant: the blocks before and after, the
groups and partitions run, the AWS requests made, 'sluice verify' and a
sample-by-sample comparison of the live blocks with the generated ones.

A second deployment, <name>-thanos, runs the same over a Thanos bucket:
the single-tenant layout, two Prometheus servers (cluster="east", "west")
shipping two replicas each (replica="0", "1"). There Sluice writes one
block per stream and range, and the demo runs Thanos' own verifier ('thanos
tools bucket verify') over the bucket when a thanos binary is found ($THANOS
or on the PATH) and shows its verdict next to 'sluice verify'.

Exits 0 only if everything held. The deployment stays up afterwards; its
settings are in .sluice/demo.env (.sluice/demo-thanos.env), the handlers'
logs in .sluice/demo.log (.sluice/demo-thanos.log).
'make demo' starts the emulator first; 'make down' stops it.`,
		Setup: func(fs *flag.FlagSet) cli.RunFunc {
			var o Options
			fs.StringVar(&o.Prefix, "name", "sluice-demo", "name prefix of the demo deployment's bucket, table and queues")
			fs.IntVar(&o.Hours, "hours", 24, "hours of 2h blocks per tenant (a multiple of 2)")
			fs.IntVar(&o.Series, "series", 200, "series per block")
			fs.Uint64Var(&o.Seed, "seed", 0, "seed of the shuffled upload order (0: from the clock)")
			fs.DurationVar(&o.DeletionDelay, "deletion-delay", 5*time.Second, "how long retired sources stay before they are deleted")
			fs.DurationVar(&o.UploadWait, "upload-wait", 3*time.Second, "how long a range holding uploads waits after its newest upload for late replicas (negative: none)")
			fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "how long the pipeline may take to settle")
			fs.StringVar(&o.WorkDir, "workdir", ".sluice/demo", "where generated and downloaded blocks go")
			thanos := fs.Bool("thanos", true, "also run the Thanos-layout deployment beside the main one")
			return func(ctx context.Context, e *cli.Env, args []string) error {
				if len(args) > 0 {
					return cli.Usagef("unexpected argument %q", args[0])
				}
				o.Endpoint, o.SkipThanos = e.Endpoint(), !*thanos
				o.Out, o.Progress, o.Keep = e.Stdout, e.Stderr, true
				sum, err := Run(ctx, o)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.Stdout, "\nThe platform is still running at %s. Look around:\n", sum.Endpoint)
				fmt.Fprintf(e.Stdout, "  source %s && bin/sluice status        # or: bin/sluice --env-file %s verify\n", ".sluice/demo.env", ".sluice/demo.env")
				if sum.Thanos != nil {
					fmt.Fprintf(e.Stdout, "  bin/sluice --env-file %s status   # the Thanos bucket\n", ".sluice/demo-thanos.env")
				}
				fmt.Fprintf(e.Stdout, "Stop it with: make down\n")
				if !sum.OK() {
					return cli.Refusef("%d check(s) failed", len(sum.Failures))
				}
				return nil
			}
		},
	})
}

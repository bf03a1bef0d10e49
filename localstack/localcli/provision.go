// Package localcli holds the commands of bin/sluice-local that only make
// sense against the local emulator: provision (and, in localstack/demo,
// demo).
package localcli

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/localstack/provision"
	"github.com/sluice-dev/sluice/shared/cli"
	"github.com/sluice-dev/sluice/shared/spec"
)

// DefaultEndpoint is the local emulator's.
const DefaultEndpoint = "http://127.0.0.1:4566"

func init() {
	cli.Register(cli.CommandSpec{
		Name:    "provision",
		Summary: "create (or converge) a Sluice deployment in the local emulator and write its settings",
		Usage:   "[--name mine] [--out FILE] [--exports] [--close-delay D] [--upload-wait D] [--deletion-delay D]",
		AWS:     true,
		Help: `Creates, in the local emulator (never in AWS: without --endpoint or
AWS_ENDPOINT_URL it uses ` + DefaultEndpoint + `), the queues, bucket and table of a
deployment named --name, as the CDK stack creates them in AWS, and writes the
settings that find it to --out (default .sluice/<name>.env): the endpoint,
the SLUICE_* names and, for trying things locally, short delays — a range
that is not fully covered closes after --close-delay, a covered one is
compacted --upload-wait after its newest upload (0: at once; 10m in AWS),
compacted sources are deleted --deletion-delay after their deletion mark.
Running it again changes nothing.

Then use the deployment with any sluice command:

  bin/sluice --env-file .sluice/mine.env upload --tenant team-a ./data
  bin/sluice --env-file .sluice/mine.env run --until-idle
  bin/sluice --env-file .sluice/mine.env status

--exports prints 'export NAME=value' lines instead, for a shell to eval.
The emulator forgets everything when it restarts: provision again.`,
		Setup: func(fs *flag.FlagSet) cli.RunFunc {
			name := fs.String("name", "sluice-local", "the deployment's name: prefix of its bucket, table and queues")
			out := fs.String("out", "", "where to write the settings (default .sluice/<name>.env)")
			exports := fs.Bool("exports", false, "print export lines instead of writing a file")
			closeDelay := fs.Duration("close-delay", time.Minute, "SLUICE_CLOSE_DELAY of the deployment")
			uploadWait := fs.Duration("upload-wait", 0, "SLUICE_UPLOAD_WAIT of the deployment (0: a covered range is compacted at once, as 'sluice run --until-idle' after an upload expects)")
			deletionDelay := fs.Duration("deletion-delay", time.Minute, "SLUICE_DELETION_DELAY of the deployment")
			return func(ctx context.Context, e *cli.Env, args []string) error {
				if len(args) > 0 {
					return cli.Usagef("unexpected argument %q", args[0])
				}
				if err := provision.ValidatePrefix(*name); err != nil {
					return cli.Usagef("--name: %v", err)
				}
				endpoint := e.Endpoint()
				if endpoint == "" {
					endpoint = DefaultEndpoint
					e.Set("AWS_ENDPOINT_URL", endpoint)
				}
				if !isLocal(endpoint) {
					return cli.Refusef("%s is not a local endpoint: provision only creates deployments in the local emulator; in AWS, deploy the CDK stack (docs/deploy.md)", endpoint)
				}
				c, err := e.Clients(ctx)
				if err != nil {
					return err
				}
				d, err := provision.Provision(ctx, c, spec.Default(*name))
				if err != nil {
					return err
				}
				vars := d.Env()
				vars["AWS_ENDPOINT_URL"] = endpoint
				vars["SLUICE_CLOSE_DELAY"] = closeDelay.String()
				vars["SLUICE_UPLOAD_WAIT"] = uploadWait.String()
				vars["SLUICE_DELETION_DELAY"] = deletionDelay.String()
				if *exports {
					keys := make([]string, 0, len(vars))
					for k := range vars {
						keys = append(keys, k)
					}
					sort.Strings(keys)
					for _, k := range keys {
						fmt.Fprintf(e.Stdout, "export %s='%s'\n", k, strings.ReplaceAll(vars[k], "'", `'\''`))
					}
					return nil
				}
				file := *out
				if file == "" {
					file = filepath.Join(".sluice", *name+".env")
				}
				if err := cli.WriteEnvFile(file, vars, "Settings of the local Sluice deployment "+*name+", written by 'sluice-local provision'.\n"+
					"Use them with: bin/sluice --env-file "+file+" status (or: source "+file+")"); err != nil {
					return err
				}
				fmt.Fprintf(e.Stdout, "provisioned %s in %s: bucket %s, table %s, %d queues; settings in %s\n",
					*name, endpoint, d.Bucket, d.Table, len(d.QueueURLs), file)
				fmt.Fprintf(e.Stdout, "next: bin/sluice --env-file %s upload --tenant T DIR, then bin/sluice --env-file %s run --until-idle\n", file, file)
				return nil
			}
		},
	})
}

// isLocal reports an endpoint on this machine.
func isLocal(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	switch u.Hostname() {
	case "127.0.0.1", "localhost", "::1", "localstack":
		return true
	}
	return false
}

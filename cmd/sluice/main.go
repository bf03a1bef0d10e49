// Command sluice uploads, inspects, verifies and repairs a Sluice
// deployment, and runs the local demo. Run 'sluice --help'.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluice-dev/sluice/shared/cli"
	_ "github.com/sluice-dev/sluice/shared/cli/demo" // sluice demo
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, cli.IO{Stdout: os.Stdout, Stderr: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}

// Command sluice uploads, inspects, verifies, runs and repairs a Sluice
// deployment. Run 'sluice --help'. The local platform's own commands
// (provision, demo) are in bin/sluice-local (localstack/cmd/sluice-local):
// this binary links no emulator code.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluice-dev/sluice/shared/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, cli.IO{Stdout: os.Stdout, Stderr: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}

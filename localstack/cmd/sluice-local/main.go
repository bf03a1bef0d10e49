// Command sluice-local is sluice with the local platform's commands: it
// provisions a deployment in the emulator (provision) and runs the demo
// (demo), besides every command of bin/sluice. Run 'sluice-local --help'.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	_ "github.com/sluice-dev/sluice/localstack/demo"     // demo
	_ "github.com/sluice-dev/sluice/localstack/localcli" // provision
	"github.com/sluice-dev/sluice/shared/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, cli.IO{Stdout: os.Stdout, Stderr: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}

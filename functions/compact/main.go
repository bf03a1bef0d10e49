// Command compact is the Sluice compact Lambda function: wiring only; the logic
// lives in shared/pipeline.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/sluice-dev/sluice/shared/pipeline"
)

func main() {
	deps, err := pipeline.DepsFromEnv(context.Background(), "compact")
	if err != nil {
		slog.Error("compact: cannot start", "err", err)
		os.Exit(1)
	}
	pipeline.SetJobGCTarget()
	lambda.Start(pipeline.Compact{Deps: deps}.Handle)
}

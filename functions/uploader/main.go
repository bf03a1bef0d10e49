// Command uploader is the Sluice uploader Lambda function: wiring only; the logic
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
	deps, err := pipeline.DepsFromEnv(context.Background(), "uploader")
	if err != nil {
		slog.Error("uploader: cannot start", "err", err)
		os.Exit(1)
	}
	lambda.Start(pipeline.Uploader{Deps: deps}.Handle)
}

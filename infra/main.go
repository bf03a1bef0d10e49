// Command infra is Sluice's CDK app: `cdk synth` and `cdk deploy` run it
// (cdk.json: "go run ."). Settings come from CDK context; see docs/deploy.md
// and stack.PropsFromContext.
package main

import (
	"fmt"
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/sluice-dev/sluice/infra/stack"
)

func main() {
	defer jsii.Close()
	app := awscdk.NewApp(nil)
	get := func(key string) string {
		if v := app.Node().TryGetContext(jsii.String(key)); v != nil {
			return fmt.Sprint(v)
		}
		return ""
	}
	props, err := stack.PropsFromContext(get)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice infra:", err)
		os.Exit(2)
	}
	id := "Sluice"
	if n := get(stack.CtxName); n != "" && n != stack.DefaultName {
		id = "Sluice-" + n
	}
	// Environment-agnostic: the account and region come from the CLI's
	// credentials at deploy time, and synthesis needs none.
	if _, err := stack.New(app, id, props, &awscdk.StackProps{
		Description: jsii.String("Sluice: race-free serverless compaction of Prometheus TSDB blocks in S3"),
	}); err != nil {
		fmt.Fprintln(os.Stderr, "sluice infra:", err)
		os.Exit(2)
	}
	app.Synth(nil)
}

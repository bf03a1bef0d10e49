// Package localrun runs the whole pipeline of a deployment provisioned in
// the emulator (localstack/provision) in one process: shared/localpipeline
// wired to the deployment's queues.
package localrun

import (
	"fmt"

	"github.com/sluice-dev/sluice/localstack/provision"
	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/localpipeline"
)

// Options tune the pipeline (localpipeline.Options).
type Options = localpipeline.Options

// Pipeline is the running pipeline (localpipeline.Pipeline).
type Pipeline = localpipeline.Pipeline

// Config loads a configuration for deployment d, as the functions would
// from the environment the CDK stack sets.
func Config(d provision.Deployment) (config.Config, error) {
	env := d.Env()
	return config.Load(func(k string) string { return env[k] })
}

// New wires the four handlers to the deployment's queues.
func New(clients *awsenv.Clients, d provision.Deployment, opts Options) (*Pipeline, error) {
	cfg, err := Config(d)
	if err != nil {
		return nil, fmt.Errorf("localrun: %w", err)
	}
	return localpipeline.New(clients, cfg, d.Resources, opts)
}

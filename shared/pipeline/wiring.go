package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/messages"
	"github.com/sluice-dev/sluice/shared/overrides"
	"github.com/sluice-dev/sluice/shared/records"
)

// NewDeps builds handler dependencies from a configuration and AWS clients.
func NewDeps(cfg config.Config, c *awsenv.Clients, logger *slog.Logger, owner string) *Deps {
	return &Deps{
		Config: cfg,
		Store:  records.NewStore(c.DynamoDB, cfg.Table, logger),
		Send:   messages.Sender{SQS: c.SQS, Queues: cfg.Queues},
		S3:     c.S3,
		Logger: logger,
		Owner:  owner,
		// Every function instance reads the overrides again a minute
		// after it last did: effective without a redeploy.
		Overrides: &overrides.Cache{TTL: cfg.OverridesTTL},
	}
}

// DepsFromEnv is what a Lambda's main calls: configuration from the
// environment, JSON logs on stderr, AWS clients from the execution role.
func DepsFromEnv(ctx context.Context, function string) (*Deps, error) {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("function", function)
	cfg, err := config.FromEnv()
	if err != nil {
		return nil, err
	}
	clients, err := awsenv.Load(ctx, awsenv.Options{})
	if err != nil {
		return nil, err
	}
	owner := os.Getenv("AWS_LAMBDA_LOG_STREAM_NAME")
	if owner == "" {
		host, _ := os.Hostname()
		owner = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return NewDeps(cfg, clients, logger, function+"@"+owner), nil
}

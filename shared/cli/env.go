package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/smithy-go"

	"github.com/sluice-dev/sluice/shared/awsenv"
	"github.com/sluice-dev/sluice/shared/blockkey"
	"github.com/sluice-dev/sluice/shared/config"
	"github.com/sluice-dev/sluice/shared/records"
	"github.com/sluice-dev/sluice/shared/spec"
)

// EnvFileVar names a settings file read before the command runs.
const EnvFileVar = "SLUICE_ENV_FILE"

// probeTimeout bounds the reachability check of an explicit endpoint.
const probeTimeout = 2 * time.Second

// Env is what a running command sees: its IO, its settings (flags over
// the env file over the process environment) and, on first use, AWS
// clients.
type Env struct {
	IO
	vars map[string]string // from flags and the env file
	// Counter, when set before Clients is first called, counts every AWS
	// request the command makes.
	Counter *awsenv.RequestCounter
	// clients, once built (tests may preset them).
	clients *awsenv.Clients
}

func newEnv(o IO, cf commonFlags) (*Env, error) {
	e := &Env{IO: o, vars: map[string]string{}}
	file := cf.envFile
	if file == "" {
		file = o.getenv(EnvFileVar)
	}
	if file != "" {
		vars, err := ReadEnvFile(file)
		if err != nil {
			return nil, &UsageError{Msg: err.Error()}
		}
		e.vars = vars
	}
	set := func(name, v string) {
		if v != "" {
			e.vars[name] = v
		}
	}
	set("AWS_ENDPOINT_URL", cf.endpoint)
	set(spec.EnvBucket, cf.bucket)
	set(spec.EnvTable, cf.table)
	set(spec.EnvKeyPrefix, cf.prefix)
	return e, nil
}

// Getenv resolves a setting: a flag, then the env file, then the process
// environment.
func (e *Env) Getenv(name string) string {
	if v, ok := e.vars[name]; ok {
		return v
	}
	return e.IO.getenv(name)
}

// Set sets a setting for the rest of the command, as a flag would; it
// must come before Clients is first called to change the clients.
func (e *Env) Set(name, value string) { e.vars[name] = value }

// Endpoint is the AWS endpoint in use ("" = AWS itself).
func (e *Env) Endpoint() string { return e.Getenv("AWS_ENDPOINT_URL") }

// Config loads Sluice's configuration. A command that does not touch the
// table (upload) passes needTable false.
func (e *Env) Config(needTable bool) (config.Config, error) {
	get := e.Getenv
	if !needTable {
		get = func(name string) string {
			if v := e.Getenv(name); v != "" || name != spec.EnvTable {
				return v
			}
			return "-"
		}
	}
	var missing []string
	if get(spec.EnvBucket) == "" {
		missing = append(missing, "bucket (--bucket or "+spec.EnvBucket+")")
	}
	if get(spec.EnvTable) == "" {
		missing = append(missing, "table (--table or "+spec.EnvTable+")")
	}
	if len(missing) > 0 {
		return config.Config{}, &UsageError{Msg: "no " + strings.Join(missing, " and no ") +
			" configured; after 'make demo' run 'source .sluice/demo.env', or pass --env-file"}
	}
	cfg, err := config.Load(get)
	if err != nil {
		return config.Config{}, &UsageError{Msg: err.Error()}
	}
	return cfg, nil
}

// Clients returns AWS clients, after checking that an explicit endpoint
// answers at all (a short TCP dial), so an emulator that is not running is
// reported at once and by name.
func (e *Env) Clients(ctx context.Context) (*awsenv.Clients, error) {
	if e.clients != nil {
		return e.clients, nil
	}
	ep := e.Endpoint()
	if ep != "" && e.HTTPClient == nil {
		if err := probe(ctx, ep); err != nil {
			return nil, err
		}
	}
	c, err := awsenv.Load(ctx, awsenv.Options{Endpoint: ep, Counter: e.Counter, HTTPClient: e.HTTPClient})
	if err != nil {
		return nil, err
	}
	e.clients = c
	return c, nil
}

// checkTenantArgs refuses what the commands that read a deployment, or
// one tenant of it, do not take: positional arguments, and a --tenant
// that is no tenant name.
func checkTenantArgs(args []string, tenant string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	if tenant != "" {
		if err := blockkey.ValidateTenant(tenant); err != nil {
			return usagef("tenant %q: %v", tenant, err)
		}
	}
	return nil
}

// deployment is what a command reading a deployment works with: its
// configuration (the table included), the AWS clients and a store over
// the table.
type deployment struct {
	cfg     config.Config
	clients *awsenv.Clients
	store   *records.Store
}

// openDeployment reads the configuration, then loads the clients, as every
// command that reads the state table does.
func (e *Env) openDeployment(ctx context.Context) (deployment, error) {
	cfg, err := e.Config(true)
	if err != nil {
		return deployment{}, err
	}
	c, err := e.Clients(ctx)
	if err != nil {
		return deployment{}, err
	}
	return deployment{cfg: cfg, clients: c, store: records.NewStore(c.DynamoDB, cfg.Table, quietLogger())}, nil
}

// UnreachableError says which endpoint did not answer.
type UnreachableError struct {
	Endpoint string
	Err      error
}

func (e *UnreachableError) Error() string {
	hint := ""
	if u, err := url.Parse(e.Endpoint); err == nil && (u.Hostname() == "127.0.0.1" || u.Hostname() == "localhost") {
		hint = " (is the local emulator running? 'make up' starts it)"
	}
	return fmt.Sprintf("cannot reach the AWS endpoint %s: %v%s", e.Endpoint, rootCause(e.Err), hint)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// ProbeEndpoint checks with a short TCP dial that something listens at an
// endpoint URL, and says which endpoint does not.
func ProbeEndpoint(ctx context.Context, endpoint string) error { return probe(ctx, endpoint) }

func probe(ctx context.Context, endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return &UsageError{Msg: fmt.Sprintf("AWS endpoint %q is not a URL like http://127.0.0.1:4566", endpoint)}
	}
	host := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			host = net.JoinHostPort(u.Hostname(), "443")
		} else {
			host = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	d := net.Dialer{Timeout: probeTimeout}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return &UnreachableError{Endpoint: endpoint, Err: err}
	}
	return conn.Close()
}

// explain turns a network failure deep in an SDK error into one sentence
// naming the endpoint; other errors pass through.
func explain(err error) error {
	var ue *UnreachableError
	if errors.As(err, &ue) {
		return err
	}
	var op *net.OpError
	var dns *net.DNSError
	if errors.As(err, &op) || errors.As(err, &dns) {
		ep := os.Getenv("AWS_ENDPOINT_URL")
		var uerr *url.Error
		if errors.As(err, &uerr) {
			if u, perr := url.Parse(uerr.URL); perr == nil {
				ep = u.Scheme + "://" + u.Host
			}
		}
		if ep == "" {
			ep = "AWS"
		}
		return &UnreachableError{Endpoint: ep, Err: err}
	}
	if what, missing := missingResource(err); missing {
		return fmt.Errorf("%w — the %s does not exist. The local emulator forgets everything when it restarts: "+
			"run 'make demo' or 'bin/sluice-local provision' again; against AWS, check that --env-file or the SLUICE_* settings name your deployment",
			shortenAWS(err), what)
	}
	return shortenAWS(err)
}

// missingResource tells AWS's answers for a table, bucket or queue that is
// not there.
func missingResource(err error) (string, bool) {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return "", false
	}
	switch api.ErrorCode() {
	case "ResourceNotFoundException":
		return "table", true
	case "NoSuchBucket":
		return "bucket", true
	case "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist":
		return "queue", true
	}
	return "", false
}

// shortenAWS replaces the SDK's long "operation error S3: GetObject, https
// response error StatusCode: 404, RequestID: ..., api error NoSuchKey: ..."
// inside err's message by "S3 GetObject: NoSuchKey: ...".
func shortenAWS(err error) error {
	var oe *smithy.OperationError
	var api smithy.APIError
	if !errors.As(err, &oe) || !errors.As(err, &api) {
		return err
	}
	short := fmt.Sprintf("%s %s: %s", oe.ServiceID, oe.OperationName, api.ErrorCode())
	if m := api.ErrorMessage(); m != "" {
		short += ": " + m
	}
	return errors.New(strings.Replace(err.Error(), oe.Error(), short, 1))
}

func rootCause(err error) error {
	var op *net.OpError
	if errors.As(err, &op) {
		return op
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns
	}
	return err
}

// ReadEnvFile reads NAME=value settings: one or more per line, separated
// by blanks, optionally after "export", values optionally quoted; '#'
// starts a comment line. It reads both the CDK stack's SluiceEnv output
// and a shell file of exports.
func ReadEnvFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("env file: %w", err)
	}
	out := map[string]string{}
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, tok := range strings.Fields(line) {
			if tok == "export" {
				continue
			}
			name, val, ok := strings.Cut(tok, "=")
			if !ok || name == "" {
				return nil, fmt.Errorf("env file %s line %d: %q is not NAME=value", path, n+1, tok)
			}
			if len(val) >= 2 && (val[0] == '"' || val[0] == '\'') && val[len(val)-1] == val[0] {
				val = val[1 : len(val)-1]
			}
			out[name] = val
		}
	}
	return out, nil
}

// WriteEnvFile writes settings as shell exports, sorted, so that both
// 'source FILE' and '--env-file FILE' read them.
func WriteEnvFile(path string, vars map[string]string, comment string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(comment), "\n") {
		if l != "" {
			b.WriteString("# " + l + "\n")
		}
	}
	for _, k := range sortedKeys(vars) {
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(vars[k]))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == ':' || r == '.' || r == '-' || r == '_' || r == '=' || r == '@' ||
			(r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

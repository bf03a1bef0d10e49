// Package cli is the `sluice` command: upload, status, verify, replay-dlq,
// gen and demo. cmd/sluice is a thin main around Main; everything a test
// wants to drive lives here.
//
// Every failure ends in one line on stderr — what was refused and why —
// never a stack trace. Exit codes: 0 success, 1 a failure or a refusal
// (not a block, invariant violated, endpoint unreachable), 2 a usage
// error (unknown command or flag, missing argument, invalid tenant name).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// IO is the command's world: arguments arrive through Main, everything
// else through here, so tests run commands in-process.
type IO struct {
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// Progress receives progress bars; nil means Stderr. Tests pass
	// io.Discard.
	Progress io.Writer
	// HTTPClient, when non-nil, carries every AWS request (no endpoint is
	// probed): tests run commands against the in-memory tier this way.
	HTTPClient aws.HTTPClient
}

func (o IO) getenv(name string) string {
	if o.Getenv == nil {
		return os.Getenv(name)
	}
	return o.Getenv(name)
}

func (o IO) progress() io.Writer {
	if o.Progress != nil {
		return o.Progress
	}
	return o.Stderr
}

// Exit codes.
const (
	ExitOK      = 0
	ExitFailed  = 1
	ExitUsage   = 2
	exitVerify  = ExitFailed
	programName = "sluice"
)

// UsageError is a command line that cannot be run: exit 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// RefusedError is input that sluice will not act on (not a block, a bad
// block): exit 1 with the reason.
type RefusedError struct{ Msg string }

func (e *RefusedError) Error() string { return e.Msg }

func refusef(format string, args ...any) error {
	return &RefusedError{Msg: fmt.Sprintf(format, args...)}
}

// exitError carries a chosen exit code for an outcome that was already
// reported (verify's violations).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// command is one subcommand.
type command struct {
	name    string
	summary string
	usage   string // after "sluice <name> "
	help    string // paragraphs after the usage line
	hidden  bool
	// aws: the command talks to AWS and takes the common flags.
	aws bool
	// setup registers the command's flags on fs and returns the function
	// that runs it with the positional arguments.
	setup func(fs *flag.FlagSet) runFunc
}

// RunFunc runs a command with its positional arguments.
type RunFunc = func(ctx context.Context, e *Env, args []string) error

type runFunc = RunFunc

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// CommandSpec describes a command that another package adds (cmd/sluice
// adds the demo, which needs the local platform's packages).
type CommandSpec struct {
	Name, Summary, Usage, Help string
	// AWS: the command talks to AWS and takes the common flags.
	AWS bool
	// Setup registers the command's flags and returns its RunFunc.
	Setup func(fs *flag.FlagSet) RunFunc
}

// Register adds a command.
func Register(c CommandSpec) {
	register(&command{name: c.Name, summary: c.Summary, usage: c.Usage, help: c.Help, aws: c.AWS, setup: c.Setup})
}

// Usagef reports a bad command line (exit 2).
func Usagef(format string, args ...any) error { return usagef(format, args...) }

// Refusef reports input sluice will not act on (exit 1).
func Refusef(format string, args ...any) error { return refusef(format, args...) }

// Main runs the sluice command line args (without the program name) and
// returns the exit code.
func Main(ctx context.Context, io IO, args []string) int {
	if io.Stdout == nil {
		io.Stdout = os.Stdout
	}
	if io.Stderr == nil {
		io.Stderr = os.Stderr
	}
	// Global flags may come before the command, as in 'sluice --env-file
	// .sluice/demo.env verify': they are handed to the command as its own.
	leading, args := leadingCommonFlags(args)
	if len(args) == 0 {
		if len(leading) > 0 {
			fmt.Fprintf(io.Stderr, "%s: %s given, but no command. Run '%s --help' for the list.\n", programName, strings.Join(leading, " "), programName)
		} else {
			fmt.Fprint(io.Stderr, overview())
		}
		return ExitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && name == "help" {
			if c, ok := commands[args[1]]; ok {
				fmt.Fprint(io.Stdout, c.helpText())
				return ExitOK
			}
			fmt.Fprintf(io.Stderr, "%s: unknown command %q\n", programName, args[1])
			return ExitUsage
		}
		fmt.Fprint(io.Stdout, overview())
		return ExitOK
	case "-version", "--version", "version":
		fmt.Fprintf(io.Stdout, "%s %s\n", programName, Version())
		return ExitOK
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(io.Stderr, "%s: unknown command %q. Run '%s --help' for the list.\n", programName, name, programName)
		return ExitUsage
	}
	if len(leading) > 0 && !c.aws {
		fmt.Fprintf(io.Stderr, "%s %s: takes none of %s\n", programName, c.name, strings.Join(leading, " "))
		return ExitUsage
	}
	return report(io, c, c.execute(ctx, io, append(leading, args[1:]...)))
}

// leadingCommonFlags splits off the common flags (--endpoint, --bucket,
// --table, --prefix, --env-file, as -name or --name, with =value or the
// next argument) that come before the command.
func leadingCommonFlags(args []string) (flags, rest []string) {
	for len(args) > 0 {
		a := args[0]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" || !commonFlagNames[name] {
			break
		}
		flags = append(flags, a)
		args = args[1:]
		if !hasValue && len(args) > 0 {
			flags = append(flags, args[0])
			args = args[1:]
		}
	}
	return flags, args
}

// report prints err as one line and picks the exit code.
func report(io IO, c *command, err error) int {
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, errHelpShown) {
		return ExitOK
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		fmt.Fprintf(io.Stderr, "%s %s: %s\nRun '%s %s --help' for usage.\n", programName, c.name, oneLine(ue.Msg), programName, c.name)
		return ExitUsage
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(io.Stderr, "%s %s: %s\n", programName, c.name, oneLine(ee.msg))
		}
		return ee.code
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintf(io.Stderr, "%s %s: interrupted\n", programName, c.name)
		return ExitFailed
	}
	fmt.Fprintf(io.Stderr, "%s %s: %s\n", programName, c.name, oneLine(explain(err).Error()))
	return ExitFailed
}

// oneLine folds a multi-line message into one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

func (c *command) helpText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s %s %s\n\n%s\n", programName, c.name, c.usage, strings.TrimSpace(c.help))
	fs, _ := c.newFlagSet()
	if d := flagDefaults(fs); d != "" {
		b.WriteString("\nFlags:\n")
		b.WriteString(d)
	}
	if c.aws {
		b.WriteString("\nThe common flags --endpoint, --bucket, --table, --prefix and --env-file\n" +
			"apply too (see 'sluice --help').\n")
	}
	return b.String()
}

func overview() string {
	var names []string
	for n, c := range commands {
		if !c.hidden {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool { return commandOrder(names[i]) < commandOrder(names[j]) })
	var b strings.Builder
	b.WriteString(`sluice — race-free compaction of Prometheus TSDB blocks in S3.

Usage: sluice <command> [flags] [arguments]

Commands:
`)
	for _, n := range names {
		fmt.Fprintf(&b, "  %-11s %s\n", n, commands[n].summary)
	}
	b.WriteString(`
Where sluice looks (flags override the environment; every command takes them):
  --endpoint URL    AWS_ENDPOINT_URL   an AWS-compatible endpoint, e.g. the local
                                       emulator http://127.0.0.1:4566 (default: AWS)
  --bucket NAME     SLUICE_BUCKET      the block bucket
  --table NAME      SLUICE_TABLE       the state table
  --prefix P        SLUICE_PREFIX      key prefix of the blocks in the bucket
  --env-file FILE   SLUICE_ENV_FILE    read NAME=value settings from FILE first, e.g.
                                       the CDK stack's SluiceEnv output or the
                                       .sluice/demo.env that 'make demo' writes
  Queue URLs come from SLUICE_BLOCK_EVENTS_URL, SLUICE_COMPACTION_JOBS_URL,
  SLUICE_CLEANER_EVENTS_URL and SLUICE_BLOCK_OPS_URL (status, replay-dlq).
  Credentials and region come from the usual AWS settings; against an
  emulator, dummy ones are used when none are set.

Try it locally:
  make demo                                    # start the emulator, compact two tenants, verify
  source .sluice/demo.env && sluice status     # look around afterwards
  sluice gen /tmp/blocks && sluice upload --tenant team-a /tmp/blocks/*

Run 'sluice <command> --help' for a command's flags. Exit status: 0 ok,
1 failed or refused (the reason is printed), 2 bad command line.
`)
	return b.String()
}

func commandOrder(n string) int {
	for i, o := range []string{"upload", "status", "verify", "replay-dlq", "gen", "demo"} {
		if o == n {
			return i
		}
	}
	return 100
}

// Version is the build's version (module version or "devel").
func Version() string { return buildVersion() }

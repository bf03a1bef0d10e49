package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// errHelpShown: --help was asked for and printed; exit 0.
var errHelpShown = errors.New("help shown")

// commonFlags are where every AWS-facing command looks.
type commonFlags struct {
	endpoint, bucket, table, prefix, envFile string
}

func (c *command) newFlagSet() (*flag.FlagSet, runFunc) {
	fs := flag.NewFlagSet(programName+" "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	run := c.setup(fs)
	return fs, run
}

func addCommonFlags(fs *flag.FlagSet, cf *commonFlags) {
	fs.StringVar(&cf.endpoint, "endpoint", "", "AWS endpoint URL (AWS_ENDPOINT_URL)")
	fs.StringVar(&cf.bucket, "bucket", "", "block bucket (SLUICE_BUCKET)")
	fs.StringVar(&cf.table, "table", "", "state table (SLUICE_TABLE)")
	fs.StringVar(&cf.prefix, "prefix", "", "key prefix of the blocks (SLUICE_PREFIX)")
	fs.StringVar(&cf.envFile, "env-file", "", "read NAME=value settings from this file (SLUICE_ENV_FILE)")
}

var commonFlagNames = map[string]bool{"endpoint": true, "bucket": true, "table": true, "prefix": true, "env-file": true}

// execute parses args (flags may follow positional arguments, as users
// type them) and runs the command.
func (c *command) execute(ctx context.Context, o IO, args []string) error {
	fs, run := c.newFlagSet()
	var cf commonFlags
	if c.aws {
		addCommonFlags(fs, &cf)
	}
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(o.Stdout, c.helpText())
		return errHelpShown
	}
	if err != nil {
		return &UsageError{Msg: err.Error()}
	}
	e, err := newEnv(o, cf)
	if err != nil {
		return err
	}
	return run(ctx, e, pos)
}

// parseInterspersed parses flags anywhere among the arguments; "--" ends
// flag parsing.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// fs.Parse stops at the first non-flag, or after "--".
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// flagDefaults renders the command's own flags (not the common ones).
func flagDefaults(fs *flag.FlagSet) string {
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		if commonFlagNames[f.Name] {
			return
		}
		name, usage := flag.UnquoteUsage(f)
		head := "  --" + f.Name
		if name != "" {
			head += " " + name
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		if len(head) <= 20 {
			fmt.Fprintf(&b, "%-22s%s%s\n", head, usage, def)
		} else {
			fmt.Fprintf(&b, "%s\n%22s%s%s\n", head, "", usage, def)
		}
	})
	return b.String()
}

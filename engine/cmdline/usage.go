package cmdline

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/internal/suggest"
)

func unknownCommand(app string, path []string, name string, cmds []*cli.Command) error {
	var names []string
	for _, c := range cmds {
		if !c.Hidden {
			names = append(names, c.Names()...)
		}
	}
	where := strings.Join(append([]string{app}, path...), " ")
	msg := fmt.Sprintf("unknown command %q for %s", name, where)
	if s := suggest.Closest(name, names); s != "" {
		msg += fmt.Sprintf("; did you mean %s?", s)
	}
	return WithCode(ExitUsage, fmt.Errorf("%s (see %s --help)", msg, where))
}

// builtinFlag reports the flags urfave/cli adds itself.
func builtinFlag(name string, root bool) bool {
	return name == "generate-shell-completion" || root && (name == "version" || name == "v")
}

func unknownFlag(app string, path []string, name string, flags []cli.Flag) error {
	where := strings.Join(append([]string{app}, path...), " ")
	msg := fmt.Sprintf("unknown flag %s", dashed(name))
	var names []string
	for _, f := range flags {
		names = append(names, f.Names()...)
	}
	if s := suggest.Closest(name, names); s != "" {
		msg += fmt.Sprintf("; did you mean %s?", dashed(s))
	}
	prefix := ""
	if len(path) > 0 {
		prefix = strings.Join(path, " ") + ": "
	}
	return WithCode(ExitUsage, fmt.Errorf("%s%s (see %s --help)", prefix, msg, where))
}

// OnUsageError turns urfave/cli's flag errors (unknown flag, bad value) into exit 2 with
// the closest flag name, instead of a help page and exit 1.
func OnUsageError(_ context.Context, c *cli.Command, err error, _ bool) error {
	root := c.Root().Name
	path := strings.Fields(strings.TrimPrefix(c.FullName(), root))
	flags := c.Flags
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: "); ok {
		return unknownFlag(root, path, strings.TrimLeft(name, "-"), flags)
	}
	where := strings.Join(append([]string{root}, path...), " ")
	prefix := ""
	if len(path) > 0 {
		prefix = strings.Join(path, " ") + ": "
	}
	return WithCode(ExitUsage, fmt.Errorf("%s%w (see %s --help)", prefix, err, where))
}

func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// SetUsageErrors installs OnUsageError on every command. A command without subcommands gets
// no `help` subcommand either: urfave/cli v3 would add one, and then `skippr sync help` or
// `skippr plugin install help` would print help instead of naming a pipeline or plugin "help".
func SetUsageErrors(cmds []*cli.Command) {
	for _, c := range cmds {
		c.OnUsageError = OnUsageError
		if len(c.Commands) == 0 {
			c.HideHelpCommand = true
		}
		SetUsageErrors(c.Commands)
	}
}

// RequireFlags stands in for cli's Required flags: it names every missing flag at once and
// exits with the usage code.
func RequireFlags(c *cli.Command, names ...string) error {
	var missing []string
	for _, n := range names {
		if !c.IsSet(n) {
			missing = append(missing, "--"+n)
		}
	}
	if len(missing) > 0 {
		return WithCode(ExitUsage, fmt.Errorf("%s: missing %s (see --help)", CmdName(c), strings.Join(missing, ", ")))
	}
	return nil
}

// CmdName is the command path without the program name ("registry sign"): the error printer already
// prefixes errors with "skippr: ".
func CmdName(c *cli.Command) string {
	return strings.TrimPrefix(c.FullName(), c.Root().Name+" ")
}

// Args returns the command's arguments when there are exactly n of them (the ones its ArgsUsage names) and
// every flag named in required is set; otherwise a usage error that says what is wanted.
func Args(c *cli.Command, n int, required ...string) ([]string, error) {
	args := c.Args().Slice()
	if len(args) != n {
		return nil, WithCode(ExitUsage, fmt.Errorf("%s: want %s, got %d arguments", CmdName(c), c.ArgsUsage, len(args)))
	}
	return args, RequireFlags(c, required...)
}

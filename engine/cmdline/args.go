package cmdline

import (
	"strings"

	"github.com/urfave/cli/v3"
)

// globalFlagNames are the app-wide flags that may also be written after a subcommand
// (`skippr sync -c x.yml`). urfave/cli v3 accepts them there too, but sets them on the
// subcommand, after the root's Before has read them: NormalizeArgs moves them to the front.
func globalFlagNames(app *cli.Command) map[string]cli.Flag {
	m := map[string]cli.Flag{}
	for _, f := range app.Flags {
		for _, n := range f.Names() {
			m[n] = f
		}
	}
	return m
}

func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

func takesValue(f cli.Flag) bool {
	_, isBool := f.(*cli.BoolFlag)
	return !isBool
}

// NormalizeArgs checks command names and moves global flags written after a subcommand to
// the front, where urfave/cli parses them. A flag the subcommand defines itself stays
// where it is. An unknown command is a usage error naming the closest one.
func NormalizeArgs(app *cli.Command, args []string) ([]string, error) {
	if len(args) < 2 {
		return args, nil
	}
	globals := globalFlagNames(app)
	var lifted, rest []string
	cmds := app.Commands
	flags := app.Flags
	var path []string // command names so far
	var leaf *cli.Command
	positional := false // a leaf's positional argument has been seen: no more subcommands
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			name, _, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if name == "help" || name == "h" {
				if positional {
					// urfave/cli v3 reads a leaf's first argument after --help as a help topic
					// ("No help topic for 'orders'"): the command's own help is what is asked for.
					return append(append([]string{args[0]}, path...), a), nil
				}
				rest = append(rest, args[i:]...)
				break
			}
			f := findFlag(flags, name)
			if g, ok := globals[name]; ok && len(path) > 0 && f == nil {
				lifted = append(lifted, a)
				if takesValue(g) && !hasVal && i+1 < len(args) {
					i++
					lifted = append(lifted, args[i])
				}
				continue
			}
			if f == nil && !builtinFlag(name, len(path) == 0) {
				return nil, unknownFlag(app.Name, path, name, flags)
			}
			rest = append(rest, a)
			if f != nil && takesValue(f) && !hasVal && i+1 < len(args) {
				i++
				rest = append(rest, args[i])
			}
			continue
		}
		rest = append(rest, a)
		if positional {
			continue
		}
		// help, and urfave/cli's `completion bash|zsh|fish|pwsh` (shell completion scripts), are added by
		// urfave/cli when it runs: not in app.Commands yet.
		if len(path) == 0 && (a == "help" || a == "h") && i+1 < len(args) {
			// `skippr help plugin install` is `skippr plugin install --help`, so a misspelt name is a
			// usage error with a suggestion (urfave/cli says "No help topic" and exits 3, our not-found code).
			again := append(append([]string{args[0]}, lifted...), rest[:len(rest)-1]...)
			return NormalizeArgs(app, append(append(again, args[i+1:]...), "--help"))
		}
		if len(path) == 0 && (a == "help" || a == "h" || a == "completion") {
			rest = append(rest, args[i+1:]...)
			break
		}
		if c := findCommand(cmds, a); c != nil {
			path = append(path, c.Name)
			leaf, cmds, flags = c, c.Commands, c.Flags
			continue
		}
		if len(cmds) > 0 && (leaf == nil || leaf.Action == nil) {
			return nil, unknownCommand(app.Name, path, a, cmds)
		}
		positional = true
	}
	out := append([]string{args[0]}, lifted...)
	return append(out, rest...), nil
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

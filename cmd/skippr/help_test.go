package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"
)

// Every command and subcommand answers --help with its usage, and exits 0.
func TestHelpEverywhere(t *testing.T) {
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Name == "help" {
				continue
			}
			args := append(append([]string{"skippr"}, path...), c.Name, "--help")
			t.Run(strings.Join(args[1:len(args)-1], " "), func(t *testing.T) {
				app := newApp(&globals{})
				var out bytes.Buffer
				app.Writer, app.ErrWriter = &out, &out
				if err := app.Run(context.Background(), args); err != nil {
					t.Fatalf("%v: %v", args, err)
				}
				if c.Usage == "" || !strings.Contains(out.String(), c.Usage) {
					t.Fatalf("%v printed no usage:\n%s", args, out.String())
				}
			})
			walk(append(path, c.Name), c.Commands)
		}
	}
	walk(nil, newApp(&globals{}).Commands)
}

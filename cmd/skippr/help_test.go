package main

import (
	"bytes"
	"context"
	"slices"
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

// Every help/<path>.txt is the long help of the command at that path (help/fleet-status.txt: skippr fleet
// status), so a renamed command or a stray file does not leave help that nothing shows.
func TestEveryHelpFileUsed(t *testing.T) {
	shown := map[string]string{}
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := append(slices.Clone(path), c.Name)
			shown[strings.Join(p, "-")] = c.Description
			walk(p, c.Commands)
		}
	}
	walk(nil, newApp(&globals{}).Commands)
	files, err := helpFiles.ReadDir("help")
	if err != nil || len(files) == 0 {
		t.Fatalf("no help files: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(f.Name(), ".txt")
		desc, ok := shown[name]
		if !ok {
			t.Errorf("help/%s names no command", f.Name())
		} else if desc != helpText(name) || desc == "" {
			t.Errorf("skippr %s does not show help/%s", strings.ReplaceAll(name, "-", " "), f.Name())
		}
	}
}

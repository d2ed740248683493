package cmdline

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"
)

// testApp is a small tree with the shapes skippr's own has: global flags, a leaf with flags and arguments,
// a group with leaves, and a hidden command.
func testApp() *cli.Command {
	leaf := func(name string, flags ...cli.Flag) *cli.Command {
		return &cli.Command{Name: name, Flags: flags, Action: func(context.Context, *cli.Command) error { return nil }}
	}
	app := &cli.Command{
		Name: "skippr",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}},
			&cli.StringFlag{Name: "home"},
			&cli.StringFlag{Name: "log-level"},
		},
		Commands: []*cli.Command{
			leaf("sync", &cli.BoolFlag{Name: "once"}, &cli.DurationFlag{Name: "progress-every"}),
			leaf("query"),
			{Name: "plugin", Commands: []*cli.Command{leaf("install"), leaf("remove")}},
			{Name: "registry", Commands: []*cli.Command{leaf("add", &cli.StringFlag{Name: "name"})}},
			{Name: "worker", Hidden: true, Action: func(context.Context, *cli.Command) error { return nil }},
		},
	}
	SetUsageErrors(app.Commands)
	return app
}

func TestNormalizeArgs(t *testing.T) {
	tests := []struct{ in, want []string }{
		{[]string{"sync", "-c", "x.yml", "--once"}, []string{"-c", "x.yml", "sync", "--once"}},
		{[]string{"sync", "--once", "--home=/h", "p1"}, []string{"--home=/h", "sync", "--once", "p1"}},
		{[]string{"-c", "x.yml", "sync"}, []string{"-c", "x.yml", "sync"}},
		// After a leaf's positional argument too (urfave/cli v3 reads flags there).
		{[]string{"plugin", "install", "datagen", "--home", "/h"}, []string{"--home", "/h", "plugin", "install", "datagen"}},
		// A flag's value is not mistaken for a flag or a command.
		{[]string{"sync", "--progress-every", "2s", "-c", "sync"}, []string{"-c", "sync", "sync", "--progress-every", "2s"}},
		// After -- nothing moves.
		{[]string{"query", "--", "-c"}, []string{"query", "--", "-c"}},
		{[]string{"help"}, []string{"help"}},
		{[]string{"-c", "x.yml", "help", "plugin", "install"}, []string{"-c", "x.yml", "plugin", "install", "--help"}},
		// --help after a leaf's arguments asks for that command's help: the arguments are dropped.
		{[]string{"-c", "x.yml", "sync", "orders", "--help"}, []string{"sync", "--help"}},
		{[]string{"registry", "add", "d", "a", "--name", "x", "-h"}, []string{"registry", "add", "-h"}},
		// A leaf's arguments may look like command names; completion and --version are urfave/cli's own.
		{[]string{"sync", "plugin"}, []string{"sync", "plugin"}},
		{[]string{"completion", "bash"}, []string{"completion", "bash"}},
		{[]string{"--version"}, []string{"--version"}},
		{[]string{"worker"}, []string{"worker"}},
	}
	for _, tt := range tests {
		got, err := NormalizeArgs(testApp(), append([]string{"skippr"}, tt.in...))
		if err != nil {
			t.Errorf("%v: %v", tt.in, err)
			continue
		}
		if want := append([]string{"skippr"}, tt.want...); !reflect.DeepEqual(got, want) {
			t.Errorf("NormalizeArgs(%q) = %q; want %q", tt.in, got, want)
		}
	}
}

// Unknown words are usage errors (exit 2) that name the closest real one; hidden commands are never suggested.
func TestNormalizeArgsErrors(t *testing.T) {
	tests := []struct {
		in   []string
		want string
	}{
		{[]string{"synch"}, `unknown command "synch" for skippr; did you mean sync? (see skippr --help)`},
		{[]string{"plugin", "instal", "x"}, `unknown command "instal" for skippr plugin; did you mean install? (see skippr plugin --help)`},
		{[]string{"sync", "--onse"}, "sync: unknown flag --onse; did you mean --once? (see skippr sync --help)"},
		{[]string{"--log-levl", "debug", "sync"}, "unknown flag --log-levl; did you mean --log-level? (see skippr --help)"},
		{[]string{"registry", "add", "--nme", "x"}, "registry add: unknown flag --nme; did you mean --name? (see skippr registry add --help)"},
		{[]string{"help", "plugin", "remov"}, `unknown command "remov" for skippr plugin; did you mean remove?`},
		{[]string{"worke"}, `unknown command "worke" for skippr (see skippr --help)`},
		{[]string{"sync", "-x"}, "sync: unknown flag -x (see skippr sync --help)"},
	}
	for _, tt := range tests {
		_, err := NormalizeArgs(testApp(), append([]string{"skippr"}, tt.in...))
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != ExitUsage || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NormalizeArgs(%q) = %v; want exit %d and %q", tt.in, err, ExitUsage, tt.want)
		}
	}
}

// Args wants exactly the arguments ArgsUsage names, then the required flags.
func TestArgs(t *testing.T) {
	tests := []struct {
		args    []string
		want    []string
		wantErr string
	}{
		{[]string{"d", "a", "--name", "x"}, []string{"d", "a"}, ""},
		{[]string{"d", "--name", "x"}, nil, "registry add: want DIR ARTIFACT, got 1 arguments"},
		{[]string{"d", "a", "b"}, nil, "registry add: want DIR ARTIFACT, got 3 arguments"},
		{[]string{"d", "a"}, nil, "registry add: missing --name (see --help)"},
	}
	for _, tt := range tests {
		app := testApp()
		add := app.Commands[3].Commands[0]
		add.ArgsUsage = "DIR ARTIFACT"
		var got []string
		var gotErr error
		add.Action = func(_ context.Context, c *cli.Command) error { got, gotErr = Args(c, 2, "name"); return nil }
		if err := app.Run(context.Background(), append([]string{"skippr", "registry", "add"}, tt.args...)); err != nil {
			t.Fatal(err)
		}
		var ee *exitError
		switch {
		case tt.wantErr == "" && (gotErr != nil || !reflect.DeepEqual(got, tt.want)):
			t.Errorf("%q: %q, %v; want %q", tt.args, got, gotErr, tt.want)
		case tt.wantErr != "" && (!errors.As(gotErr, &ee) || ee.code != ExitUsage || gotErr.Error() != tt.wantErr):
			t.Errorf("%q: %v; want exit %d and %q", tt.args, gotErr, ExitUsage, tt.wantErr)
		}
	}
}

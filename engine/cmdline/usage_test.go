package cmdline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/run"
	"github.com/skippr-dev/skippr/registry"
)

// Flag errors urfave/cli reports itself go through OnUsageError: exit 2, the command named, a suggestion.
func TestOnUsageError(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"sync", "--progress-every", "soon"}, `sync: invalid value "soon" for flag -progress-every`},
		{[]string{"sync", "--progress-every", "soon"}, "(see skippr sync --help)"},
	}
	for _, tt := range tests {
		app := testApp()
		app.Writer, app.ErrWriter = &bytes.Buffer{}, &bytes.Buffer{}
		app.OnUsageError = OnUsageError
		err := app.Run(context.Background(), append([]string{"skippr"}, tt.args...))
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != ExitUsage || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v; want exit %d and %q", tt.args, err, ExitUsage, tt.want)
		}
	}
}

// SetUsageErrors takes the help subcommand from leaves: `sync help` names a pipeline "help".
func TestSetUsageErrorsHidesLeafHelp(t *testing.T) {
	for _, c := range testApp().Commands {
		if got, want := c.HideHelpCommand, len(c.Commands) == 0; got != want || c.OnUsageError == nil {
			t.Errorf("%s: HideHelpCommand %v, OnUsageError set %v; want %v, true", c.Name, got, c.OnUsageError != nil, want)
		}
	}
}

// RequireFlags names every missing flag at once, after the command's path.
func TestRequireFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string // "" when nothing is missing
	}{
		{[]string{"registry", "add"}, "registry add: missing --name, --home (see --help)"},
		{[]string{"registry", "add", "--name", "x"}, "registry add: missing --home (see --help)"},
		{[]string{"--home", "/h", "registry", "add", "--name", "x"}, ""},
	}
	for _, tt := range tests {
		app := testApp()
		var got error
		add := app.Commands[3].Commands[0]
		add.Action = func(_ context.Context, c *cli.Command) error { got = RequireFlags(c, "name", "home"); return nil }
		if err := app.Run(context.Background(), append([]string{"skippr"}, tt.args...)); err != nil {
			t.Fatal(err)
		}
		var ee *exitError
		switch {
		case tt.want == "" && got != nil:
			t.Errorf("%q: %v; want nil", tt.args, got)
		case tt.want != "" && (!errors.As(got, &ee) || ee.code != ExitUsage || got.Error() != tt.want):
			t.Errorf("%q: %v; want exit %d and %q", tt.args, got, ExitUsage, tt.want)
		}
	}
}

// Exit prints the redacted error and picks the code: WithCode's, urfave/cli's, else the engine's.
func TestExit(t *testing.T) {
	tests := []struct {
		name string
		err  error
		code int
		out  string
	}{
		{"nil", nil, ExitOK, ""},
		{"with code", WithCode(ExitNotFound, errors.New("gone")), ExitNotFound, "skippr: gone\n"},
		{"wrapped code", fmt.Errorf("outer: %w", WithCode(ExitVerify, errors.New("bad sum"))), ExitVerify, "skippr: outer: bad sum\n"},
		{"cli exit coder", cli.Exit("stop", 7), 7, "skippr: stop\n"},
		{"engine locked", &run.Error{Code: run.Locked, Err: errors.New("held")}, ExitLocked, "skippr: held\n"},
		{"registry checksum", fmt.Errorf("start: %w", registry.ErrChecksum), ExitFailure, ""},
		{"plain", errors.New("boom"), ExitFailure, "skippr: boom\n"},
		{"env value", errors.New(`could not parse "soon" as duration value from environment variable "X"`), ExitUsage,
			`skippr: could not parse "soon" as duration value from environment variable "X" (see skippr --help)` + "\n"},
		{"redacted", errors.New("password hunter2"), ExitFailure, "skippr: password ***\n"},
	}
	redact := func(s string) string { return strings.ReplaceAll(s, "hunter2", "***") }
	for _, tt := range tests {
		var out bytes.Buffer
		code := Exit(tt.err, "skippr", &out, redact)
		if code != tt.code || tt.out != "" && out.String() != tt.out {
			t.Errorf("%s: exit %d, printed %q; want %d, %q", tt.name, code, out.String(), tt.code, tt.out)
		}
	}
}

// The registry's errors map to the exit codes the docs promise.
func TestRegistryExitCode(t *testing.T) {
	tests := []struct {
		err  error
		code int
	}{
		{registry.ErrChecksum, ExitVerify},
		{registry.ErrSignature, ExitVerify},
		{registry.ErrNotFound, ExitNotFound},
		{registry.ErrUnreachable, ExitNotFound},
		{registry.ErrInvalid, ExitUsage},
		{errors.New("disk full"), ExitFailure},
	}
	for _, tt := range tests {
		if got := RegistryExitCode(fmt.Errorf("install: %w", tt.err)); got != tt.code {
			t.Errorf("%v: exit %d; want %d", tt.err, got, tt.code)
		}
	}
}

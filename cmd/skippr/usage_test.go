package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/engine/cmdline"
)

// runCaptured runs the CLI in-process and returns its exit code and stderr.
func runCaptured(t *testing.T, args ...string) (int, string) {
	t.Helper()
	code, _, stderr := runCapturedAll(t, args...)
	return code, stderr
}

// runCapturedAll runs the CLI in-process and returns its exit code, stdout and stderr.
func runCapturedAll(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	errf, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	defer errf.Close()
	code := runCLI(append([]string{"skippr"}, args...), out, errf)
	o, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(errf.Name())
	if err != nil {
		t.Fatal(err)
	}
	return code, string(o), string(b)
}

// `registry add --quiet` (what make registry runs once per plugin, then signs) drops the reminder to sign.
func TestRegistryAddQuiet(t *testing.T) {
	dir := t.TempDir()
	for i, quiet := range []bool{false, true} {
		bin := filepath.Join(dir, "bin")
		if err := os.WriteFile(bin, []byte("a darwin build "+strconv.Itoa(i)), 0o755); err != nil {
			t.Fatal(err)
		}
		args := []string{"registry", "add", filepath.Join(dir, "reg"), bin, "--name", "echo", "--version", "0.1." + strconv.Itoa(i),
			"--os", "darwin", "--arch", "arm64", "--kind", "source", "--protocol", "1"}
		if quiet {
			args = append(args, "--quiet")
		}
		code, stdout, stderr := runCapturedAll(t, args...)
		if code != 0 || !strings.Contains(stdout, "added ") || strings.Contains(stdout, "run `skippr registry sign") != !quiet {
			t.Errorf("quiet=%v: exit %d\nstdout:\n%s\nstderr:\n%s", quiet, code, stdout, stderr)
		}
	}
}

// Usage errors exit 2 and name the likely intended word; global flags work after the subcommand.
func TestUsageErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nothere.yml")
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"synch"}, exitUsage, `unknown command "synch" for skippr; did you mean sync?`},
		{[]string{"sync", "--onse"}, exitUsage, "sync: unknown flag --onse; did you mean --once?"},
		{[]string{"plugin", "instal", "x"}, exitUsage, `unknown command "instal" for skippr plugin; did you mean install?`},
		{[]string{"plugin", "install"}, exitUsage, "plugin install: want NAME[@CONSTRAINT], got 0 arguments"},
		{[]string{"--log-levl", "debug", "sync"}, exitUsage, "unknown flag --log-levl; did you mean --log-level?"},
		{[]string{"registry", "add", "d", "a", "--nme", "x"}, exitUsage, "registry add: unknown flag --nme; did you mean --name?"},
		{[]string{"sync", "--progress-every", "soon"}, exitUsage, `sync: invalid value "soon" for flag -progress-every`},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate" for skippr (see skippr --help)`},
		{[]string{"help", "synch"}, exitUsage, `unknown command "synch" for skippr; did you mean sync?`},
		{[]string{"help", "plugin", "instal"}, exitUsage, `unknown command "instal" for skippr plugin; did you mean install?`},
		// Global flags after the subcommand: the config named there is the one read.
		{[]string{"sync", "-c", missing}, exitUsage, "config " + missing + " not found"},
		{[]string{"sync", "--once", "--config=" + missing}, exitUsage, "config " + missing + " not found"},
		{[]string{"status", "--log-format", "yaml"}, exitUsage, `--log-format "yaml": want text or json`},
		{[]string{"sync", "orders", "--log-level", "loud"}, exitUsage, "--log-level"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stderr := runCaptured(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, tt.code, tt.want)
			}
		})
	}
}

// --help anywhere on a leaf prints that command's help and exits 0; the word help as an argument
// stays an argument (a pipeline or plugin may be called that). urfave/cli's completion command works.
func TestHelpAndCompletion(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nothere.yml")
	tests := []struct {
		args   []string
		code   int
		stdout string // printed on stdout
		stderr string // printed on stderr
	}{
		{[]string{"sync", "orders", "--help"}, cmdline.ExitOK, "skippr sync - run pipelines", ""},
		{[]string{"plugin", "install", "datagen", "-h"}, cmdline.ExitOK, "skippr plugin install - install a plugin", ""},
		{[]string{"registry", "add", "d", "a", "--name", "x", "--help"}, cmdline.ExitOK, "skippr registry add - add a plugin binary", ""},
		{[]string{"help", "sync"}, cmdline.ExitOK, "skippr sync - run pipelines", ""},
		{[]string{"help", "plugin", "install"}, cmdline.ExitOK, "skippr plugin install - install a plugin", ""},
		{[]string{"help"}, cmdline.ExitOK, "skippr - continuous change-data-capture", ""},
		{[]string{"sync", "help", "-c", missing}, exitUsage, "", "config " + missing + " not found"},
		{[]string{"completion", "bash"}, cmdline.ExitOK, "shell completion script", ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCapturedAll(t, tt.args...)
			if code != tt.code || !strings.Contains(stdout, tt.stdout) || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d, stdout with %q, stderr with %q", code, stdout, stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}

// A flag's environment variable with a value the flag cannot hold is a usage error too.
func TestUsageErrorFromEnv(t *testing.T) {
	t.Setenv("SKIPPR_PLUGIN_START_TIMEOUT", "soon")
	code, stderr := runCaptured(t, "status")
	if want := `environment variable "SKIPPR_PLUGIN_START_TIMEOUT"`; code != exitUsage || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, exitUsage, want)
	}
}

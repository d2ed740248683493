// Command skippr is the engine's command line: plugins, registries, pipelines and the WAL.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/redact"
	"github.com/skippr-dev/skippr/engine/run"
	"github.com/skippr-dev/skippr/engine/shutdown"
)

// Exit codes. Scripts rely on these, so they never change meaning.
const (
	exitOK       = 0
	exitFailure  = 1 // the work failed (a plugin error, a WAL error, a destination error)
	exitUsage    = 2 // bad flags, bad config, unknown names: fix the input and run again
	exitNotFound = 3 // a plugin, version or registry that does not exist or cannot be reached
	exitVerify   = 4 // checksum, signature or lock-file verification failed
	exitLocked   = 5 // the WAL is held by another writer
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

// globals carries what every command shares; commands read it instead of package state.
type globals struct {
	ConfigPath string // path to skippr.yml
	Home       string // $SKIPPR_HOME: installed plugins, state
	Log        *slog.Logger
	// Redact hides the config's ${ENV} values in everything printed; filled when the config is loaded.
	Redact *redact.Redactor
	// PluginStartTimeout bounds a plugin's handshake (go-plugin's own default is 60s).
	PluginStartTimeout time.Duration
	LogFormat          string    // text or json
	Started            time.Time // when the command began, for summaries
}

// exitError carries an exit code through urfave/cli to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

func main() {
	os.Exit(runCLI(os.Args, os.Stdout, os.Stderr))
}

func runCLI(args []string, stdout, stderr *os.File) int {
	g := &globals{Redact: redact.New()}
	app := newApp(g)
	// Everything printed passes the redactor: plugin names, paths and messages can hold ${ENV} values.
	app.Writer = g.Redact.Writer(stdout)
	app.ErrWriter = g.Redact.Writer(stderr)
	ctx, stop := shutdown.OnSignals(context.Background(), 0, os.Interrupt, syscall.SIGTERM) // sync sets a grace period
	defer stop()
	args, err := normalizeArgs(app, args)
	if err == nil {
		err = app.Run(ctx, args)
	}
	if err == nil {
		return exitOK
	}
	// urfave/cli v3 returns a flag's unparsable environment value ("could not parse … from environment
	// variable …", Flag.PostParse) as a bare error, not through OnUsageError as v2 did: a usage error all the same.
	var ee *exitError
	if !errors.As(err, &ee) && strings.HasPrefix(err.Error(), "could not parse ") {
		err = withCode(exitUsage, fmt.Errorf("%w (see %s --help)", err, app.Name))
	}
	fmt.Fprintf(stderr, "skippr: %s\n", g.Redact.String(err.Error()))
	if errors.As(err, &ee) {
		return ee.code
	}
	var ce cli.ExitCoder
	if errors.As(err, &ce) {
		return ce.ExitCode()
	}
	return exitCode(run.CodeOf(err))
}

// exitCode maps the engine's codes to the exit codes.
func exitCode(c run.Code) int {
	switch c {
	case run.Refused:
		return exitUsage
	case run.NotFound:
		return exitNotFound
	case run.Unverified:
		return exitVerify
	case run.Locked:
		return exitLocked
	}
	return exitFailure
}

func defaultHome() string {
	if h := os.Getenv("SKIPPR_HOME"); h != "" {
		return h
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".skippr")
	}
	return ".skippr"
}

// newApp builds the command tree. The root's flags are global: urfave/cli v3 makes them persistent, so a
// subcommand accepts them too, and normalizeArgs moves them in front of it so that Before reads them.
func newApp(g *globals) *cli.Command {
	app := &cli.Command{
		Name:                  "skippr",
		Usage:                 "continuous change-data-capture ingest through a write-ahead log",
		Version:               version,
		EnableShellCompletion: true,
		ExitErrHandler:        func(context.Context, *cli.Command, error) {}, // runCLI() prints and maps exit codes
		OnUsageError:          onUsageError,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Value: "skippr.yml", Sources: cli.EnvVars("SKIPPR_CONFIG"), Usage: "pipeline configuration file"},
			&cli.StringFlag{Name: "home", Value: defaultHome(), Sources: cli.EnvVars("SKIPPR_HOME"), Usage: "directory for installed plugins and local state"},
			&cli.StringFlag{Name: "log-level", Value: "info", Sources: cli.EnvVars("SKIPPR_LOG_LEVEL"), Usage: "debug, info, warn or error"},
			&cli.StringFlag{Name: "log-format", Value: "text", Sources: cli.EnvVars("SKIPPR_LOG_FORMAT"), Usage: "text or json"},
			&cli.DurationFlag{Name: "plugin-start-timeout", Value: 60 * time.Second, Sources: cli.EnvVars("SKIPPR_PLUGIN_START_TIMEOUT"), Usage: "how long a plugin may take to start (a large binary on a slow disk may need more)"},
		},
		Before: func(ctx context.Context, c *cli.Command) (context.Context, error) {
			g.ConfigPath = c.String("config")
			g.Home = c.String("home")
			g.PluginStartTimeout = c.Duration("plugin-start-timeout")
			g.LogFormat = c.String("log-format")
			g.Started = time.Now()
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(c.String("log-level"))); err != nil {
				return ctx, withCode(exitUsage, fmt.Errorf("--log-level: %w", err))
			}
			opts := &slog.HandlerOptions{Level: lvl}
			switch c.String("log-format") {
			case "json":
				g.Log = slog.New(g.Redact.Handler(slog.NewJSONHandler(c.Root().ErrWriter, opts)))
			case "text":
				g.Log = slog.New(g.Redact.Handler(slog.NewTextHandler(c.Root().ErrWriter, opts)))
			default:
				return ctx, withCode(exitUsage, fmt.Errorf("--log-format %q: want text or json", c.String("log-format")))
			}
			return ctx, nil
		},
		Commands: commands(g),
	}
	setUsageErrors(app.Commands)
	return app
}

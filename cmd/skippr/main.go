// Command skippr is the engine's command line: plugins, registries, pipelines and the WAL.
package main

import (
	"context"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/cmdline"
	"github.com/skippr-dev/skippr/engine/redact"
	"github.com/skippr-dev/skippr/engine/shutdown"
)

// Short names for the exit codes and helpers of engine/cmdline, which every command uses.
const (
	exitFailure = cmdline.ExitFailure
	exitUsage   = cmdline.ExitUsage
)

func withCode(code int, err error) error { return cmdline.WithCode(code, err) }

func registryExitCode(err error) int { return cmdline.RegistryExitCode(err) }

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
	args, err := cmdline.NormalizeArgs(app, args)
	if err == nil {
		err = app.Run(ctx, args)
	}
	return cmdline.Exit(err, app.Name, stderr, g.Redact.String)
}

// newApp builds the command tree. The root's flags are global: urfave/cli v3 makes them persistent, so a
// subcommand accepts them too, and cmdline.NormalizeArgs moves them in front of it so that Before reads them.
func newApp(g *globals) *cli.Command {
	app := &cli.Command{
		Name:                  "skippr",
		Usage:                 "continuous change-data-capture ingest through a write-ahead log",
		Version:               version,
		EnableShellCompletion: true,
		ExitErrHandler:        func(context.Context, *cli.Command, error) {}, // runCLI() prints and maps exit codes
		OnUsageError:          cmdline.OnUsageError,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Value: "skippr.yml", Sources: cli.EnvVars("SKIPPR_CONFIG"), Usage: "pipeline configuration file"},
			&cli.StringFlag{Name: "home", Value: cmdline.DefaultHome(), Sources: cli.EnvVars("SKIPPR_HOME"), Usage: "directory for installed plugins and local state"},
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
			var err error
			g.Log, err = cmdline.NewLogger(c.String("log-level"), c.String("log-format"), c.Root().ErrWriter, g.Redact.Handler)
			return ctx, err
		},
		Commands: commands(g),
	}
	cmdline.SetUsageErrors(app.Commands)
	return app
}

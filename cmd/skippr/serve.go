package main

import (
	"context"
	"fmt"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/cmd/internal/servecli"
)

// serveCommand parses `skippr serve`'s flags and hands over to the companion binary skippr-serve, which runs
// the Flight SQL server: linking gRPC's server and Arrow Flight here would take the core over its size limit
// (see package servecli). The companion replaces this process (exec), so signals, output and the exit status
// are its own; the global flags travel as the environment variables they are read from.
func serveCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:        servecli.Name,
		Usage:       servecli.Usage,
		Description: servecli.Description,
		Flags:       servecli.Flags(),
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.Args().Len() > 0 {
				return withCode(exitUsage, fmt.Errorf("serve: unexpected arguments %v", c.Args().Slice()))
			}
			env := append(os.Environ(),
				"SKIPPR_CONFIG="+g.ConfigPath, "SKIPPR_HOME="+g.Home,
				"SKIPPR_LOG_LEVEL="+c.Root().String("log-level"), "SKIPPR_LOG_FORMAT="+g.LogFormat,
				"SKIPPR_PLUGIN_START_TIMEOUT="+g.PluginStartTimeout.String())
			return withCode(exitFailure, servecli.Exec(servecli.Args(c), env))
		},
	}
}

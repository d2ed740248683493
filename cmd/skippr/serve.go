package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

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
			bin, err := companion()
			if err != nil {
				return withCode(exitFailure, err)
			}
			env := append(os.Environ(),
				"SKIPPR_CONFIG="+g.ConfigPath, "SKIPPR_HOME="+g.Home,
				"SKIPPR_LOG_LEVEL="+c.Root().String("log-level"), "SKIPPR_LOG_FORMAT="+g.LogFormat,
				"SKIPPR_PLUGIN_START_TIMEOUT="+g.PluginStartTimeout.String())
			args := append([]string{bin}, servecli.Args(c)...)
			return withCode(exitFailure, fmt.Errorf("serve: run %s: %w", bin, syscall.Exec(bin, args, env)))
		},
	}
}

// companion finds skippr-serve beside this executable, else in PATH.
func companion() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), servecli.Companion)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	p, err := exec.LookPath(servecli.Companion)
	if errors.Is(err, exec.ErrNotFound) {
		return "", fmt.Errorf("serve: the Flight SQL server is the companion binary %s, which is neither beside this skippr nor in PATH: install it from the same release archive (make build puts it in bin/)", servecli.Companion)
	}
	return p, err
}

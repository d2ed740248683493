package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/cmdline"
	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/pluginhost"
	"github.com/skippr-dev/skippr/engine/run"
)

// loadConfig reads the pipeline config; its errors already name file, line and key.
func loadConfig(g *globals) (*config.Config, error) {
	cfg, err := config.Load(g.ConfigPath, os.LookupEnv)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, withCode(exitUsage, fmt.Errorf("config %s not found (set --config or SKIPPR_CONFIG)", g.ConfigPath))
		}
		return nil, withCode(exitUsage, err)
	}
	g.Redact.Add(cfg.Secrets())
	return cfg, nil
}

func lockPath(g *globals) string { return filepath.Join(filepath.Dir(g.ConfigPath), "skippr.lock") }

// hostOptions are the plugin host's options for this invocation: installs go to the user's home, progress
// to stderr.
func hostOptions(c *cli.Command, g *globals, offline bool) run.HostOptions {
	return run.HostOptions{
		Home: g.Home, LockPath: lockPath(g), Offline: offline, StartTimeout: g.PluginStartTimeout, Log: g.Log,
		Progress: c.Root().ErrWriter, ProgressTTY: cmdline.IsTerminal(c.Root().ErrWriter),
	}
}

// newHost builds the plugin host for a config (run.NewHost).
func newHost(c *cli.Command, g *globals, cfg *config.Config, offline bool) (*pluginhost.Host, error) {
	return run.NewHost(cfg, hostOptions(c, g, offline))
}

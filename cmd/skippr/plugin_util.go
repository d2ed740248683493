package main

import (
	"errors"
	"io/fs"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/run"
	"github.com/skippr-dev/skippr/registry"
)

// pluginClient builds a registry client for a plugin command: the --registry
// URLs when given, else the config's registries, the trust store and the
// project's registry, in that order.
func pluginClient(c *cli.Command, g *globals) (*registry.Client, error) {
	var configured []registry.Registry
	if pathExists(g.ConfigPath) {
		cfg, err := loadConfig(g)
		if err != nil {
			return nil, err
		}
		if configured, err = run.Registries(cfg); err != nil {
			return nil, err
		}
	}
	regs, err := registry.Pick(g.Home, configured, c.StringSlice("registry"), c.StringSlice("key"))
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	return run.RegistryClient(regs, hostOptions(c, g, false))
}

func pathExists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

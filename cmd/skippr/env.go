package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/pluginhost"
	"github.com/skippr-dev/skippr/engine/run"
	"github.com/skippr-dev/skippr/registry"
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

// configRegistries converts the config's registries; key files are relative to the config's directory.
func configRegistries(cfg *config.Config) ([]registry.Registry, error) {
	var out []registry.Registry
	for _, r := range cfg.Registries {
		reg := registry.Registry{URL: r.URL}
		for _, k := range r.Keys {
			pk, err := registry.ParsePublicKey(k)
			if err != nil {
				return nil, withCode(exitUsage, fmt.Errorf("%s: registries: %s: key: %w", r.Pos, r.URL, err))
			}
			reg.Keys = append(reg.Keys, pk)
		}
		for _, f := range r.KeyFiles {
			if !filepath.IsAbs(f) {
				f = filepath.Join(cfg.Dir, f)
			}
			pk, err := registry.ReadPublicKeyFile(f)
			if err != nil {
				return nil, withCode(exitUsage, fmt.Errorf("%s: registries: %s: key file: %w", r.Pos, r.URL, err))
			}
			reg.Keys = append(reg.Keys, pk)
		}
		out = append(out, reg)
	}
	return out, nil
}

// newHost builds the plugin host for a config: registries from the config first, then the user's trust store,
// then the project's own registry.
func newHost(c *cli.Command, g *globals, cfg *config.Config, offline bool) (*pluginhost.Host, error) {
	fromConfig, err := configRegistries(cfg)
	if err != nil {
		return nil, err
	}
	sources, err := registry.Sources(g.Home, fromConfig)
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	rc, err := newRegistryClient(c, g, sources)
	if err != nil {
		return nil, err
	}
	return &pluginhost.Host{
		Installer:    rc,
		LockPath:     lockPath(g),
		Offline:      offline,
		Logger:       g.Log,
		PluginLog:    pluginhost.PluginLog(g.Log),
		StartTimeout: g.PluginStartTimeout,
	}, nil
}

// newRegistryClient is the registry client of sync and of the plugin commands: installs go to the user's home,
// progress to stderr.
func newRegistryClient(c *cli.Command, g *globals, regs []registry.Registry) (*registry.Client, error) {
	rc, err := registry.New(registry.Options{
		Home:        g.Home,
		Registries:  regs,
		Protocols:   pluginhost.Protocols,
		Progress:    c.Root().ErrWriter,
		ProgressTTY: isTerminal(c.Root().ErrWriter),
		Log:         g.Log,
	})
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	return rc, nil
}

// registryExitCode maps registry errors to exit codes.
func registryExitCode(err error) int { return exitCode(run.RegistryCode(err)) }

// isTerminal reports whether w is a terminal (progress bars redraw in place only there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

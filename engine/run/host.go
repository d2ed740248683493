package run

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/pluginhost"
	"github.com/skippr-dev/skippr/registry"
)

// HostOptions say where plugins are installed and pinned and how a plugin starts.
type HostOptions struct {
	Home         string // $SKIPPR_HOME: installed plugins and the trust store
	LockPath     string // skippr.lock
	Offline      bool   // never contact a registry
	StartTimeout time.Duration
	Log          *slog.Logger
	// Progress receives download progress; ProgressTTY redraws it in place (a terminal).
	Progress    io.Writer
	ProgressTTY bool
}

// NewHost builds the plugin host for cfg: registries from the config first, then the user's trust store, then
// the project's own registry. Its errors are Refused.
func NewHost(cfg *config.Config, o HostOptions) (*pluginhost.Host, error) {
	fromConfig, err := Registries(cfg)
	if err != nil {
		return nil, err
	}
	sources, err := registry.Sources(o.Home, fromConfig)
	if err != nil {
		return nil, withCode(Refused, err)
	}
	rc, err := RegistryClient(sources, o)
	if err != nil {
		return nil, err
	}
	return &pluginhost.Host{
		Installer:    rc,
		LockPath:     o.LockPath,
		Offline:      o.Offline,
		Logger:       o.Log,
		PluginLog:    pluginhost.PluginLog(o.Log),
		StartTimeout: o.StartTimeout,
	}, nil
}

// RegistryClient is the client that installs plugins from regs into o.Home, for the host and for the plugin
// commands alike. Its errors are Refused.
func RegistryClient(regs []registry.Registry, o HostOptions) (*registry.Client, error) {
	rc, err := registry.New(registry.Options{
		Home:        o.Home,
		Registries:  regs,
		Protocols:   pluginhost.Protocols,
		Progress:    o.Progress,
		ProgressTTY: o.ProgressTTY,
		Log:         o.Log,
	})
	if err != nil {
		return nil, withCode(Refused, err)
	}
	return rc, nil
}

// Registries converts the config's registries; key files are relative to the config's directory. Its errors
// name the registry's place in the file and are Refused.
func Registries(cfg *config.Config) ([]registry.Registry, error) {
	var out []registry.Registry
	for _, r := range cfg.Registries {
		reg := registry.Registry{URL: r.URL}
		for _, k := range r.Keys {
			pk, err := registry.ParsePublicKey(k)
			if err != nil {
				return nil, withCode(Refused, fmt.Errorf("%s: registries: %s: key: %w", r.Pos, r.URL, err))
			}
			reg.Keys = append(reg.Keys, pk)
		}
		for _, f := range r.KeyFiles {
			if !filepath.IsAbs(f) {
				f = filepath.Join(cfg.Dir, f)
			}
			pk, err := registry.ReadPublicKeyFile(f)
			if err != nil {
				return nil, withCode(Refused, fmt.Errorf("%s: registries: %s: key file: %w", r.Pos, r.URL, err))
			}
			reg.Keys = append(reg.Keys, pk)
		}
		out = append(out, reg)
	}
	return out, nil
}

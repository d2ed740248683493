// Package pluginhost turns a configured connection into a running, verified plugin process: it finds the
// binary (installed from a registry and pinned in the lock file, or a local path override), re-checks its
// checksum, and starts it with nothing of the host's environment.
package pluginhost

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/registry"
)

// Protocols are the plugin protocol versions this engine speaks.
var Protocols = []int{protocol.Version}

// Connection names the plugin a connection uses.
type Connection struct {
	Name       string // the connection's name in the config
	Plugin     string // the plugin's name in a registry
	Constraint string // version constraint
	Path       string // local override: use this binary, unverified
}

// Installer installs or finds a pinned plugin; *registry.Client is one.
type Installer interface {
	// Ensure returns an installed binary whose SHA-256 it has verified against the pin (registry.ErrChecksum
	// otherwise), with that checksum.
	Ensure(ctx context.Context, req registry.EnsureRequest) (registry.Installed, error)
	// UpgradeHint names the version of a plugin to use instead of one that speaks no protocol of the engine.
	UpgradeHint(ctx context.Context, name string, offline bool) string
}

// Binary is a plugin binary ready to start.
type Binary struct {
	Path    string
	Version string
	SHA256  []byte // nil for an unverified local override
}

// Host starts plugins.
type Host struct {
	Installer Installer
	LockPath  string
	Offline   bool
	Logger    *slog.Logger
	// PluginLog receives the plugins' own log lines (hclog format); nil discards them.
	PluginLog    hclog.Logger
	StartTimeout time.Duration
}

// Resolve finds the binary of a connection, installing it on first use.
func (h *Host) Resolve(ctx context.Context, c Connection) (Binary, error) {
	if c.Path != "" {
		if _, err := os.Stat(c.Path); err != nil {
			return Binary{}, fmt.Errorf("connection %s: local plugin path: %w", c.Name, err)
		}
		h.logger().Warn("plugin runs from a local path: its checksum is not verified", "connection", c.Name, "path", c.Path)
		return Binary{Path: c.Path, Version: "local"}, nil
	}
	if h.Installer == nil {
		return Binary{}, fmt.Errorf("connection %s: no registry configured to install plugin %s", c.Name, c.Plugin)
	}
	inst, err := h.Installer.Ensure(ctx, registry.EnsureRequest{Name: c.Plugin, Constraint: c.Constraint, LockPath: h.LockPath, Offline: h.Offline})
	if err != nil {
		return Binary{}, fmt.Errorf("connection %s: %w", c.Name, err)
	}
	sum, err := hex.DecodeString(inst.SHA256)
	if err != nil {
		return Binary{}, fmt.Errorf("connection %s: plugin %s: bad checksum %q: %w", c.Name, c.Plugin, inst.SHA256, err)
	}
	return Binary{Path: inst.Path, Version: inst.Version, SHA256: sum}, nil
}

// Start resolves and starts the plugin of a connection.
func (h *Host) Start(ctx context.Context, c Connection) (*client.Client, Binary, error) {
	b, err := h.Resolve(ctx, c)
	if err != nil {
		return nil, b, err
	}
	// No second hash here: Ensure has just verified the file against its pin (naming the file and the pin
	// when it differs), and go-plugin hashes it again right before exec (SecureConfig). A third read of a
	// 100 MB binary cost about a second of every pipeline start on a loaded host (BENCHMARKS.md, fleet).
	cl, err := client.Start(ctx, client.Config{
		Path:         b.Path,
		SHA256:       b.SHA256,
		Env:          Env(),
		Protocols:    Protocols,
		StartTimeout: h.StartTimeout,
		Logger:       h.PluginLog,
	})
	if errors.Is(err, client.ErrProtocol) {
		// Another version of the plugin is the fix: a config error, so no restart tries the same binary again.
		return nil, b, fault.ConfigErr(fmt.Errorf("connection %s: %w", c.Name, err), h.upgradeHint(ctx, c))
	}
	if err != nil {
		return nil, b, fmt.Errorf("connection %s: %w", c.Name, err)
	}
	h.logger().Debug("plugin started", "connection", c.Name, "plugin", c.Plugin, "version", b.Version, "protocol", cl.Protocol)
	return cl, b, nil
}

// upgradeHint says which version of a connection's plugin speaks the engine's protocol.
func (h *Host) upgradeHint(ctx context.Context, c Connection) string {
	if h.Installer == nil || c.Plugin == "" {
		return fmt.Sprintf("rebuild the plugin with a plugin SDK that speaks protocol %v", Protocols)
	}
	hint := h.Installer.UpgradeHint(ctx, c.Plugin, h.Offline)
	if c.Path != "" {
		hint += " (and remove the connection's `path:`, which overrides the registry)"
	}
	return hint
}

func (h *Host) logger() *slog.Logger {
	if h.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Logger
}

// Env is all a plugin sees of the environment: a temp dir and a time zone. Settings, secrets included,
// travel in the protocol, already interpolated from the engine's environment.
func Env() []string {
	var env []string
	for _, k := range []string{"TMPDIR", "TZ"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

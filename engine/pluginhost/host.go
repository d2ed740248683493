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
	// File is the identity of the verified bytes (zero when unknown); see Start.
	File registry.FileID
	// Resolve is how long finding it took: reading the lock, installing on first use, verifying (a stamp's
	// check once verified, registry/verified.go). Start sets it, for the start's breakdown in the log.
	Resolve time.Duration
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
	return Binary{Path: inst.Path, Version: inst.Version, SHA256: sum, File: inst.File}, nil
}

// Start resolves and starts the plugin of a connection.
func (h *Host) Start(ctx context.Context, c Connection) (*client.Client, Binary, error) {
	began := time.Now()
	b, err := h.Resolve(ctx, c)
	b.Resolve = time.Since(began)
	if err != nil {
		return nil, b, err
	}
	// Ensure has just verified the file against its pin (naming the file and the pin when it differs). When it
	// knows the identity of the bytes it verified, the process is checked to run that very file, unchanged,
	// right after it starts (checkExe): no second read of a binary of up to 125 MB, and no window between the
	// check and exec. Otherwise go-plugin hashes it again right before exec (SecureConfig).
	want := b.SHA256
	if !b.File.IsZero() {
		want = nil
	}
	cl, err := client.Start(ctx, client.Config{
		Path:         b.Path,
		SHA256:       want,
		Env:          Env(),
		Protocols:    Protocols,
		StartTimeout: h.StartTimeout,
		Logger:       h.PluginLog,
	})
	if err == nil && want == nil && !b.File.IsZero() {
		if err = checkExe(cl.Pid(), b); err != nil {
			cl.Kill()
			return nil, b, fmt.Errorf("connection %s: %w", c.Name, err)
		}
	}
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

// checkExe makes sure process pid runs the file whose bytes were verified: the same inode, not changed since
// (a change of its bytes moves its ctime, which nobody can set back; registry/verified.go).
func checkExe(pid int, b Binary) error {
	if pid <= 0 {
		return fmt.Errorf("plugin %s: %w: no process id to check which file it runs", b.Path, registry.ErrChecksum)
	}
	got, err := registry.StatID(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return fmt.Errorf("plugin %s: check which file process %d runs: %w", b.Path, pid, err)
	}
	if got != b.File {
		return fmt.Errorf("plugin %s: %w: the started process runs other bytes than were verified (the file changed or was replaced between its check and its start); run again to re-verify it, and find who writes to $SKIPPR_HOME/plugins",
			b.Path, registry.ErrChecksum)
	}
	return nil
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

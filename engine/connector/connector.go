package connector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/pluginhost"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

var (
	// ErrStart matches a plugin that could not be resolved, verified or started; the error also wraps the
	// registry's or client's reason (registry.ErrNotFound, registry.ErrChecksum, client.ErrProtocol, …).
	ErrStart = errors.New("plugin did not start")
	// ErrIdentity matches a binary installed under a plugin's name that says it is another plugin.
	ErrIdentity = errors.New("plugin is not the one the connection names")
	// ErrSettings matches a connection whose settings the plugin's schema rejects (or that cannot be encoded).
	ErrSettings = errors.New("connection settings rejected")
	// ErrKind matches a plugin asked to take a role (source, destination) it cannot.
	ErrKind = errors.New("plugin cannot take this role")
)

// classed is err, matching class too; its message is err's alone, so messages stay as the user knew them.
type classed struct{ err, class error }

func (e *classed) Error() string   { return e.err.Error() }
func (e *classed) Unwrap() []error { return []error{e.err, e.class} }

func classify(class, err error) error { return &classed{err: err, class: class} }

// Starter resolves, verifies and starts a plugin binary; *pluginhost.Host is one.
type Starter interface {
	Start(ctx context.Context, c pluginhost.Connection) (*client.Client, pluginhost.Binary, error)
}

// Plugin is a connection's running plugin with its checked settings.
type Plugin struct {
	Conn     *config.Connection
	Spec     Spec
	Settings []byte // JSON, validated against Spec.SettingsSchema

	// Took is how long its start took, by step (Start and StartAll fill it; zero for Attach).
	Took StartTimes

	client *client.Client
	caps   capsCache
}

// StartTimes is how long a plugin's start took, by step: what `skippr sync` logs as the start's breakdown.
type StartTimes struct {
	Resolve time.Duration // find the binary, install it on first use, verify it (pluginhost.Binary.Resolve)
	Exec    time.Duration // exec it, go-plugin's handshake, the check of which file the process runs
	Spec    time.Duration // its spec (the first call), the identity and settings checks
}

// Start starts a connection's plugin and checks it against the connection (see the package doc). The caller
// kills the plugin.
func Start(ctx context.Context, host Starter, cn *config.Connection) (*Plugin, error) {
	return start(ctx, host, cn, true)
}

// Attach is a Plugin over a client started without Start (tests, benchmarks that start a binary they built):
// settings are taken as they are, the identity is not checked, and Spec is empty. Conn names the client's
// plugin, for messages.
func Attach(cl *client.Client, settings []byte) *Plugin {
	return &Plugin{Conn: &config.Connection{Name: cl.Name(), Plugin: cl.Name()}, Settings: settings, client: cl}
}

// StartUnconfigured starts a plugin the engine calls without settings (the query engine, whose connection may
// be one the engine made up): the identity is checked, the settings are not.
func StartUnconfigured(ctx context.Context, host Starter, cn *config.Connection) (*Plugin, error) {
	return start(ctx, host, cn, false)
}

func start(ctx context.Context, host Starter, cn *config.Connection, withSettings bool) (*Plugin, error) {
	began := time.Now()
	cl, b, err := host.Start(ctx, pluginhost.Connection{Name: cn.Name, Plugin: cn.Plugin, Constraint: cn.Version, Path: cn.Path})
	if err != nil {
		return nil, classify(ErrStart, err)
	}
	p := &Plugin{Conn: cn, client: cl}
	// kill ends a plugin this start gives up on: at once when ctx ended (a hard stop waits for no graceful
	// exit, see KillAllNow), cleanly otherwise.
	kill := func() {
		if ctx.Err() != nil {
			cl.KillNow()
			return
		}
		cl.Kill()
	}
	started := time.Now()
	p.Took.Resolve, p.Took.Exec = b.Resolve, max(started.Sub(began)-b.Resolve, 0)
	defer func() { p.Took.Spec = time.Since(started) }()
	if p.Spec, err = spec(ctx, cl); err != nil {
		kill()
		return nil, fmt.Errorf("connection %s: %w", cn.Name, err)
	}
	if p.Spec.Name != cn.Plugin && cn.Path == "" {
		kill()
		return nil, classify(ErrIdentity, fmt.Errorf("connection %s: the binary installed as plugin %s says it is %q", cn.Name, cn.Plugin, p.Spec.Name))
	}
	if !withSettings {
		return p, nil
	}
	if err := config.ValidateSettings(cn, p.Spec.SettingsSchema); err != nil {
		kill()
		return nil, classify(ErrSettings, err)
	}
	if p.Settings, err = cn.SettingsJSON(); err != nil {
		kill()
		return nil, classify(ErrSettings, fmt.Errorf("connection %s: %w", cn.Name, err))
	}
	return p, nil
}

// StartAll starts the plugins of several connections at once, the way Start starts one: a pipeline's start
// (and a fleet takeover) waits for the slowest plugin rather than for the sum of them — hashing and starting a
// 100 MB destination binary takes seconds on a loaded host. Connections of one plugin start one after the
// other, so that a first start that installs it does not race itself on the lock file. On an error every
// plugin started is killed (at once when ctx ended: a hard stop during the start) and the error of the first
// connection (in order) that failed is returned; otherwise the caller kills them all.
func StartAll(ctx context.Context, host Starter, cns []*config.Connection) ([]*Plugin, error) {
	out := make([]*Plugin, len(cns))
	errs := make([]error, len(cns))
	byPlugin := map[string][]int{}
	var order []string
	for i, cn := range cns {
		key := cn.Plugin + "\x00" + cn.Path
		if _, ok := byPlugin[key]; !ok {
			order = append(order, key)
		}
		byPlugin[key] = append(byPlugin[key], i)
	}
	var wg sync.WaitGroup
	for _, key := range order {
		wg.Go(func() {
			for _, i := range byPlugin[key] {
				if out[i], errs[i] = Start(ctx, host, cns[i]); errs[i] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			if ctx.Err() != nil {
				KillAllNow(out) // a hard stop during the start: see KillAllNow
			} else {
				KillAll(out)
			}
			return nil, err
		}
	}
	return out, nil
}

// KillAll kills every plugin of ps that is not nil.
func KillAll(ps []*Plugin) {
	for _, p := range ps {
		if p != nil {
			p.Kill()
		}
	}
}

// KillAllNow kills every plugin of ps that is not nil at once (KillNow), all together: a hard stop waits for
// the slowest plugin's death, not for the sum of their graceful exits.
func KillAllNow(ps []*Plugin) {
	var wg sync.WaitGroup
	for _, p := range ps {
		if p != nil {
			wg.Go(p.KillNow)
		}
	}
	wg.Wait()
}

// Kill stops the plugin's process, letting it exit cleanly first.
func (p *Plugin) Kill() { p.client.Kill() }

// KillNow ends the plugin's process at once (SIGKILL), whatever it is doing.
func (p *Plugin) KillNow() { p.client.KillNow() }

// Require returns an ErrKind error naming what when the plugin cannot take role k.
func (p *Plugin) Require(k Kind, what string) error {
	if p.Spec.Is(k) {
		return nil
	}
	role := "source"
	if k == KindDestination {
		role = "destination"
	}
	return classify(ErrKind, fmt.Errorf("%s: plugin %s is not a %s", what, p.Conn.Plugin, role))
}

// Check asks the plugin to connect with its settings; a failed check is a *client.CheckError.
func (p *Plugin) Check(ctx context.Context) error { return p.client.Check(ctx, p.Settings) }

// Teardown asks a source to release what it holds on its server for the named pipeline; it returns what it
// released.
func (p *Plugin) Teardown(ctx context.Context, pipeline string) ([]string, error) {
	return p.client.TeardownFor(ctx, pipeline, p.Settings)
}

// LakePlan asks a lake plugin for its tables' snapshots and a pipeline's fences.
func (p *Plugin) LakePlan(ctx context.Context, req lakequery.PlanRequest) (lakequery.Plan, error) {
	return p.client.LakePlan(ctx, p.Settings, req)
}

// LakeCompact runs a lake plugin's maintenance of one table and returns its report (JSON).
func (p *Plugin) LakeCompact(ctx context.Context, req lakequery.CompactRequest) ([]byte, error) {
	return p.client.LakeCompact(ctx, p.Settings, req)
}

// Query streams a query to a query engine plugin: write writes the request stream, the result goes to out.
// It returns the engine's summary.
func (p *Plugin) Query(ctx context.Context, write func(io.Writer) error, out io.Writer) (string, error) {
	return p.client.Query(ctx, write, out)
}

// Capabilities returns the destination's capabilities, asking the plugin the first time only.
func (p *Plugin) Capabilities(ctx context.Context) (Capabilities, error) {
	return p.caps.get(ctx, p)
}

// capsCache keeps a plugin's capabilities once asked; a failed ask is not kept, so a retry asks again.
type capsCache struct {
	mu   sync.Mutex
	ok   bool
	caps Capabilities
}

func (c *capsCache) get(ctx context.Context, p *Plugin) (Capabilities, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok {
		caps, err := capabilities(ctx, p.client, p.Settings)
		if err != nil {
			return Capabilities{}, err
		}
		c.ok, c.caps = true, caps
	}
	return c.caps, nil
}

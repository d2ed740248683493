package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/pluginhost"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	pluginv1 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v1"
)

// started is a connection's running plugin with its validated settings.
type started struct {
	conn     *config.Connection
	client   *client.Client
	spec     *pluginv1.SpecResponse
	settings []byte
}

// startConnection starts a connection's plugin and validates its settings against the plugin's JSON Schema.
// The caller kills the plugin.
func startConnection(ctx context.Context, host *pluginhost.Host, cn *config.Connection) (*started, error) {
	cl, _, err := host.Start(ctx, hostConnection(cn))
	if err != nil {
		return nil, withCode(registryExitCode(err), err)
	}
	spec, err := cl.Spec(ctx)
	if err != nil {
		cl.Kill()
		return nil, err
	}
	if spec.Name != cn.Plugin && cn.Path == "" {
		cl.Kill()
		return nil, withCode(exitVerify, fmt.Errorf("connection %s: the binary installed as plugin %s says it is %q", cn.Name, cn.Plugin, spec.Name))
	}
	if err := config.ValidateSettings(cn, spec.SettingsSchema); err != nil {
		cl.Kill()
		return nil, withCode(exitUsage, err)
	}
	settings, err := cn.SettingsJSON()
	if err != nil {
		cl.Kill()
		return nil, withCode(exitUsage, fmt.Errorf("connection %s: %w", cn.Name, err))
	}
	return &started{conn: cn, client: cl, spec: spec, settings: settings}, nil
}

// startConnections starts the plugins of several connections at once, the way startConnection starts one:
// a pipeline's start (and a fleet takeover) waits for the slowest plugin rather than for the sum of them —
// hashing and starting a 100 MB destination binary takes seconds on a loaded host. Connections of one plugin
// start one after the other, so that a first start that installs it does not race itself on the lock file.
// On an error every plugin started is killed and the error of the first connection (in order) that failed is
// returned; otherwise the caller kills them all.
func startConnections(ctx context.Context, host *pluginhost.Host, cns []*config.Connection) ([]*started, error) {
	out := make([]*started, len(cns))
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
				if out[i], errs[i] = startConnection(ctx, host, cns[i]); errs[i] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			for _, s := range out {
				if s != nil {
					s.client.Kill()
				}
			}
			return nil, err
		}
	}
	return out, nil
}

// startNamedConnection loads the config and starts the plugin of one of its connections (honouring the
// command's --offline flag). The caller kills the plugin.
func startNamedConnection(ctx context.Context, c *cli.Command, g *globals, name string) (*started, error) {
	cfg, err := loadConfig(g)
	if err != nil {
		return nil, err
	}
	cn, ok := cfg.Connection(name)
	if !ok {
		return nil, withCode(exitUsage, fmt.Errorf("no connection %q in %s (known: %v); declare it under connections: or add it with skippr connect --plugin", name, cfg.Path, cfg.ConnectionNames()))
	}
	host, err := newHost(c, g, cfg, c.Bool("offline"))
	if err != nil {
		return nil, err
	}
	return startConnection(ctx, host, cn)
}

func (s *started) hasKind(k pluginv1.Kind) bool {
	return s.spec.Kind == k || s.spec.Kind == pluginv1.Kind_KIND_BOTH
}

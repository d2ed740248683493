package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/connector"
)

// startNamedConnection loads the config and starts the plugin of one of its connections (honouring the
// command's --offline flag). The caller kills the plugin.
func startNamedConnection(ctx context.Context, c *cli.Command, g *globals, name string) (*connector.Plugin, error) {
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
	return connector.Start(ctx, host, cn)
}

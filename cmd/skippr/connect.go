package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/skippr-dev/skippr/plugin-sdk/client"
)

func connectCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "connect",
		Usage:     "check a connection: install its plugin, validate its settings and test it for real",
		ArgsUsage: "CONNECTION",
		Description: `Runs the plugin's Check on a connection declared in the config (connections.NAME): it installs the
plugin if needed, validates the settings against the plugin's JSON Schema (errors name file, line and key)
and asks the plugin to connect, so a wrong password or a missing privilege shows up before a sync starts.`,
		Flags: []cli.Flag{&cli.BoolFlag{Name: "offline", Usage: "never contact a registry"}},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return withCode(exitUsage, fmt.Errorf("connect: want one connection name"))
			}
			cfg, err := loadConfig(g)
			if err != nil {
				return err
			}
			cn, ok := cfg.Connection(c.Args().First())
			if !ok {
				return withCode(exitUsage, fmt.Errorf("no connection %q in %s (known: %v); declare it under connections: first", c.Args().First(), cfg.Path, cfg.ConnectionNames()))
			}
			host, err := newHost(c, g, cfg, c.Bool("offline"))
			if err != nil {
				return err
			}
			s, err := startConnection(c.Context, host, cn)
			if err != nil {
				return err
			}
			defer s.client.Kill()
			if err := s.client.Check(c.Context, s.settings); err != nil {
				var ce *client.CheckError
				if errors.As(err, &ce) {
					return withCode(exitFailure, fmt.Errorf("%s: connections.%s: %s", cn.Pos, cn.Name, ce.Message))
				}
				return err
			}
			fmt.Fprintf(c.App.Writer, "connection %s ok (plugin %s %s)\n", cn.Name, s.spec.Name, s.spec.Version)
			return nil
		},
	}
}

package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/run"
)

func connectCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:        "connect",
		Usage:       "add a connection to the config and check it: install its plugin, validate its settings, test it for real",
		ArgsUsage:   "CONNECTION",
		Description: helpText("connect"),
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "offline", Usage: "never contact a registry"},
			&cli.StringFlag{Name: "plugin", Usage: "add the connection with this plugin"},
			&cli.StringFlag{Name: "version", Usage: "version constraint of the plugin, e.g. \"~> 1.2\""},
			&cli.StringFlag{Name: "path", Usage: "use a local plugin binary (unverified; for plugin authors)"},
			&cli.StringSliceFlag{Name: "set", Usage: "a setting as key=value (repeatable; the value is read as YAML)"},
			&cli.BoolFlag{Name: "replace", Usage: "replace a connection of the same name"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			args := c.Args().Slice()
			if len(args) != 1 {
				return withCode(exitUsage, fmt.Errorf("connect: want one connection name"))
			}
			if c.String("plugin") != "" {
				settings, err := config.ParseSettings(c.StringSlice("set"))
				if err != nil {
					return withCode(exitUsage, err)
				}
				nc := config.NewConnection{Name: args[0], Plugin: c.String("plugin"), Constraint: c.String("version"), Path: c.String("path"), Settings: settings}
				if err := config.AddConnection(g.ConfigPath, nc, c.Bool("replace")); errors.Is(err, config.ErrConnectionExists) {
					return withCode(exitUsage, err)
				} else if err != nil {
					return err
				}
				fmt.Fprintf(c.Root().Writer, "added connection %s to %s\n", nc.Name, g.ConfigPath)
			}
			s, err := startNamedConnection(ctx, c, g, args[0])
			if err != nil {
				return err
			}
			defer s.Kill()
			if err := run.Check(ctx, s); err != nil {
				return err
			}
			cn := s.Conn
			fmt.Fprintf(c.Root().Writer, "connection %s ok (plugin %s %s)\n", cn.Name, s.Spec.Name, s.Spec.Version)
			return nil
		},
	}
}

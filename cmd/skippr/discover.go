package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/cmdline"
	"github.com/skippr-dev/skippr/engine/connector"
)

func discoverCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "discover",
		Usage:     "list a source connection's streams and their schemas",
		ArgsUsage: "CONNECTION",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON for scripts"},
			&cli.BoolFlag{Name: "offline", Usage: "never contact a registry"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			args := c.Args().Slice()
			if len(args) != 1 {
				return withCode(exitUsage, fmt.Errorf("discover: want one connection name"))
			}
			s, err := startNamedConnection(ctx, c, g, args[0])
			if err != nil {
				return err
			}
			defer s.Kill()
			if err := s.Require(connector.KindSource, "connection "+s.Conn.Name); err != nil {
				return err
			}
			streams, err := s.Discover(ctx)
			if err != nil {
				return err
			}
			out, err := connector.CatalogOf(streams)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return cmdline.WriteJSON(c.Root().Writer, out)
			}
			return out.WriteText(c.Root().Writer)
		},
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/run"
)

func resnapshotCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:        "resnapshot",
		Usage:       "copy tables of a pipeline again while its stream goes on",
		ArgsUsage:   "PIPELINE TABLE...",
		Description: helpText("resnapshot"),
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "offline", Usage: "never contact a registry"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON for scripts"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			args := c.Args().Slice()
			if len(args) < 2 {
				return withCode(exitUsage, errors.New("resnapshot: name a pipeline and at least one table"))
			}
			cfg, err := loadConfig(g)
			if err != nil {
				return err
			}
			pipes, err := run.Select(cfg, args[:1])
			if err != nil {
				return err
			}
			p := pipes[0]
			host, err := newHost(c, g, cfg, c.Bool("offline"))
			if err != nil {
				return err
			}
			reqs, err := run.RequestResnapshot(ctx, g.Home, host, cfg, p, args[1:])
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return json.NewEncoder(c.Root().Writer).Encode(map[string]any{"pipeline": p.Name, "requests": reqs})
			}
			for _, r := range reqs {
				fmt.Fprintf(c.Root().Writer, "pipeline %s: re-snapshot of %s requested (%s); a running sync starts it within a second; see skippr status\n", p.Name, r.Stream, r.ID)
			}
			return nil
		},
	}
}

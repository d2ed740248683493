package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/run"
)

func teardownCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:        "teardown",
		Usage:       "release what a pipeline's source holds on its server (a replication slot, a publication)",
		ArgsUsage:   "PIPELINE",
		Description: helpText("teardown"),
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "offline", Usage: "never contact a registry"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON for scripts"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			cfg, pipes, err := configuredPipelines(c, g)
			if err != nil {
				return err
			}
			if c.Args().Len() == 0 || len(pipes) != 1 {
				return withCode(exitUsage, fmt.Errorf("teardown: name one pipeline"))
			}
			p := pipes[0]
			host, err := newHost(c, g, cfg, c.Bool("offline"))
			if err != nil {
				return err
			}
			released, err := run.Teardown(ctx, g.Home, host, cfg, p)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return json.NewEncoder(c.Root().Writer).Encode(map[string]any{"pipeline": p.Name, "released": released})
			}
			if len(released) == 0 {
				fmt.Fprintf(c.Root().Writer, "pipeline %s: source %s held nothing to release\n", p.Name, p.Source)
			}
			for _, r := range released {
				fmt.Fprintf(c.Root().Writer, "pipeline %s: released %s\n", p.Name, r)
			}
			return nil
		},
	}
}

package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/cmdline"
	"github.com/skippr-dev/skippr/engine/run"
)

func statusCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:        "status",
		Usage:       "show each pipeline's WAL depth, committed and applied points, source progress and lag",
		ArgsUsage:   "[PIPELINE...]",
		Description: helpText("status"),
		Flags:       []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON for scripts"}},
		Action: func(ctx context.Context, c *cli.Command) error {
			_, pipes, err := configuredPipelines(c, g)
			if err != nil {
				return err
			}
			out, err := run.StatusOf(ctx, g.Home, pipes, g.Log)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				if err := cmdline.WriteJSON(c.Root().Writer, out); err != nil {
					return err
				}
			} else if err := out.WriteText(c.Root().Writer); err != nil {
				return err
			}
			if failed := out.Failed(); len(failed) > 0 {
				return withCode(exitFailure, fmt.Errorf("failed: %s", strings.Join(failed, ", ")))
			}
			return nil
		},
	}
}

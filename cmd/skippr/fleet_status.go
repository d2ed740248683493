package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/fleet"
)

func fleetCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:  "fleet",
		Usage: "look at and steer a fleet of workers (skippr worker)",
		Commands: []*cli.Command{
			{
				Name:        "status",
				Usage:       "show the fleet's workers (pipelines held, version, draining) and pipelines (holder, epoch, since, lag, last error)",
				Description: helpText("fleet-status"),
				Flags:       append(etcdFlags(), &cli.BoolFlag{Name: "json", Usage: "print JSON for scripts"}),
				Action: func(ctx context.Context, c *cli.Command) error {
					_, pipes, err := configuredPipelines(c, g)
					if err != nil {
						return err
					}
					fps := make([]fleet.Pipeline, len(pipes))
					for i, p := range pipes {
						fps[i] = fleet.Pipeline{Name: p.Name, Pin: p.Fleet.Pin}
					}
					cli, target, err := etcdClient(c)
					if err != nil {
						return err
					}
					defer cli.Close()
					st, err := fleet.ReadStatusOrLast(ctx, cli, target.Prefix, fps, fleet.StatusCachePath(g.Home, target))
					if err != nil {
						return err
					}
					if err := st.Print(c.Root().Writer, c.Bool("json"), time.Now()); err != nil {
						return err
					}
					if st.Stale != nil {
						return withCode(exitFailure, fmt.Errorf("stale: %s (%s)", st.Stale.Headline(time.Now()), st.Stale.Reason))
					}
					unheld := st.Unheld()
					if unheld > 0 {
						return withCode(exitFailure, fmt.Errorf("%d of %d pipelines have no holder", unheld, len(st.Pipelines)))
					}
					return nil
				},
			},
			{
				Name:      "drain",
				Usage:     "hand every pipeline of worker NAME to the other workers (after their in-flight commits)",
				ArgsUsage: "NAME",
				Description: `The worker stays in the fleet without pipelines until ` + "`skippr fleet drain --cancel NAME`" + `; the
request survives its restarts.`,
				Flags: append(etcdFlags(), &cli.BoolFlag{Name: "cancel", Usage: "let the worker take its share again"}),
				Action: func(ctx context.Context, c *cli.Command) error {
					args := c.Args().Slice()
					if len(args) != 1 {
						return withCode(exitUsage, errors.New("name one worker: skippr fleet drain NAME (see skippr fleet status)"))
					}
					cli, target, err := etcdClient(c)
					if err != nil {
						return err
					}
					defer cli.Close()
					ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
					defer cancel()
					if err := fleet.Drain(ctx, cli, target.Prefix, args[0], !c.Bool("cancel")); err != nil {
						if errors.Is(err, fleet.ErrNoWorker) {
							return withCode(exitUsage, err)
						}
						return err
					}
					if c.Bool("cancel") {
						fmt.Fprintf(c.Root().Writer, "worker %s takes its share of pipelines again\n", args[0])
					} else {
						fmt.Fprintf(c.Root().Writer, "worker %s hands its pipelines over; watch with skippr fleet status\n", args[0])
					}
					return nil
				},
			},
		},
	}
}

package main

import (
	"context"
	"encoding/json"
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
				Name:  "status",
				Usage: "show the fleet's workers (pipelines held, version, draining) and pipelines (holder, epoch, since, lag, last error)",
				Description: `Reads the fleet from etcd; the pipelines are the config's. A pipeline with no holder is being
handed over or waits for a worker (a pinned worker that is not alive). Exits 1 when a pipeline has no holder.
LAG is the holder's WAL entries not yet applied by every destination and the age of the oldest of them, as the
holder last published them: every third of its lease TTL, so up to that old (AS OF).
When etcd does not answer within a second (no quorum, unreachable), it prints the last state it knows, marked
STALE with the time etcd was last known to work, and exits 1: a member's own copy if one answers, else this
host's last answered status (kept under $SKIPPR_HOME/fleet).`,
				Flags: append(etcdFlags(), &cli.BoolFlag{Name: "json", Usage: "print JSON for scripts"}),
				Action: func(ctx context.Context, c *cli.Command) error {
					_, pipes, err := configuredPipelines(c, g)
					if err != nil {
						return err
					}
					var fps []fleet.Pipeline
					for _, p := range pipes {
						fps = append(fps, fleet.Pipeline{Name: p.Name, Pin: p.Fleet.Pin})
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
					if c.Bool("json") {
						if err := json.NewEncoder(c.Root().Writer).Encode(st); err != nil {
							return err
						}
					} else {
						st.WriteText(c.Root().Writer, time.Now())
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

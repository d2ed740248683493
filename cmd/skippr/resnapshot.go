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
		Name:      "resnapshot",
		Usage:     "copy tables of a pipeline again while its stream goes on",
		ArgsUsage: "PIPELINE TABLE...",
		Description: `Records a request to copy the named tables (streams) of the pipeline again, without a new slot and
without stopping the other tables: a running ` + "`skippr sync`" + ` picks it up within a second (one that is not
running, when it starts). The source copies each table in key-ordered chunks beside the changes it streams
(the watermark method), and each destination removes at the end the rows of the table it did not receive
during the copy — rows the source no longer has. A copy interrupted by a crash resumes from its last chunk.
Asking again for a table already requested changes nothing. ` + "`skippr status`" + ` shows the progress.

Refused (exit 2) for a source that cannot re-snapshot (the postgres and mysql sources can), a destination
that cannot apply a re-snapshot, or a table the source does not offer.`,
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

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/lakequery"
	sdklakequery "github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

func lakeCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:  "lake",
		Usage: "maintain Iceberg tables written by skippr",
		Commands: []*cli.Command{{
			Name:        "compact",
			Usage:       "rewrite a table's small files, fold its deletes into data files and expire old snapshots",
			ArgsUsage:   "TABLE",
			Description: helpText("lake-compact"),
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "connection", Usage: "the lake connection (needed when several offer compaction)"},
				&cli.StringFlag{Name: "expire-older-than", Value: "24h", Usage: "expire snapshots older than this"},
				&cli.IntFlag{Name: "retain-last", Value: 10, Usage: "snapshots kept whatever their age"},
				&cli.StringFlag{Name: "orphans-older-than", Value: "72h", Usage: "delete unreferenced files older than this"},
				&cli.BoolFlag{Name: "offline", Usage: "never contact a registry"},
			},
			Action: func(ctx context.Context, c *cli.Command) error {
				args := c.Args().Slice()
				if len(args) != 1 {
					return withCode(exitUsage, fmt.Errorf("lake compact: want one table (stream) name"))
				}
				var durs [2]time.Duration
				for i, f := range []string{"expire-older-than", "orphans-older-than"} {
					var err error
					if durs[i], err = time.ParseDuration(c.String(f)); err != nil {
						return withCode(exitUsage, fmt.Errorf("lake compact: --%s: %w", f, err))
					}
				}
				cfg, err := loadConfig(g)
				if err != nil {
					return err
				}
				host, err := newHost(c, g, cfg, c.Bool("offline"))
				if err != nil {
					return err
				}
				report, err := lakequery.Compact(ctx, cfg, host, c.String("connection"), sdklakequery.CompactRequest{
					Table: args[0], ExpireOlderThan: durs[0], RetainLast: c.Int("retain-last"), OrphansOlderThan: durs[1],
				})
				if errors.Is(err, lakequery.ErrNoService) {
					return withCode(exitUsage, err)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(c.Root().Writer, "%s\n", report)
				return nil
			},
		}},
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/lakequery"
	"github.com/skippr-dev/skippr/engine/run"
	"github.com/skippr-dev/skippr/engine/wal"
	sdklakequery "github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

func queryCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "query",
		Usage:     "SQL over the lake tables plus the rows still in the WAL",
		ArgsUsage: "[SQL]",
		Description: `Answers SQL (DuckDB's dialect) over the tables of the pipelines' Iceberg destinations, merged with the
entries committed to each pipeline's WAL but not applied yet: for each primary key the newest version wins
and a delete removes the row, so a row is visible the moment its WAL commit record exists. Tables are named
namespace.table (bare names resolve too); an unknown name lists the known ones.

Without SQL, reads statements from a prompt with history (end each with ';') when stdin is a terminal,
otherwise reads one statement from stdin. Read-only: takes no WAL lease, never blocks a running sync.

The row count and time go to stderr. Exit status: 0 ok, 1 failure, 2 bad SQL or usage (DuckDB's message on
stderr), 3 plugin not found, 4 verification failed.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: sdklakequery.FormatTable, Usage: "table, csv, json (one object per line) or parquet"},
			&cli.BoolFlag{Name: "json", Usage: "same as --format json"},
			&cli.BoolFlag{Name: "as-of-lake", Usage: "answer from the lake alone, without the WAL's unapplied rows"},
			&cli.StringSliceFlag{Name: "pipeline", Usage: "only these pipelines' lakes (default: every pipeline with an iceberg destination)"},
			&cli.BoolFlag{Name: "offline", Usage: "never contact a registry"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			format := c.String("format")
			if c.Bool("json") {
				format = sdklakequery.FormatJSON
			}
			if !slices.Contains([]string{sdklakequery.FormatTable, sdklakequery.FormatCSV, sdklakequery.FormatJSON, sdklakequery.FormatParquet}, format) {
				return withCode(exitUsage, fmt.Errorf("query: --format %q is not table, csv, json or parquet", format))
			}
			q, err := openQuerier(ctx, c, g)
			if err != nil {
				return err
			}
			defer q.Close()
			con := &lakequery.Console{Querier: q, Request: lakequery.Request{Format: format, AsOfLake: c.Bool("as-of-lake")},
				In: c.Root().Reader, Out: c.Root().Writer, Err: c.Root().ErrWriter, History: filepath.Join(g.Home, "query_history")}
			if c.Args().Len() > 0 {
				err = con.Answer(ctx, strings.Join(c.Args().Slice(), " "))
			} else {
				err = con.Read(ctx)
			}
			if errors.Is(err, sdklakequery.ErrSQL) || errors.Is(err, lakequery.ErrNoSQL) {
				return withCode(exitUsage, err)
			}
			return withCode(exitFailure, err)
		},
	}
}

// openQuerier starts the plugins of the lakes of the pipelines named with --pipeline (default: all).
func openQuerier(ctx context.Context, c *cli.Command, g *globals) (*lakequery.Querier, error) {
	cfg, err := loadConfig(g)
	if err != nil {
		return nil, err
	}
	var pipes []*config.Pipeline
	if names := c.StringSlice("pipeline"); len(names) > 0 {
		if pipes, err = run.Select(cfg, names); err != nil {
			return nil, err
		}
	}
	host, err := newHost(c, g, cfg, c.Bool("offline"))
	if err != nil {
		return nil, err
	}
	q, err := lakequery.Open(ctx, lakequery.Options{
		Config:    cfg,
		Pipelines: pipes,
		Host:      host,
		OpenWAL:   func(ctx context.Context, p *config.Pipeline) (*wal.Log, error) { return run.OpenWAL(ctx, p, g.Log, 0) },
	})
	switch {
	case errors.Is(err, lakequery.ErrNoLake):
		return nil, withCode(exitUsage, fmt.Errorf("query: %w", err))
	case err != nil:
		return nil, fmt.Errorf("query: %w", err)
	}
	return q, nil
}

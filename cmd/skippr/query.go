package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/lakequery"
	"github.com/skippr-dev/skippr/engine/queryclient"
	"github.com/skippr-dev/skippr/engine/run"
	"github.com/skippr-dev/skippr/engine/wal"
	sdklakequery "github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

func queryCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:        "query",
		Usage:       "SQL over the lake tables plus the rows still in the WAL",
		ArgsUsage:   "[SQL]",
		Description: helpText("query"),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: sdklakequery.FormatTable, Usage: "table, csv, json (one object per line) or parquet"},
			&cli.BoolFlag{Name: "json", Usage: "same as --format json"},
			&cli.BoolFlag{Name: "as-of-lake", Usage: "answer from the lake alone, without the WAL's unapplied rows"},
			&cli.BoolFlag{Name: "include-deleted", Usage: "show the rows a soft-deleting destination flagged deleted (_skippr_deleted), hidden by default"},
			&cli.StringSliceFlag{Name: "pipeline", Usage: "only these pipelines' lakes (default: every pipeline with an iceberg destination)"},
			&cli.BoolFlag{Name: "offline", Usage: "never contact a registry"},
			&cli.StringFlag{Name: "server", Sources: cli.EnvVars("SKIPPR_QUERY_SERVER"), Usage: "ask the skippr serve at this address (host:port, grpc+tls://host:port) instead of starting the plugins (default: the config's query.server)"},
			&cli.BoolFlag{Name: "no-server", Usage: "start the plugins even when a server is named"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			format := c.String("format")
			if c.Bool("json") {
				format = sdklakequery.FormatJSON
			}
			if !slices.Contains([]string{sdklakequery.FormatTable, sdklakequery.FormatCSV, sdklakequery.FormatJSON, sdklakequery.FormatParquet}, format) {
				return withCode(exitUsage, fmt.Errorf("query: --format %q is not table, csv, json or parquet", format))
			}
			cfg, err := loadConfig(g)
			if err != nil {
				return err
			}
			token := cfg.Query.ServerToken
			if t := os.Getenv("SKIPPR_QUERY_TOKEN"); t != "" {
				token = t
				g.Redact.Add(map[string]string{"SKIPPR_QUERY_TOKEN": t})
			}
			runner, release, err := queryclient.Open(ctx, queryServer(c, cfg), token,
				func(ctx context.Context) (*lakequery.Querier, error) { return openQuerier(ctx, c, g, cfg) },
				func(err error) {
					fmt.Fprintf(c.Root().ErrWriter, "skippr query: %v; starting the plugins instead\n", err)
				})
			if errors.Is(err, queryclient.ErrAddress) {
				return withCode(exitUsage, err)
			} else if err != nil {
				return err
			}
			defer release()
			con := &lakequery.Console{Querier: runner, Request: lakequery.Request{Format: format, AsOfLake: c.Bool("as-of-lake"), IncludeDeleted: c.Bool("include-deleted")},
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

// queryServer is the address of the skippr serve that answers, or "" to start the plugins: --server, else
// the config's query.server, unless --no-server or --pipeline (a server answers for the pipelines it serves).
func queryServer(c *cli.Command, cfg *config.Config) string {
	if c.Bool("no-server") || len(c.StringSlice("pipeline")) > 0 {
		return ""
	}
	if s := c.String("server"); s != "" {
		return s
	}
	return cfg.Query.Server
}

// openQuerier starts the plugins of the lakes of the pipelines named with --pipeline (default: all).
func openQuerier(ctx context.Context, c *cli.Command, g *globals, cfg *config.Config) (*lakequery.Querier, error) {
	var (
		pipes []*config.Pipeline
		err   error
	)
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

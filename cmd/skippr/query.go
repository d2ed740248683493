package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/chzyer/readline"
	"github.com/urfave/cli/v3"
	"golang.org/x/term"

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
			args := c.Args().Slice()
			format := c.String("format")
			if c.Bool("json") {
				format = sdklakequery.FormatJSON
			}
			if !slices.Contains([]string{sdklakequery.FormatTable, sdklakequery.FormatCSV, sdklakequery.FormatJSON, sdklakequery.FormatParquet}, format) {
				return withCode(exitUsage, fmt.Errorf("query: --format %q is not table, csv, json or parquet", format))
			}
			q, err := newQuerier(ctx, c, g)
			if err != nil {
				return err
			}
			defer q.q.Close()
			q.req = lakequery.Request{Format: format, AsOfLake: c.Bool("as-of-lake")}
			if len(args) > 0 {
				return q.run(ctx, strings.Join(args, " "))
			}
			if f, ok := c.Root().Reader.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
				sql, err := io.ReadAll(c.Root().Reader)
				if err != nil {
					return withCode(exitFailure, fmt.Errorf("query: read SQL from stdin: %w", err))
				}
				if strings.TrimSpace(string(sql)) == "" {
					return withCode(exitUsage, errors.New("query: no SQL given (as an argument or on stdin)"))
				}
				return q.run(ctx, string(sql))
			}
			return q.repl(ctx, c, g)
		},
	}
}

// querier is one `skippr query` invocation: the engine's querier and how to print.
type querier struct {
	c   *cli.Command
	q   *lakequery.Querier
	req lakequery.Request
}

func newQuerier(ctx context.Context, c *cli.Command, g *globals) (*querier, error) {
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
	return &querier{c: c, q: q}, nil
}

// run answers one statement: the result on stdout, the summary on stderr.
func (q *querier) run(ctx context.Context, sql string) error {
	req := q.req
	req.SQL = sql
	summary, err := q.q.Run(ctx, req, q.c.Root().Writer)
	if errors.Is(err, sdklakequery.ErrSQL) {
		// The engine's message names what is wrong with the statement (and the known tables).
		fmt.Fprintln(q.c.Root().ErrWriter, strings.TrimPrefix(err.Error(), sdklakequery.ErrSQL.Error()+": "))
		return withCode(exitUsage, sdklakequery.ErrSQL)
	}
	if err != nil {
		return withCode(exitFailure, fmt.Errorf("query: %w", err))
	}
	if summary != "" {
		fmt.Fprintln(q.c.Root().ErrWriter, summary)
	}
	return nil
}

// repl reads statements from a prompt with history until EOF or .quit. A failed statement prints its error
// and the prompt continues.
func (q *querier) repl(ctx context.Context, c *cli.Command, g *globals) error {
	rl, err := readline.NewEx(&readline.Config{
		Prompt:          "skippr> ",
		HistoryFile:     filepath.Join(g.Home, "query_history"),
		InterruptPrompt: "^C",
		EOFPrompt:       ".quit",
		Stdout:          c.Root().Writer,
		Stderr:          c.Root().ErrWriter,
	})
	if err != nil {
		return withCode(exitFailure, fmt.Errorf("query: prompt: %w", err))
	}
	defer rl.Close()
	source := "the lake plus the WAL's unapplied rows"
	if q.req.AsOfLake {
		source = "the lake alone (--as-of-lake)"
	}
	fmt.Fprintf(c.Root().ErrWriter, "skippr query: answers from %s. End statements with ';', .quit to leave.\n", source)
	var stmt strings.Builder
	for {
		line, err := rl.Readline()
		if errors.Is(err, readline.ErrInterrupt) {
			stmt.Reset()
			rl.SetPrompt("skippr> ")
			continue
		}
		if err != nil { // io.EOF
			return nil
		}
		t := strings.TrimSpace(line)
		if stmt.Len() == 0 && (t == ".quit" || t == ".exit" || t == `\q`) {
			return nil
		}
		stmt.WriteString(line)
		stmt.WriteString("\n")
		if !strings.HasSuffix(t, ";") {
			rl.SetPrompt("   ...> ")
			continue
		}
		sql := stmt.String()
		stmt.Reset()
		rl.SetPrompt("skippr> ")
		if err := q.run(ctx, sql); err != nil {
			if !errors.Is(err, sdklakequery.ErrSQL) { // run printed the engine's message already
				fmt.Fprintln(c.Root().ErrWriter, "error:", err)
			}
		}
	}
}

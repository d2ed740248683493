package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/chzyer/readline"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/pluginhost"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

// queryPlugin is the plugin that runs the SQL: DuckDB, in its own process so the core stays free of cgo.
const queryPlugin = "duckdb"

// queryExitSQL is the query plugin's exit status for an error in the SQL itself (DuckDB's message).
const queryExitSQL = 2

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
			&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: lakequery.FormatTable, Usage: "table, csv, json (one object per line) or parquet"},
			&cli.BoolFlag{Name: "json", Usage: "same as --format json"},
			&cli.BoolFlag{Name: "as-of-lake", Usage: "answer from the lake alone, without the WAL's unapplied rows"},
			&cli.StringSliceFlag{Name: "pipeline", Usage: "only these pipelines' lakes (default: every pipeline with an iceberg destination)"},
			&cli.BoolFlag{Name: "offline", Usage: "never contact a registry"},
		},
		Action: func(c *cli.Context) error {
			args, err := commandArgs(c)
			if err != nil {
				return err
			}
			format := c.String("format")
			if c.Bool("json") {
				format = lakequery.FormatJSON
			}
			if !slices.Contains([]string{lakequery.FormatTable, lakequery.FormatCSV, lakequery.FormatJSON, lakequery.FormatParquet}, format) {
				return withCode(exitUsage, fmt.Errorf("query: --format %q is not table, csv, json or parquet", format))
			}
			q, err := newQuerier(c, g)
			if err != nil {
				return err
			}
			q.format, q.asOfLake = format, c.Bool("as-of-lake")
			if len(args) > 0 {
				return q.run(c.Context, strings.Join(args, " "))
			}
			if f, ok := c.App.Reader.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
				sql, err := io.ReadAll(c.App.Reader)
				if err != nil {
					return withCode(exitFailure, fmt.Errorf("query: read SQL from stdin: %w", err))
				}
				if strings.TrimSpace(string(sql)) == "" {
					return withCode(exitUsage, errors.New("query: no SQL given (as an argument or on stdin)"))
				}
				return q.run(c.Context, string(sql))
			}
			return q.repl(c, g)
		},
	}
}

// querier runs queries for one config: the lakes to plan and the plugins that plan and answer.
type querier struct {
	c        *cli.Context
	g        *globals
	lakes    []queryLake
	iceberg  map[string]string // iceberg connection -> verified plugin binary
	duckdb   string
	format   string
	asOfLake bool
}

// queryLake is a pipeline and one of its iceberg destinations.
type queryLake struct {
	p    *config.Pipeline
	conn *config.Connection
}

func newQuerier(c *cli.Context, g *globals) (*querier, error) {
	cfg, err := loadConfig(g)
	if err != nil {
		return nil, err
	}
	pipes := cfg.Pipelines
	if names := c.StringSlice("pipeline"); len(names) > 0 {
		if pipes, err = selectPipelines(cfg, names); err != nil {
			return nil, err
		}
	}
	q := &querier{c: c, g: g, iceberg: map[string]string{}}
	for _, p := range pipes {
		for _, d := range p.Destinations {
			if cn, ok := cfg.Connection(d); ok && cn.Plugin == "iceberg" {
				q.lakes = append(q.lakes, queryLake{p: p, conn: cn})
			}
		}
	}
	if len(q.lakes) == 0 {
		return nil, withCode(exitUsage, fmt.Errorf("query: no pipeline in %s writes to an iceberg connection: nothing to query", cfg.Path))
	}
	host, err := newHost(c, g, cfg, c.Bool("offline"))
	if err != nil {
		return nil, err
	}
	for _, l := range q.lakes {
		if _, ok := q.iceberg[l.conn.Name]; ok {
			continue
		}
		if q.iceberg[l.conn.Name], err = verifiedBinary(c, host, hostConnection(l.conn)); err != nil {
			return nil, err
		}
	}
	// The query engine is not a connection: a config may name one (plugin duckdb) to pin its version or path.
	qc := pluginhost.Connection{Name: "query", Plugin: queryPlugin}
	for _, cn := range cfg.Connections {
		if cn.Plugin == queryPlugin {
			qc = hostConnection(cn)
			break
		}
	}
	if q.duckdb, err = verifiedBinary(c, host, qc); err != nil {
		return nil, err
	}
	return q, nil
}

// walEntries are one pipeline's committed, unreclaimed WAL entries and the streams they hold.
type walEntries struct {
	seqs    []uint64
	frames  [][]wal.Frame
	streams []string
}

// readWAL reads a pipeline's committed entries without taking its lease. An entry reclaimed while being read
// was applied by every destination, so the plan (made after) holds it: it is skipped.
func readWAL(ctx context.Context, p *config.Pipeline, g *globals) (walEntries, error) {
	var out walEntries
	l, err := openWAL(ctx, p, g.Log)
	if err != nil {
		return out, err
	}
	defer l.Close()
	h, err := l.Head(ctx)
	if err != nil {
		return out, fmt.Errorf("pipeline %s: %w", p.Name, err)
	}
	recs, err := l.Entries(ctx, h.ReclaimedThrough)
	if err != nil {
		return out, fmt.Errorf("pipeline %s: %w", p.Name, err)
	}
	seen := map[string]bool{}
	for _, rec := range recs {
		frames, err := l.ReadSegment(ctx, rec)
		if err != nil {
			if h2, herr := l.Head(ctx); herr == nil && h2.ReclaimedThrough >= rec.Seq {
				continue
			}
			return out, fmt.Errorf("pipeline %s: %w", p.Name, err)
		}
		for _, f := range frames {
			if !seen[f.Stream] {
				seen[f.Stream] = true
				out.streams = append(out.streams, f.Stream)
			}
		}
		out.seqs = append(out.seqs, rec.Seq)
		out.frames = append(out.frames, frames)
	}
	return out, nil
}

// run answers one statement. The WAL is read before the lake is planned: an entry applied in between is then
// both in the lake and in the WAL part, and the table's fence drops it from the latter. The other order could
// miss an entry applied and reclaimed in between.
func (q *querier) run(ctx context.Context, sql string) error {
	tmp, err := os.MkdirTemp("", "skippr-query-")
	if err != nil {
		return withCode(exitFailure, err)
	}
	defer os.RemoveAll(tmp)
	req := lakequery.Request{SQL: sql, Format: q.format, AsOfLake: q.asOfLake}
	wals := make([]walEntries, len(q.lakes))
	for i, l := range q.lakes {
		if !q.asOfLake {
			if wals[i], err = readWAL(ctx, l.p, q.g); err != nil {
				return withCode(exitFailure, err)
			}
		}
	}
	for i, l := range q.lakes {
		plan, err := q.plan(ctx, l, wals[i].streams, tmp)
		if err != nil {
			return err
		}
		req.Lakes = append(req.Lakes, lakequery.Lake{Pipeline: l.p.Name, Plan: plan})
	}
	cmd := exec.CommandContext(ctx, q.duckdb, "query", "-temp-dir", tmp)
	cmd.Env = pluginhost.Env()
	cmd.Stdout, cmd.Stderr = q.c.App.Writer, q.c.App.ErrWriter
	in, err := cmd.StdinPipe()
	if err != nil {
		return withCode(exitFailure, err)
	}
	if err := cmd.Start(); err != nil {
		return withCode(exitFailure, fmt.Errorf("start query plugin: %w", err))
	}
	werr := writeQueryStream(in, req, q.lakes, wals)
	in.Close()
	err = cmd.Wait()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == queryExitSQL:
		return withCode(exitUsage, errors.New("query failed"))
	case err != nil:
		return withCode(exitFailure, fmt.Errorf("query plugin: %w", err))
	case werr != nil:
		return withCode(exitFailure, werr)
	}
	return nil
}

func writeQueryStream(w io.Writer, req lakequery.Request, lakes []queryLake, wals []walEntries) error {
	qw, err := lakequery.NewWriter(w, req)
	if err != nil {
		return err
	}
	for i, l := range lakes {
		for j, seq := range wals[i].seqs {
			if err := qw.Entry(l.p.Name, seq); err != nil {
				return err
			}
			for _, f := range wals[i].frames[j] {
				switch f.Kind {
				case wal.FrameBatch:
					err = qw.Batch(f.Stream, f.Rows, f.Data)
				case wal.FrameSchema:
					err = qw.Schema(f.Stream, f.Data)
				case wal.FrameTruncate:
					err = qw.Truncate(f.Stream)
				}
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// plan asks the connection's iceberg plugin for its tables' current snapshots and the pipeline's fences.
func (q *querier) plan(ctx context.Context, l queryLake, streams []string, tmp string) (lakequery.Plan, error) {
	settings, err := l.conn.SettingsJSON()
	if err != nil {
		return lakequery.Plan{}, withCode(exitUsage, err)
	}
	fetch := filepath.Join(tmp, "lake")
	if err := os.MkdirAll(fetch, 0o700); err != nil {
		return lakequery.Plan{}, withCode(exitFailure, err)
	}
	args := append([]string{"plan", "-pipeline", l.p.Name, "-fetch-dir", fetch}, streams...)
	cmd := exec.CommandContext(ctx, q.iceberg[l.conn.Name], args...)
	cmd.Stdin = bytes.NewReader(settings) // secrets stay out of argv
	cmd.Env = pluginhost.Env()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return lakequery.Plan{}, withCode(exitFailure, fmt.Errorf("plan lake of connection %s: %w: %s", l.conn.Name, err, strings.TrimSpace(errOut.String())))
	}
	var p lakequery.Plan
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		return lakequery.Plan{}, withCode(exitFailure, fmt.Errorf("plan lake of connection %s: %w", l.conn.Name, err))
	}
	return p, nil
}

// repl reads statements from a prompt with history until EOF or .quit. A failed statement prints its error
// and the prompt continues.
func (q *querier) repl(c *cli.Context, g *globals) error {
	rl, err := readline.NewEx(&readline.Config{
		Prompt:          "skippr> ",
		HistoryFile:     filepath.Join(g.Home, "query_history"),
		InterruptPrompt: "^C",
		EOFPrompt:       ".quit",
		Stdout:          c.App.Writer,
		Stderr:          c.App.ErrWriter,
	})
	if err != nil {
		return withCode(exitFailure, fmt.Errorf("query: prompt: %w", err))
	}
	defer rl.Close()
	source := "the lake plus the WAL's unapplied rows"
	if q.asOfLake {
		source = "the lake alone (--as-of-lake)"
	}
	fmt.Fprintf(c.App.ErrWriter, "skippr query: answers from %s. End statements with ';', .quit to leave.\n", source)
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
		if err := q.run(c.Context, sql); err != nil {
			if err.Error() != "query failed" { // the plugin printed DuckDB's message already
				fmt.Fprintln(c.App.ErrWriter, "error:", err)
			}
		}
	}
}

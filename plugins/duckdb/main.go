// Command skippr-plugin-duckdb is skippr's DuckDB plugin. It plays two parts, and links DuckDB (cgo) so the
// core binary does not have to:
//
//   - a destination (package dest): `skippr sync` into a .duckdb file, each WAL sequence number applied in one
//     DuckDB transaction together with a state row, so a replay is exactly-once;
//
//   - the query engine behind `skippr query` (package query), offered as the protocol's optional service
//     query.engine.
//
// `skippr-plugin-duckdb dump STREAM` (settings as JSON on stdin) prints a destination table as JSON lines
// ordered by its key, for checks from outside the engine; `skippr-plugin-duckdb exec SQL` runs statements on the
// file (settings on stdin) in one transaction, for repairs and tests from outside the engine.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"

	"github.com/skippr-dev/skippr/plugins/duckdb/dest"
	"github.com/skippr-dev/skippr/plugins/duckdb/query"
)

var version = "0.1.0"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "dump" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		err := dump(ctx, os.Args[2:])
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "skippr-plugin-duckdb dump:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "exec" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		err := execSQL(ctx, os.Args[2:])
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "skippr-plugin-duckdb exec:", err)
			os.Exit(1)
		}
		return
	}
	// Serve closes the destination's sessions when the host ends the plugin, which checkpoints each database
	// and releases its lock.
	walCache := query.NewWALCache("")
	d := &dest.Destination{Version: version}
	// A quarter of the settings' memory_limit becomes the Go runtime's soft memory limit when a database opens
	// (dest.Settings.GoLimit): without it the collector lets the heap reach twice what an entry needs. A
	// GOMEMLIMIT in the environment wins.
	if os.Getenv("GOMEMLIMIT") == "" {
		d.SetMemoryLimit = debug.SetMemoryLimit
	}
	serve.Serve(plugin{d, walCache})
	walCache.Close()
}

func dump(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("want one stream (or table) name, got %d arguments; settings come on stdin", len(args))
	}
	settings, err := io.ReadAll(os.Stdin)
	if err != nil {
		return fmt.Errorf("read settings from stdin: %w", err)
	}
	return dest.Dump(ctx, settings, args[0], os.Stdout)
}

func execSQL(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("want the SQL as one argument, got %d arguments; settings come on stdin", len(args))
	}
	settings, err := io.ReadAll(os.Stdin)
	if err != nil {
		return fmt.Errorf("read settings from stdin: %w", err)
	}
	return dest.Exec(ctx, settings, args[0])
}

// plugin is the destination plus the query engine: the query shares nothing with the destination's databases.
// The query engine keeps the WAL entries a server sends between its queries (walCache).
type plugin struct {
	*dest.Destination
	walCache *query.WALCache
}

var _ serve.WALCachingQueryEngine = plugin{}

func (p plugin) Query(ctx context.Context, in io.Reader, out io.Writer) (string, error) {
	return query.Answer(ctx, in, out, query.Options{WAL: p.walCache})
}

// CachesWAL: the WAL cache is there (service query.wal-cache).
func (p plugin) CachesWAL() bool { return p.walCache != nil }

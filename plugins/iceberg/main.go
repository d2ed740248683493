// Command skippr-plugin-iceberg is skippr's Apache Iceberg destination: it commits each WAL sequence number
// into Iceberg tables exactly once. The implementation is package lake; README.md describes the settings.
//
// Besides serving the plugin protocol, the binary runs table maintenance, which is what `skippr lake compact`
// is meant to call (settings as JSON on stdin, so secrets stay out of argv; the result as JSON on stdout):
//
//	skippr-plugin-iceberg compact [-expire-older-than 24h] [-retain-last 10] [-orphans-older-than 72h] STREAM
//
// and prints a table's current rows (deletes applied) as JSON lines, for checks from outside the engine:
//
//	skippr-plugin-iceberg scan STREAM
//
// and plans tables' current snapshots for `skippr query` (files, the deletes that apply to each, schema with
// field ids, the pipeline's fence; see lake.Plan), copying remote files into -fetch-dir:
//
//	skippr-plugin-iceberg plan [-pipeline P] [-fetch-dir DIR] [STREAM...]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"

	"github.com/skippr-dev/skippr/plugins/iceberg/lake"
)

var version = "0.1.0"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "compact" {
		if err := compact(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "skippr-plugin-iceberg compact:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "scan" {
		if err := scan(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "skippr-plugin-iceberg scan:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "plan" {
		if err := plan(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "skippr-plugin-iceberg plan:", err)
			os.Exit(1)
		}
		return
	}
	d := &lake.Destination{Version: version}
	// The settings' memory_limit becomes the Go runtime's soft memory limit. Arrow buffers come from Go's
	// allocator, so what an apply folds, writes out and drops is garbage the collector frees only when the heap
	// has doubled (GOGC=100): without a limit the process would hold about twice the apply's working set.
	// With it, the collector runs harder as the heap nears the cap. A GOMEMLIMIT in the environment wins.
	if os.Getenv("GOMEMLIMIT") == "" {
		d.SetMemoryLimit = debug.SetMemoryLimit
	}
	serve.Serve(d)
}

func plan(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	var opts lake.PlanOptions
	fs.StringVar(&opts.Pipeline, "pipeline", "", "report this pipeline's fence for each table")
	fs.StringVar(&opts.FetchDir, "fetch-dir", "", "copy files that are not local (s3://) into this directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts.Streams = fs.Args()
	settings, err := io.ReadAll(stdin)
	if err != nil {
		return fmt.Errorf("read settings from stdin: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	p, err := lake.PlanTables(ctx, settings, opts)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(p)
}

func scan(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("want one stream (or table) name, got %d arguments; settings come on stdin", len(args))
	}
	settings, err := io.ReadAll(stdin)
	if err != nil {
		return fmt.Errorf("read settings from stdin: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	enc := json.NewEncoder(stdout)
	return lake.Scan(ctx, settings, args[0], func(rec arrow.RecordBatch) error {
		for i := 0; i < int(rec.NumRows()); i++ {
			row := map[string]any{}
			for j, f := range rec.Schema().Fields() {
				row[f.Name] = rec.Column(j).GetOneForMarshal(i)
			}
			if err := enc.Encode(row); err != nil {
				return err
			}
		}
		return nil
	})
}

func compact(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	var opts lake.CompactOptions
	fs.DurationVar(&opts.ExpireOlderThan, "expire-older-than", 0, "expire snapshots older than this (default 24h; negative keeps all)")
	fs.IntVar(&opts.RetainLast, "retain-last", 0, "snapshots kept whatever their age (default 10)")
	fs.DurationVar(&opts.OrphansOlderThan, "orphans-older-than", 0, "delete unreferenced files older than this (default 72h; negative keeps all)")
	fs.Int64Var(&opts.TargetFileSize, "target-file-size", 0, "bytes per rewritten file (default: the settings' target_file_size)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("want one stream (or table) name, got %d arguments; settings come on stdin", fs.NArg())
	}
	settings, err := io.ReadAll(stdin)
	if err != nil {
		return fmt.Errorf("read settings from stdin: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := lake.Compact(ctx, settings, fs.Arg(0), opts)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

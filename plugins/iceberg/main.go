// Command skippr-plugin-iceberg is skippr's Apache Iceberg destination: it commits each WAL sequence number
// into Iceberg tables exactly once. The implementation is package dest; README.md describes the settings.
//
// Table maintenance (`skippr lake compact`) and the plans `skippr query` reads are the protocol's optional
// services lake.compact and lake.plan (see lake/services.go). Outside the protocol, the binary only prints a
// table's current rows (deletes applied) as JSON lines, for checks from outside the engine (settings as JSON on
// stdin, so secrets stay out of argv):
//
//	skippr-plugin-iceberg scan STREAM
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"

	"github.com/skippr-dev/skippr/plugins/iceberg/dest"
)

var version = "0.1.0"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "scan" {
		if err := scan(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "skippr-plugin-iceberg scan:", err)
			os.Exit(1)
		}
		return
	}
	d := &dest.Destination{Version: version}
	// The settings' memory_limit becomes the Go runtime's soft memory limit. Arrow buffers come from Go's
	// allocator, so what an apply folds, writes out and drops is garbage the collector frees only when the heap
	// has doubled (GOGC=100): without a limit the process would hold about twice the apply's working set.
	// With it, the collector runs harder as the heap nears the cap. A GOMEMLIMIT in the environment wins.
	if os.Getenv("GOMEMLIMIT") == "" {
		d.SetMemoryLimit = debug.SetMemoryLimit
	}
	serve.Serve(d)
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
	return dest.Scan(ctx, settings, args[0], func(rec arrow.RecordBatch) error {
		for i := 0; i < int(rec.NumRows()); i++ {
			row := map[string]any{}
			for j, f := range rec.Schema().Fields() {
				row[f.Name] = marshalValue(rec.Column(j), i)
			}
			if err := enc.Encode(row); err != nil {
				return err
			}
		}
		return nil
	})
}

// marshalValue is Arrow's JSON form of a value, except a time of day: Arrow prints it through time.Time, which
// turns PostgreSQL's 24:00:00 into 00:00:00, so it is printed from its count of the unit instead.
func marshalValue(col arrow.Array, i int) any {
	t, ok := col.(*array.Time64)
	if !ok || col.IsNull(i) {
		return col.GetOneForMarshal(i)
	}
	unit := int64(t.DataType().(*arrow.Time64Type).Unit.Multiplier()) // nanoseconds per unit
	ns := int64(t.Value(i)) * unit
	s := fmt.Sprintf("%02d:%02d:%02d", ns/3600e9, ns/60e9%60, ns/1e9%60)
	if frac := ns % 1e9; frac != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%09d", frac), "0")
	}
	return s
}

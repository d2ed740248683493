//go:build duckdb_arrow

package query

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/duckdb/duckdb-go/v2"
)

// arrowOut writes the result as an Arrow IPC stream: DuckDB hands over each of its data chunks as an Arrow
// record batch (through the C data interface), which is written as it comes; no value is converted one by
// one. It needs the duckdb_arrow build tag, which every build of this plugin sets (see arrow_notag.go).
func arrowOut(ctx context.Context, conn *sql.Conn, q string, w io.Writer) (int64, error) {
	var n int64
	err := conn.Raw(func(dc any) error {
		dconn, ok := dc.(driver.Conn)
		if !ok {
			return fmt.Errorf("duckdb connection is a %T", dc)
		}
		a, err := duckdb.NewArrowFromConn(dconn)
		if err != nil {
			return err
		}
		rr, err := a.QueryContext(ctx, q)
		if err != nil {
			return err
		}
		defer rr.Release()
		iw := ipc.NewWriter(w, ipc.WithSchema(rr.Schema()), ipc.WithAllocator(memory.DefaultAllocator))
		for rr.Next() {
			rec := rr.RecordBatch()
			if err := iw.Write(rec); err != nil {
				return fmt.Errorf("write result: %w", err)
			}
			n += rec.NumRows()
		}
		if err := rr.Err(); err != nil {
			return err
		}
		// Close writes the schema too when the result has no batch, and the end-of-stream marker.
		if err := iw.Close(); err != nil {
			return fmt.Errorf("write result: %w", err)
		}
		return nil
	})
	return n, err
}

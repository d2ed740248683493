package query

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// BenchmarkPointLookup answers `SELECT * FROM people WHERE id = ?` over a 1M-row lake (8 files) and 100k WAL
// rows, as `skippr serve` asks (arrow format): "cached" through one WALCache whose state does not change (the
// database is reused), "fresh" as a statement without the cache (a database built per statement). The cached
// run also reports where a statement's time goes: the connection (with its search path), the SELECT check,
// and the query itself; the rest of ns/op is reading the request and the cache key.
//
//	cd plugins/duckdb && go test -tags duckdb_arrow -run - -bench PointLookup -benchtime 50x ./query
func BenchmarkPointLookup(b *testing.B) {
	dir := b.TempDir()
	db, err := sql.Open("duckdb", "")
	if err != nil {
		b.Fatal(err)
	}
	const files, perFile = 8, 125_000
	var plan lakequery.TablePlan
	for i := range files {
		f := filepath.Join(dir, fmt.Sprintf("data-%d.parquet", i))
		if _, err := db.Exec(fmt.Sprintf(`COPY (SELECT (range + %d)::BIGINT AS id, 'name ' || range AS name FROM range(%d))
			TO '%s' (FORMAT parquet, FIELD_IDS {id: 1, name: 2})`, i*perFile, perFile, f)); err != nil {
			b.Fatal(err)
		}
		plan.Files = append(plan.Files, lakequery.PlanFile{Path: f, Location: "file://" + f, Rows: perFile})
	}
	db.Close()
	id := func(f arrow.Field, n int) arrow.Field {
		f.Metadata = arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{fmt.Sprint(n)})
		return f
	}
	sc := arrow.NewSchema([]arrow.Field{
		id(arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64}, 1),
		id(arrow.Field{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true}, 2),
	}, nil)
	if plan.ArrowSchema, err = protocol.EncodeSchema(memory.DefaultAllocator, sc); err != nil {
		b.Fatal(err)
	}
	plan.Stream, plan.Name, plan.Table, plan.Exists, plan.Fence, plan.Key = "public.people", "lake.people", "people", true, 2, []string{"id"}
	var rows []walRow
	for i := range int64(100_000) {
		rows = append(rows, walRow{change.OpUpdate, i * 7, "updated", "u@x"})
	}
	batch := walBatch(b, rows...)
	stream := func(ws []lakequery.WALState, key int64, withEntry bool) io.Reader {
		var in bytes.Buffer
		w, err := lakequery.NewWriter(&in, lakequery.Request{SQL: fmt.Sprintf("SELECT * FROM people WHERE id = %d", key), Format: lakequery.FormatArrow, WAL: ws,
			Lakes: []lakequery.Lake{{Pipeline: "p", Plan: lakequery.Plan{Namespace: "lake", Tables: []lakequery.TablePlan{plan}}}}})
		if err != nil {
			b.Fatal(err)
		}
		if withEntry {
			w.Entry("p", 3)
			w.Batch("public.people", int64(len(rows)), batch)
		}
		return &in
	}
	ctx := context.Background()
	b.Run("cached", func(b *testing.B) {
		cache := NewWALCache(b.TempDir())
		defer cache.Close()
		if _, err := Answer(ctx, stream([]lakequery.WALState{{Pipeline: "p", Log: "L", Through: 3}}, 1, true), io.Discard, Options{WAL: cache}); err != nil {
			b.Fatal(err)
		}
		var e *engine
		for _, x := range cache.engines.entries {
			e = x
		}
		var connT, checkT, queryT time.Duration
		b.ResetTimer()
		for i := range b.N {
			if _, err := Answer(ctx, stream([]lakequery.WALState{{Pipeline: "p", Log: "L", Base: 3, Through: 3}}, int64(i*7919%1_000_000), false), io.Discard, Options{WAL: cache}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			t0 := time.Now()
			conn, err := e.conn(ctx)
			if err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			q := fmt.Sprintf("SELECT * FROM people WHERE id = %d", i*7919%1_000_000)
			if ok, err := readOnlySQL(ctx, conn, q); !ok || err != nil {
				b.Fatal(ok, err)
			}
			t2 := time.Now()
			if _, err := answer(ctx, conn, lakequery.Request{SQL: q, Format: lakequery.FormatArrow}, io.Discard, e.dir); err != nil {
				b.Fatal(err)
			}
			t3 := time.Now()
			conn.Close()
			connT, checkT, queryT = connT+t1.Sub(t0), checkT+t2.Sub(t1), queryT+t3.Sub(t2)
			b.StartTimer()
		}
		n := float64(b.N)
		b.ReportMetric(float64(connT.Microseconds())/n, "conn-µs/op")
		b.ReportMetric(float64(checkT.Microseconds())/n, "check-µs/op")
		b.ReportMetric(float64(queryT.Microseconds())/n, "query-µs/op")
	})
	b.Run("fresh", func(b *testing.B) {
		for i := range b.N {
			if _, err := Answer(ctx, stream(nil, int64(i*7919%1_000_000), true), io.Discard, Options{TempDir: b.TempDir()}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

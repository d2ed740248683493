package query

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// lakeFixture writes a small Iceberg-shaped table with DuckDB: one data file whose columns carry field ids
// (one of them under an old name, as after a rename), an equality-delete file and a position-delete file.
// Lake rows after deletes: ids 1 and 4 (2 is equality-deleted, 3 position-deleted).
func lakeFixture(t *testing.T) lakequery.TablePlan {
	t.Helper()
	dir := t.TempDir()
	data, eq, pos := filepath.Join(dir, "data.parquet"), filepath.Join(dir, "eq.parquet"), filepath.Join(dir, "pos.parquet")
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		fmt.Sprintf(`COPY (SELECT * FROM (VALUES (1::BIGINT, 'ann', 1.50::DECIMAL(12,2), ['a']), (2, 'bob', 2.00, ['b', 'c']), (3, 'cy', 3.25, []), (4, 'dee', 4.00, NULL)) v(id, old_name, amount, tags))
			TO '%s' (FORMAT parquet, FIELD_IDS {id: 1, old_name: 2, amount: 3, tags: {__duckdb_field_id: 4, element: 5}})`, data),
		fmt.Sprintf(`COPY (SELECT 2::BIGINT AS id) TO '%s' (FORMAT parquet, FIELD_IDS {id: 1})`, eq),
		fmt.Sprintf(`COPY (SELECT 'file://%s' AS file_path, 2::BIGINT AS pos) TO '%s' (FORMAT parquet)`, data, pos),
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	id := func(f arrow.Field, n int) arrow.Field {
		f.Metadata = arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{fmt.Sprint(n)})
		return f
	}
	sc := arrow.NewSchema([]arrow.Field{
		id(arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64}, 1),
		id(arrow.Field{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true}, 2),
		id(arrow.Field{Name: "amount", Type: &arrow.Decimal128Type{Precision: 12, Scale: 2}, Nullable: true}, 3),
		id(arrow.Field{Name: "tags", Type: arrow.ListOfField(id(arrow.Field{Name: "element", Type: arrow.BinaryTypes.String, Nullable: true}, 5)), Nullable: true}, 4),
	}, nil)
	schemaIPC, err := protocol.EncodeSchema(memory.DefaultAllocator, sc)
	if err != nil {
		t.Fatal(err)
	}
	return lakequery.TablePlan{
		Stream: "public.people", Name: "lake.people", Table: "people", Exists: true, Fence: 2, Key: []string{"id"},
		ArrowSchema: schemaIPC,
		Files: []lakequery.PlanFile{{Path: data, Location: "file://" + data, Rows: 4, PositionDeletes: []string{pos},
			EqualityDeletes: []lakequery.EqDeletion{{Path: eq, FieldIDs: []int{1}}}}},
	}
}

type walRow struct {
	op    change.Op
	id    int64
	name  string
	email string // a column the lake does not have yet
}

func walBatch(t testing.TB, rows ...walRow) []byte {
	t.Helper()
	sc := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "email", Type: arrow.BinaryTypes.String, Nullable: true},
	}, []string{"id"})
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r.id)
		b.Field(1).(*array.StringBuilder).Append(r.name)
		if r.email == "" {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.StringBuilder).Append(r.email)
		}
		b.Row(r.op, "")
	}
	rec := b.NewBatch()
	defer rec.Release()
	ipc, err := protocol.EncodeRecord(memory.DefaultAllocator, rec)
	if err != nil {
		t.Fatal(err)
	}
	return ipc
}

// run answers sql over the fixture lake plus WAL entries 2 (at the fence: already in the lake), 3 and 4.
func run(t *testing.T, sql, format string, asOfLake bool) (string, string, error) {
	t.Helper()
	var in bytes.Buffer
	w, err := lakequery.NewWriter(&in, lakequery.Request{SQL: sql, Format: format, AsOfLake: asOfLake,
		Lakes: []lakequery.Lake{{Pipeline: "p", Plan: lakequery.Plan{Namespace: "lake", Tables: []lakequery.TablePlan{lakeFixture(t)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	entries := []struct {
		seq  uint64
		rows []walRow
	}{
		{2, []walRow{{change.OpInsert, 99, "applied already", ""}}},
		{3, []walRow{{change.OpUpdate, 4, "dee2", "d@x"}, {change.OpDelete, 1, "", ""}, {change.OpInsert, 5, "eve", ""}, {change.OpInsert, 6, "fay", ""}}},
		{4, []walRow{{change.OpDelete, 6, "", ""}, {change.OpUpdate, 5, "eve2", "e@x"}, {change.OpInsert, 2, "bob again", ""}}},
	}
	for _, e := range entries {
		w.Entry("p", e.seq)
		if err := w.Batch("public.people", int64(len(e.rows)), walBatch(t, e.rows...)); err != nil {
			t.Fatal(err)
		}
	}
	// A stream of another pipeline (no lake destination) is ignored.
	w.Entry("other", 1)
	w.Batch("public.people", 1, walBatch(t, walRow{change.OpInsert, 77, "elsewhere", ""}))
	var out bytes.Buffer
	summary, err := Answer(context.Background(), &in, &out, Options{TempDir: t.TempDir()})
	return out.String(), summary, err
}

func TestQueryMergesLakeAndWAL(t *testing.T) {
	cases := []struct {
		name, sql, format string
		asOfLake          bool
		want              string
	}{
		{"every column, lake plus WAL", "SELECT * FROM lake.people ORDER BY id", "csv", false,
			"id,name,amount,tags,email\n2,bob again,,,\n4,dee2,,,d@x\n5,eve2,,,e@x\n"},
		{"the lake alone", "SELECT id, name, amount, tags FROM people ORDER BY id", "csv", true,
			"id,name,amount,tags\n1,ann,1.50,[a]\n4,dee,4.00,\n"},
		{"a subset of columns, filtered", "SELECT name FROM people WHERE id >= 4 AND email IS NOT NULL ORDER BY id;", "csv", false,
			"name\ndee2\neve2\n"},
		{"string aggregate", "SELECT count(*) AS n, string_agg(name, '|' ORDER BY id) AS names FROM people", "json", false,
			`{"n":3,"names":"bob again|dee2|eve2"}` + "\n"},
		{"aligned table", "SELECT id, name FROM people WHERE id = 5", "table", false,
			"id   name\n---  ----\n5    eve2\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, err := run(t, c.sql, c.format, c.asOfLake)
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			if out != c.want {
				t.Fatalf("got\n%s\nwant\n%s", out, c.want)
			}
			if !strings.Contains(errOut, " rows, ") && !strings.Contains(errOut, " row, ") {
				t.Fatalf("stderr %q: want the row count and time", errOut)
			}
		})
	}
}

// Parquet goes to stdout whole: DuckDB reads back what was written.
func TestQueryParquetOutput(t *testing.T) {
	out, errOut, err := run(t, "SELECT id, name FROM people ORDER BY id", "parquet", false)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	f := filepath.Join(t.TempDir(), "out.parquet")
	if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	var names string
	if err := db.QueryRow(fmt.Sprintf(`SELECT count(*), string_agg(name, '|' ORDER BY id) FROM read_parquet('%s')`, f)).Scan(&n, &names); err != nil {
		t.Fatal(err)
	}
	if n != 3 || names != "bob again|dee2|eve2" || !strings.Contains(errOut, "(3 rows, ") {
		t.Fatalf("parquet output: %d rows %q, stderr %q", n, names, errOut)
	}
}

func TestQueryErrors(t *testing.T) {
	for _, c := range []struct{ sql, want string }{
		{"SELEC 1", "Parser Error"},
		{"SELECT * FROM lake.nope", "known tables: lake.people"},
	} {
		_, _, err := run(t, c.sql, "table", false)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, lakequery.ErrSQL) {
			t.Fatalf("%s: error %v, want a query error containing %q", c.sql, err, c.want)
		}
	}
	// SQL that DuckDB accepts but that fails as it runs is a failure, not bad SQL.
	for _, sql := range []string{"SELECT CAST('x' AS INTEGER)", "SELECT CAST(300 AS TINYINT)"} {
		_, _, err := run(t, sql, "table", false)
		if err == nil || errors.Is(err, lakequery.ErrSQL) {
			t.Fatalf("%s: error %v, want a failure that is not a query error", sql, err)
		}
	}
}

// TestQueryHonoursUnappliedTruncate: a truncate in a WAL entry above the fence hides the lake's rows and the
// WAL rows before it; rows after it stay. A truncate at or below the fence is in the lake already.
func TestQueryHonoursUnappliedTruncate(t *testing.T) {
	query := func(t *testing.T, asOfLake bool) string {
		var in bytes.Buffer
		w, err := lakequery.NewWriter(&in, lakequery.Request{SQL: "SELECT id, name FROM people ORDER BY id", Format: "csv", AsOfLake: asOfLake,
			Lakes: []lakequery.Lake{{Pipeline: "p", Plan: lakequery.Plan{Namespace: "lake", Tables: []lakequery.TablePlan{lakeFixture(t)}}}}})
		if err != nil {
			t.Fatal(err)
		}
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		// Entry 2 is at the fence: its truncate is applied already, and the lake's rows 1 and 4 came after it.
		must(w.Entry("p", 2))
		must(w.Truncate("public.people"))
		must(w.Entry("p", 3))
		must(w.Batch("public.people", 2, walBatch(t, walRow{change.OpUpdate, 4, "dee2", ""}, walRow{change.OpInsert, 5, "eve", ""})))
		must(w.Truncate("public.people"))
		must(w.Batch("public.people", 1, walBatch(t, walRow{change.OpInsert, 7, "gus", ""})))
		must(w.Entry("p", 4))
		must(w.Batch("public.people", 2, walBatch(t, walRow{change.OpUpdate, 7, "gus2", ""}, walRow{change.OpInsert, 8, "hal", ""})))
		var out bytes.Buffer
		if _, err := Answer(context.Background(), &in, &out, Options{TempDir: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	if got, want := query(t, false), "id,name\n7,gus2\n8,hal\n"; got != want {
		t.Fatalf("with the WAL: got\n%s\nwant\n%s", got, want)
	}
	if got, want := query(t, true), "id,name\n1,ann\n4,dee\n"; got != want {
		t.Fatalf("as of the lake: got\n%s\nwant\n%s", got, want)
	}
}

package dest

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/iceberg-go/table"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

// fillSchemas are a table's schema before and after ADD COLUMN grade int DEFAULT 7, label text DEFAULT
// $$it's old$$, plain int (no value for the existing rows).
func fillSchemas() (v1, v2 *arrow.Schema) {
	existing := func(v string) arrow.Metadata {
		return arrow.NewMetadata([]string{values.MetaExistingRows}, []string{v})
	}
	id := arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64}
	name := arrow.Field{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true}
	v1 = change.Schema([]arrow.Field{id, name}, []string{"id"})
	v2 = change.Schema([]arrow.Field{id, name,
		{Name: "grade", Type: arrow.PrimitiveTypes.Int32, Nullable: true, Metadata: existing("7")},
		{Name: "label", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: existing("it's old")},
		{Name: "plain", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	}, []string{"id"})
	return v1, v2
}

// fillBase builds a v2 table with rows, updates and deletes before the column is added: equality deletes
// (updates and deletes of earlier snapshots' keys) and position deletes (a key an apply spilled and then
// updated). It returns the delete files the table holds.
func fillBase(t *testing.T, e *env) (deletes []string) {
	t.Helper()
	v1, _ := fillSchemas()
	var ins []row
	for id := 1; id <= 7; id++ {
		ins = append(ins, r(opI, id, "n"))
	}
	e.apply(1, append([]serve.Item{schemaItem("t", v1)}, items("t", batch(t, v1, ins...))...)...)
	e.d.hooks.bufferBudget = 1 // every item goes out as files: updating key 8 again takes a position delete
	e.apply(2, items("t", batch(t, v1, r(opI, 8, "n"), r(opI, 9, "n")), batch(t, v1, r(opU, 8, "n8b"), r(opU, 2, "n2b"), r(opD, 3, nil)))...)
	e.d.hooks.bufferBudget = 0
	e.apply(3, items("t", batch(t, v1, r(opU, 4, "n4b"), r(opD, 5, nil)))...)
	tasks, err := e.table("t").Scan().PlanFiles(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var pos, eq bool
	for _, task := range tasks {
		pos = pos || len(task.DeleteFiles) > 0
		eq = eq || len(task.EqualityDeleteFiles) > 0
	}
	if !pos || !eq {
		t.Fatalf("the table before the ADD COLUMN holds position deletes %v, equality deletes %v: want both", pos, eq)
	}
	_, deletes = tableFiles(t, e.table("t"))
	return deletes
}

// TestAddedColumnFillsExistingRowsV2: on a format v2 table (no initial-default), a column added with a value
// for the rows already there (values.MetaExistingRows, from ADD COLUMN … DEFAULT) is filled by rewriting the
// table's live data files in the schema change's commit. Every old row reads the value, rows deleted before
// stay deleted (their equality and position delete files go with the rewrite), an old key updated in the same
// apply is not duplicated (the apply's equality deletes reach the rewritten rows), a row of the apply in the
// older shape gets the value, new rows keep theirs; one catalog commit; a replay changes nothing. Without the
// rewrite every old row reads NULL.
func TestAddedColumnFillsExistingRowsV2(t *testing.T) {
	v1, v2 := fillSchemas()
	cases := []struct {
		name     string
		settings map[string]any
		spilled  bool
		entry    func(t *testing.T) []serve.Item
		want     map[string]map[string]any // key -> columns grade, label, name
	}{
		{name: "in memory", entry: func(t *testing.T) []serve.Item {
			return []serve.Item{
				{Stream: "t", Record: batch(t, v1, r(opI, 10, "n"))}, // before the ADD COLUMN at the source
				schemaItem("t", v2),
				{Stream: "t", Record: batch(t, v2, r(opU, 1, "n1b", 9, "new", 1), r(opI, 11, "n", nil, nil, nil))},
			}
		}, want: map[string]map[string]any{"10": {"grade": float64(7), "label": "it's old", "name": "n"}}},
		{name: "partitioned by a non-key column (global equality deletes)", settings: map[string]any{"partitions": map[string]any{"t": []string{"name"}}},
			entry: func(t *testing.T) []serve.Item {
				return []serve.Item{schemaItem("t", v2), {Stream: "t", Record: batch(t, v2, r(opU, 1, "n1b", 9, "new", 1), r(opI, 11, "n", nil, nil, nil))}}
			}},
		{name: "spilled", spilled: true, entry: func(t *testing.T) []serve.Item {
			return []serve.Item{
				schemaItem("t", v2),
				{Stream: "t", Record: batch(t, v2, r(opU, 1, "n1", 8, "new", 1), r(opI, 11, "n", nil, nil, nil))},
				{Stream: "t", Record: batch(t, v2, r(opU, 1, "n1b", 9, "new", 1))},
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.settings)
			oldDeletes := fillBase(t, e)
			before := e.table("t").Metadata()
			if tc.spilled {
				e.d.hooks.bufferBudget = 1
			}
			entry := tc.entry(t)
			e.apply(4, entry...)
			e.d.hooks.bufferBudget = 0

			old := func(name string) map[string]any {
				return map[string]any{"grade": float64(7), "label": "it's old", "name": name}
			}
			want := map[string]map[string]any{
				"1": {"grade": float64(9), "label": "new", "name": "n1b", "plain": float64(1)}, "2": old("n2b"), "4": old("n4b"), "6": old("n"),
				"7": old("n"), "8": old("n8b"), "9": old("n"), "11": {"name": "n"},
			}
			for k, v := range tc.want {
				want[k] = v
			}
			checkFilled(t, e, want)

			after := e.table("t").Metadata()
			if got := len(slices.Collect(after.PreviousFiles())) - len(slices.Collect(before.PreviousFiles())); got != 1 {
				t.Errorf("the apply made %d catalog commits, want 1", got)
			}
			// The rewrite and the apply's row delta: two snapshots of the one commit, the rewrite first.
			snaps := after.Snapshots()[len(before.Snapshots()):]
			if len(snaps) != 2 || snaps[0].Summary.Operation != table.OpReplace || snaps[0].Summary.Properties[propFilled] != "grade,label" {
				t.Errorf("snapshots added: %+v, want the rewrite (replace, %s=grade,label) and the row delta", snaps, propFilled)
			}
			_, deletes := tableFiles(t, e.table("t"))
			for _, d := range oldDeletes {
				if slices.Contains(deletes, d) {
					t.Errorf("delete file %s of the rewritten rows is still live", d)
				}
			}
			planHasColumn(t, e, "grade")

			if res := e.apply(4, entry...); !res.Skipped {
				t.Fatal("a replay of 4 was not skipped")
			}
			if n := len(e.table("t").Metadata().Snapshots()); n != len(after.Snapshots()) {
				t.Errorf("the replay added %d snapshots", n-len(after.Snapshots()))
			}
			checkFilled(t, e, want)
		})
	}
}

// TestAddedColumnFillCrash: a process that dies before the commit of the rewrite leaves the table as it was,
// and the replay fills the rows exactly once; one that dies after it (before the completion marker) makes the
// replay a no-op. The entry carries only the schema change, as PostgreSQL logs an ADD COLUMN.
func TestAddedColumnFillCrash(t *testing.T) {
	_, v2 := fillSchemas()
	errCrash := errors.New("injected crash")
	for _, at := range []string{"before commit", "after commit"} {
		t.Run(at, func(t *testing.T) {
			e := newEnv(t, nil)
			fillBase(t, e)
			before := e.table("t").Metadata()
			entry := []serve.Item{schemaItem("t", v2)}
			if at == "before commit" {
				e.d.hooks.beforeCommit = func(string, int) error { return errCrash }
			} else {
				e.d.hooks.afterCommit = func(string) error { return errCrash }
			}
			_, err := e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: 4, Items: entry})
			if !errors.Is(err, errCrash) {
				t.Fatalf("apply 4: %v, want the injected crash", err)
			}
			if at == "before commit" {
				if m := e.table("t").Metadata(); len(m.Snapshots()) != len(before.Snapshots()) || m.CurrentSchema().ID != before.CurrentSchema().ID {
					t.Fatalf("the failed apply changed the table: %d snapshots (was %d), schema %d (was %d)",
						len(m.Snapshots()), len(before.Snapshots()), m.CurrentSchema().ID, before.CurrentSchema().ID)
				}
			}
			// A new process replays the entry.
			e.d.Close()
			e.d = &Destination{Version: "test", Log: testLogger(t)}
			t.Cleanup(func() { e.d.Close() })
			res := e.apply(4, entry...)
			if res.Skipped != (at == "after commit") {
				t.Errorf("replay: %+v", res)
			}
			old := func(name string) map[string]any {
				return map[string]any{"grade": float64(7), "label": "it's old", "name": name}
			}
			checkFilled(t, e, map[string]map[string]any{"1": old("n"), "2": old("n2b"), "4": old("n4b"), "6": old("n"), "7": old("n"), "8": old("n8b"), "9": old("n")})
			rewrites := 0
			for _, s := range e.table("t").Metadata().Snapshots() {
				if s.Summary.Properties[propFilled] != "" {
					rewrites++
				}
			}
			if got := len(e.table("t").Metadata().Snapshots()) - len(before.Snapshots()); got != 1 || rewrites != 1 {
				t.Errorf("%d snapshots added, %d rewrites: want the one rewrite", got, rewrites)
			}
		})
	}
}

// checkFilled compares the table's rows (read with iceberg-go, deletes applied) with want: key -> the columns
// want names (absent: NULL).
func checkFilled(t *testing.T, e *env, want map[string]map[string]any) {
	t.Helper()
	got := e.rows("t", "id")
	if len(got) != len(want) {
		t.Fatalf("rows %v, want %d", got, len(want))
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("row %s is missing", k)
			continue
		}
		for _, c := range []string{"name", "grade", "label", "plain"} {
			if g[c] != w[c] {
				t.Errorf("row %s column %s = %v, want %v", k, c, g[c], w[c])
			}
		}
	}
}

// planHasColumn checks that every data file of the table's plan (what `skippr query` hands DuckDB, which reads
// the files by column name and, on a v2 table, has no default to fill in) holds the column.
func planHasColumn(t *testing.T, e *env, col string) {
	t.Helper()
	p, err := PlanTables(ctxT(t), e.raw, PlanOptions{Pipeline: e.pipeline})
	if err != nil || len(p.Tables) != 1 {
		t.Fatalf("plan: %+v, %v", p, err)
	}
	for _, f := range p.Tables[0].Files {
		fh, err := os.Open(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		rd, err := file.NewParquetReader(fh)
		if err != nil {
			fh.Close()
			t.Fatal(err)
		}
		if rd.MetaData().Schema.ColumnIndexByName(col) < 0 {
			t.Errorf("data file %s (%d rows) has no column %s", f.Path, f.Rows, col)
		}
		rd.Close()
	}
}

// TestAddedColumnFillSpilledBeforeIsLogged: an apply that spilled rows in the older shape before the schema
// that adds the column fills the table's rows, but not those (uncommitted, written before the column existed):
// they read NULL, and the log says so, naming the column.
func TestAddedColumnFillSpilledBeforeIsLogged(t *testing.T) {
	v1, v2 := fillSchemas()
	e := newEnv(t, nil)
	var logs bytes.Buffer
	e.d.Log = slog.New(slog.NewTextHandler(&logs, nil))
	e.apply(1, append([]serve.Item{schemaItem("t", v1)}, items("t", batch(t, v1, r(opI, 1, "n")))...)...)
	e.d.hooks.bufferBudget = 1
	e.apply(2, serve.Item{Stream: "t", Record: batch(t, v1, r(opI, 10, "n"))}, schemaItem("t", v2),
		serve.Item{Stream: "t", Record: batch(t, v2, r(opI, 11, "n", 3, "x", nil))})
	checkFilled(t, e, map[string]map[string]any{"1": {"grade": float64(7), "label": "it's old", "name": "n"},
		"10": {"name": "n"}, "11": {"grade": float64(3), "label": "x", "name": "n"}})
	if !strings.Contains(logs.String(), "before a column was added read NULL") || !strings.Contains(logs.String(), "column=grade") {
		t.Errorf("log does not name column grade:\n%s", logs.String())
	}
}

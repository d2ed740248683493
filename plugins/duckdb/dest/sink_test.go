package dest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

// harness is a destination on a fresh file.
type harness struct {
	t *testing.T
	// d serves dest as the engine does: one session for the harness's settings.
	d        *serve.Sessions
	dest     *Destination
	path     string
	settings json.RawMessage
}

func newHarness(t *testing.T, schema string) *harness {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sub", "dest.duckdb")
	m := map[string]string{"path": path}
	if schema != "" {
		m["schema"] = schema
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	dest := &Destination{}
	h := &harness{t: t, d: serve.NewSessions(dest), dest: dest, path: path, settings: raw}
	t.Cleanup(func() {
		if err := h.d.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return h
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func (h *harness) apply(seq uint64, items ...serve.Item) serve.ApplyResult {
	h.t.Helper()
	res, err := h.d.Apply(ctx(h.t), serve.ApplyRequest{Settings: h.settings, Pipeline: "p", Sequence: seq, Items: items})
	if err != nil {
		h.t.Fatalf("apply %d: %v", seq, err)
	}
	return res
}

// rows returns the query's rows, each as its columns' text joined by "|".
func (h *harness) rows(q string) []string {
	h.t.Helper()
	h.dest.mu.Lock()
	defer h.dest.mu.Unlock()
	o := h.dest.dbs[h.path]
	if o == nil {
		h.t.Fatal("database not open")
	}
	rs, err := o.db.QueryContext(ctx(h.t), q)
	if err != nil {
		h.t.Fatalf("%s: %v", q, err)
	}
	defer rs.Close()
	cols, _ := rs.Columns()
	var out []string
	for rs.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			h.t.Fatal(err)
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			switch v := v.(type) {
			case nil:
				parts[i] = "NULL"
			case string:
				parts[i] = v
			case []byte:
				parts[i] = string(v)
			default:
				b, _ := json.Marshal(v)
				parts[i] = string(b)
			}
		}
		out = append(out, strings.Join(parts, "|"))
	}
	if err := rs.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

func (h *harness) wantRows(q string, want ...string) {
	h.t.Helper()
	got := h.rows(q)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		h.t.Fatalf("%s:\ngot  %q\nwant %q", q, got, want)
	}
}

// change is one row of a test batch: an id, a name (nil for null) and an op.
type chg struct {
	op   change.Op
	id   int64
	name any
}

var userSchema = change.Schema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
}, []string{"id"})

func batch(t *testing.T, sc *arrow.Schema, rows ...chg) serve.Item {
	t.Helper()
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r.id)
		if r.name == nil {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(r.name.(string))
		}
		for i := 2; i < len(change.DataFields(sc)); i++ {
			b.Field(i).AppendNull()
		}
		b.Row(r.op, "")
	}
	rec := b.NewBatch()
	t.Cleanup(rec.Release)
	return serve.Item{Stream: "public.users", Record: rec}
}

func TestApplyUpsertsAndDeletesByKey(t *testing.T) {
	h := newHarness(t, "")
	res := h.apply(1, batch(t, userSchema,
		chg{change.OpRead, 1, "ann"}, chg{change.OpRead, 2, "bob"}, chg{change.OpInsert, 3, "cy"}))
	if res.Skipped || res.Rows != 3 {
		t.Fatalf("apply 1: %+v", res)
	}
	h.wantRows(`SELECT id, name FROM users ORDER BY id`, "1|ann", "2|bob", "3|cy")
	h.apply(2,
		batch(t, userSchema,
			chg{change.OpUpdate, 1, "ann2"}, chg{change.OpDelete, 2, nil}, chg{change.OpInsert, 4, "dee"},
			chg{change.OpUpdate, 4, "dee2"}, // the newest row of a key within an apply wins
			chg{change.OpDelete, 5, nil},    // deleting what is not there is a no-op
			chg{change.OpUpdate, 6, "eve"}), // an update of a missing key creates it
		batch(t, userSchema, chg{change.OpDelete, 3, nil}, chg{change.OpInsert, 3, "cy2"}, chg{change.OpUpdate, 1, nil}),
	)
	h.wantRows(`SELECT id, name FROM users ORDER BY id`, "1|NULL", "3|cy2", "4|dee2", "6|eve")
	h.wantRows(`SELECT pipeline, sequence, streams FROM _skippr_state`, `p|2|{"public.users":2}`)
	la, err := h.d.LastApplied(ctx(t), h.settings, "p")
	if err != nil || la.Sequence != 2 || la.Streams["public.users"] != 2 {
		t.Fatalf("last applied: %+v %v", la, err)
	}
	if la, err := h.d.LastApplied(ctx(t), h.settings, "other"); err != nil || la.Sequence != 0 {
		t.Fatalf("last applied of another pipeline: %+v %v", la, err)
	}
}

func TestReplayOfAnAppliedSequenceIsSkipped(t *testing.T) {
	h := newHarness(t, "analytics")
	la, err := h.d.LastApplied(ctx(t), h.settings, "p")
	if err != nil || la.Sequence != 0 {
		t.Fatalf("last applied on a new file: %+v %v", la, err)
	}
	h.apply(1, batch(t, userSchema, chg{change.OpInsert, 1, "a"}))
	h.apply(2, batch(t, userSchema, chg{change.OpInsert, 2, "b"}))
	for _, seq := range []uint64{1, 2} {
		if res := h.apply(seq, batch(t, userSchema, chg{change.OpInsert, 1, "replayed"}, chg{change.OpInsert, 9, "x"})); !res.Skipped {
			t.Fatalf("apply %d again: not skipped", seq)
		}
	}
	h.wantRows(`SELECT id, name FROM analytics.users ORDER BY id`, "1|a", "2|b")
	h.wantRows(`SELECT sequence FROM analytics._skippr_state WHERE pipeline = 'p'`, "2")
}

func TestFailedApplyLeavesNothing(t *testing.T) {
	h := newHarness(t, "")
	// items.v is BIGINT; a later batch sends text that does not cast.
	one := func(stream string, dt arrow.DataType, v string) serve.Item {
		sc := change.Schema([]arrow.Field{{Name: "v", Type: dt}}, nil)
		rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, sc, strings.NewReader(`[{"v": `+v+`, "_skippr_op": 1}]`))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rec.Release)
		return serve.Item{Stream: stream, Record: rec}
	}
	h.apply(1, batch(t, userSchema, chg{change.OpInsert, 1, "a"}), one("zzz.items", arrow.PrimitiveTypes.Int64, "7"))
	// The users rows are merged before the items rows fail: the rollback must take them back.
	_, err := h.d.Apply(ctx(t), serve.ApplyRequest{Settings: h.settings, Pipeline: "p", Sequence: 2, Items: []serve.Item{
		batch(t, userSchema, chg{change.OpInsert, 2, "b"}, chg{change.OpDelete, 1, nil}),
		one("zzz.items", arrow.BinaryTypes.String, `"not a number"`),
	}})
	if err == nil || !strings.Contains(err.Error(), "stream zzz.items") {
		t.Fatalf("apply with a value that does not fit its column: %v", err)
	}
	h.wantRows(`SELECT id, name FROM users ORDER BY id`, "1|a")
	h.wantRows(`SELECT v FROM items`, "7")
	h.wantRows(`SELECT sequence FROM _skippr_state`, "1")
	// The same sequence number applies once the batch is sound.
	h.apply(2, batch(t, userSchema, chg{change.OpInsert, 2, "b"}), one("zzz.items", arrow.BinaryTypes.String, `"8"`))
	h.wantRows(`SELECT id, name FROM users ORDER BY id`, "1|a", "2|b")
	h.wantRows(`SELECT v FROM items ORDER BY v`, "7", "8")

	// An update or delete of a keyless stream has no row to find.
	b := change.NewBuilder(memory.DefaultAllocator, change.Schema([]arrow.Field{{Name: "v", Type: arrow.PrimitiveTypes.Int64}}, nil))
	b.Field(0).(*array.Int64Builder).Append(7)
	b.Row(change.OpUpdate, "")
	rec := b.NewBatch()
	b.Release()
	defer rec.Release()
	_, err = h.d.Apply(ctx(t), serve.ApplyRequest{Settings: h.settings, Pipeline: "p", Sequence: 3, Items: []serve.Item{{Stream: "zzz.items", Record: rec}}})
	if err == nil || !strings.Contains(err.Error(), "no primary key") {
		t.Fatalf("apply of an update to a keyless stream: %v", err)
	}
}

func TestKeylessStreamAppends(t *testing.T) {
	h := newHarness(t, "")
	sc := change.Schema([]arrow.Field{{Name: "msg", Type: arrow.BinaryTypes.String}}, nil)
	item := func() serve.Item {
		b := change.NewBuilder(memory.DefaultAllocator, sc)
		defer b.Release()
		for _, m := range []string{"x", "x", "y"} {
			b.Field(0).(*array.StringBuilder).Append(m)
			b.Row(change.OpInsert, "")
		}
		rec := b.NewBatch()
		t.Cleanup(rec.Release)
		return serve.Item{Stream: "logs", Record: rec}
	}
	h.apply(1, item())
	h.apply(2, item())
	h.apply(2, item()) // skipped
	h.wantRows(`SELECT msg, count(*) FROM logs GROUP BY msg ORDER BY msg`, "x|4", "y|2")
	h.wantRows(`SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'logs' AND constraint_type = 'PRIMARY KEY'`, "0")
}

func TestSchemaGrowthAddsColumns(t *testing.T) {
	h := newHarness(t, "")
	grown := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "Score", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	}, []string{"id"})
	// A schema change alone creates the table.
	h.apply(1, serve.Item{Stream: "public.users", Schema: &serve.Stream{Name: "public.users", Schema: userSchema, PrimaryKey: []string{"id"}}})
	h.wantRows(`SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'users' ORDER BY column_index`, "id|BIGINT", "name|VARCHAR")
	// No PRIMARY KEY: its index would hold every key in memory (tableDDL).
	h.wantRows(`SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'users' AND constraint_type = 'PRIMARY KEY'`, "0")

	// One apply holds rows of the old schema, the schema change, and rows of the new one.
	b := change.NewBuilder(memory.DefaultAllocator, grown)
	b.Field(0).(*array.Int64Builder).Append(2)
	b.Field(1).(*array.StringBuilder).Append("bob")
	b.Field(2).(*array.Float64Builder).Append(2.5)
	b.Row(change.OpInsert, "")
	b.Field(0).(*array.Int64Builder).Append(1)
	b.Field(1).(*array.StringBuilder).Append("ann2")
	b.Field(2).(*array.Float64Builder).Append(1.5)
	b.Row(change.OpUpdate, "")
	rec := b.NewBatch()
	b.Release()
	defer rec.Release()
	h.apply(2,
		batch(t, userSchema, chg{change.OpInsert, 1, "ann"}, chg{change.OpInsert, 3, "cy"}),
		serve.Item{Stream: "public.users", Schema: &serve.Stream{Name: "public.users", Schema: grown}},
		serve.Item{Stream: "public.users", Record: rec},
	)
	h.wantRows(`SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'users' ORDER BY column_index`, "id|BIGINT", "name|VARCHAR", "Score|DOUBLE")
	h.wantRows(`SELECT id, name, Score FROM users ORDER BY id`, "1|ann2|1.5", "2|bob|2.5", "3|cy|NULL")
	// Old-schema rows after the growth leave the new column alone on update.
	h.apply(3, batch(t, userSchema, chg{change.OpUpdate, 2, "bob2"}))
	h.wantRows(`SELECT id, name, score FROM users ORDER BY id`, "1|ann2|1.5", "2|bob2|2.5", "3|cy|NULL")
}

func TestNestedValuesRoundTrip(t *testing.T) {
	h := newHarness(t, "")
	addr := arrow.StructOf(
		arrow.Field{Name: "city", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "zip", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		arrow.Field{Name: "geo", Type: arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Float64), Nullable: true})
	sc := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "address", Type: addr, Nullable: true},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
		{Name: "history", Type: arrow.ListOf(addr), Nullable: true},
		{Name: "matrix", Type: arrow.LargeListOf(arrow.ListOf(arrow.PrimitiveTypes.Int16)), Nullable: true},
		{Name: "attrs", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64), Nullable: true},
	}, []string{"id"})
	rows := []string{
		`{"id":1,"address":{"city":"Oslo","zip":150,"geo":[59.9,10.7]},"tags":["a","b"],"history":[{"city":"Lima","zip":null,"geo":null},null],"matrix":[[1,2],[],null],"attrs":{"k":1,"z":2}}`,
		`{"id":2,"address":null,"tags":[],"history":null,"matrix":null,"attrs":{}}`,
		`{"id":3,"address":{"city":null,"zip":null,"geo":null},"tags":[null,"c"],"history":[],"matrix":[[-3]],"attrs":null}`,
	}
	// Arrow's JSON form of a map is a list of key/value objects; DuckDB's is an object.
	in := strings.NewReplacer(`{"k":1,"z":2}`, `[{"key":"k","value":1},{"key":"z","value":2}]`, `"attrs":{}`, `"attrs":[]`).Replace("[" + strings.Join(rows, ",") + "]")
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, arrow.NewSchema(change.DataFields(sc), nil), strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	// Add the op column: all inserts.
	ob := array.NewInt8Builder(memory.DefaultAllocator)
	for range rows {
		ob.Append(int8(change.OpInsert))
	}
	ops := ob.NewArray()
	ob.Release()
	defer ops.Release()
	md := sc.Metadata()
	full := array.NewRecordBatch(arrow.NewSchema(append(change.DataFields(sc), change.OpField), &md), append(rec.Columns(), ops), rec.NumRows())
	defer full.Release()
	h.apply(1, serve.Item{Stream: "nested", Record: full})
	h.wantRows(`SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'nested' ORDER BY column_index`,
		"id|BIGINT",
		`address|STRUCT(city VARCHAR, zip INTEGER, geo DOUBLE[])`,
		"tags|VARCHAR[]",
		`history|STRUCT(city VARCHAR, zip INTEGER, geo DOUBLE[])[]`,
		"matrix|SMALLINT[][]",
		"attrs|MAP(VARCHAR, BIGINT)")
	// Dump reads the file from outside (read-only), so the destination lets go of it first.
	if err := h.d.Close(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Dump(ctx(t), h.settings, "nested", &out); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(got) != len(rows) {
		t.Fatalf("dump: %d rows, want %d:\n%s", len(got), len(rows), out.String())
	}
	for i := range rows {
		if !sameJSON(t, got[i], rows[i]) {
			t.Errorf("row %d:\ngot  %s\nwant %s", i, got[i], rows[i])
		}
	}
}

func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

func TestCheckExplainsBadPaths(t *testing.T) {
	dir := t.TempDir()
	notDB := filepath.Join(dir, "notes.duckdb")
	if err := os.WriteFile(notDB, []byte("these are not the bytes of a database, but long enough to have a header of some sort......"), 0o644); err != nil {
		t.Fatal(err)
	}
	aFile := filepath.Join(dir, "file")
	if err := os.WriteFile(aFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A database whose first block is torn, as DuckDB 1.5 left one behind a SIGKILL during a checkpoint
	// (README, Crash safety): bytes of the block after its checksum overwritten.
	torn := filepath.Join(dir, "torn.duckdb")
	if err := (&Destination{}).Check(ctx(t), json.RawMessage(`{"path": "`+torn+`"}`)); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(torn, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, 4096), 12288+8192); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, tc := range []struct {
		name, settings, want string
	}{
		{"ok", `{"path": "` + filepath.Join(dir, "new", "ok.duckdb") + `"}`, ""},
		{"no path", `{}`, "path (the .duckdb file) is required"},
		{"unknown key", `{"path": "x.duckdb", "file": "y"}`, `unknown field "file"`},
		{"in memory", `{"path": ":memory:"}`, "must be a file"},
		{"directory", `{"path": "` + dir + `"}`, "is a directory"},
		{"parent is a file", `{"path": "` + filepath.Join(aFile, "x.duckdb") + `"}`, "create its directory"},
		{"not a database", `{"path": "` + notDB + `"}`, "not a DuckDB database"},
		{"damaged", `{"path": "` + torn + `"}`, "is damaged (a block's checksum does not match)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Destination{}
			err := d.Check(ctx(t), json.RawMessage(tc.settings))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("check: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("check: got %v, want an error containing %q", err, tc.want)
			case tc.name == "damaged" && fault.ClassOf(err) != fault.Config:
				t.Fatalf("check: %v is %s, want a config fault (a person must act; a retry fails the same way)", err, fault.ClassOf(err))
			}
		})
	}
}

func TestSpecSchemaNamesBadKeys(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal([]byte((&Destination{}).Spec().SettingsSchema), &schema); err != nil {
		t.Fatal(err)
	}
	if schema["additionalProperties"] != false {
		t.Fatalf("settings schema must refuse unknown keys: %v", schema)
	}
	caps, err := (&Destination{}).Capabilities(ctx(t), json.RawMessage(`{"path": "x.duckdb"}`))
	if err != nil || !caps.ExactlyOnce || !caps.Deletes || !caps.SchemaEvolution {
		t.Fatalf("capabilities: %+v %v", caps, err)
	}
}

func TestCompositeKeyAndNameCase(t *testing.T) {
	h := newHarness(t, "")
	sc := change.Schema([]arrow.Field{
		{Name: "Region", Type: arrow.BinaryTypes.String},
		{Name: "n", Type: arrow.PrimitiveTypes.Int32},
		{Name: "v", Type: arrow.BinaryTypes.String, Nullable: true},
	}, []string{"Region", "n"})
	item := func(stream, rows string) serve.Item {
		rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, sc, strings.NewReader(rows))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rec.Release)
		return serve.Item{Stream: stream, Record: rec}
	}
	h.apply(1, item("a.Orders", `[
		{"Region": "eu", "n": 1, "v": "eu1", "_skippr_op": 1},
		{"Region": "us", "n": 1, "v": "us1", "_skippr_op": 1},
		{"Region": "eu", "n": 2, "v": "eu2", "_skippr_op": 1}]`))
	// The table is found again whatever the case of the stream's name.
	h.apply(2, item("b.ORDERS", `[
		{"Region": "eu", "n": 1, "v": null, "_skippr_op": 3},
		{"Region": "us", "n": 1, "v": "us1b", "_skippr_op": 2},
		{"Region": "us", "n": 2, "v": "us2", "_skippr_op": 1}]`))
	h.wantRows(`SELECT region, n, v FROM orders ORDER BY ALL`, "eu|2|eu2", "us|1|us1b", "us|2|us2")
	_, err := h.d.Apply(ctx(t), serve.ApplyRequest{Settings: h.settings, Pipeline: "p", Sequence: 3, Items: []serve.Item{
		item("a.Orders", `[]`), item("b.orders", `[]`),
	}})
	if err == nil || !strings.Contains(err.Error(), "both map to table") {
		t.Fatalf("two streams of one apply into one table: %v", err)
	}
}

// TestTruncateBetweenRows: a truncate empties the table inside the apply's transaction — rows before it in
// the apply go too, rows after it stay — and a failed apply takes the truncate back.
func TestTruncateBetweenRows(t *testing.T) {
	h := newHarness(t, "")
	trunc := serve.Item{Stream: "public.users", Truncate: true}
	h.apply(1, batch(t, userSchema, chg{change.OpInsert, 1, "a"}, chg{change.OpInsert, 2, "b"}))
	h.apply(2,
		batch(t, userSchema, chg{change.OpInsert, 3, "c"}, chg{change.OpUpdate, 1, "a2"}),
		trunc,
		batch(t, userSchema, chg{change.OpInsert, 1, "a3"}, chg{change.OpInsert, 4, "d"}, chg{change.OpDelete, 4, nil}),
	)
	h.wantRows(`SELECT id, name FROM users ORDER BY id`, "1|a3")

	one := func(dt arrow.DataType, v string) serve.Item {
		sc := change.Schema([]arrow.Field{{Name: "v", Type: dt}}, nil)
		rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, sc, strings.NewReader(`[{"v": `+v+`, "_skippr_op": 1}]`))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rec.Release)
		return serve.Item{Stream: "zzz.items", Record: rec}
	}
	h.apply(3, one(arrow.PrimitiveTypes.Int64, "7"))
	// users is written (truncated) before zzz.items fails to cast: the rollback must bring its rows back.
	_, err := h.d.Apply(ctx(t), serve.ApplyRequest{Settings: h.settings, Pipeline: "p", Sequence: 4, Items: []serve.Item{
		trunc, batch(t, userSchema, chg{change.OpInsert, 5, "e"}),
		{Stream: "zzz.items", Truncate: true}, one(arrow.BinaryTypes.String, `"not a number"`),
	}})
	if err == nil || !strings.Contains(err.Error(), "stream zzz.items") {
		t.Fatalf("apply with a value that does not fit after a truncate: %v", err)
	}
	h.wantRows(`SELECT id, name FROM users ORDER BY id`, "1|a3")
	h.wantRows(`SELECT v FROM items`, "7")
	// A truncate of a table that does not exist yet is nothing to do.
	h.apply(4, serve.Item{Stream: "public.nothere", Truncate: true})
	h.wantRows(`SELECT sequence FROM _skippr_state`, "4")
}

// TestApplyRange: a coalesced range is one transaction recording its last entry; a replay of part of it is
// skipped; a range overlapping the fence applies only the entries above it.
func TestApplyRange(t *testing.T) {
	h := newHarness(t, "")
	at := func(seq uint64, it serve.Item) serve.Item { it.Sequence = seq; return it }
	apply := func(first, last uint64, items ...serve.Item) serve.ApplyResult {
		t.Helper()
		res, err := h.d.Apply(ctx(t), serve.ApplyRequest{Settings: h.settings, Pipeline: "p", FirstSequence: first, Sequence: last, Items: items})
		if err != nil {
			t.Fatalf("apply %d..%d: %v", first, last, err)
		}
		return res
	}
	res := apply(1, 3,
		at(1, batch(t, userSchema, chg{change.OpInsert, 1, "a"}, chg{change.OpInsert, 2, "b"})),
		at(2, batch(t, userSchema, chg{change.OpUpdate, 1, "a2"})),
		at(3, batch(t, userSchema, chg{change.OpDelete, 2, nil})))
	if res.Skipped || res.Rows != 4 {
		t.Fatalf("apply 1..3: %+v", res)
	}
	h.wantRows(`SELECT id, name FROM users ORDER BY id`, "1|a2")
	h.wantRows(`SELECT pipeline, sequence, streams FROM _skippr_state`, `p|3|{"public.users":3}`)
	if res := apply(2, 3, at(2, batch(t, userSchema, chg{change.OpInsert, 9, "x"}))); !res.Skipped {
		t.Fatal("replay of 2..3: not skipped")
	}
	res = apply(3, 5,
		at(3, batch(t, userSchema, chg{change.OpInsert, 9, "WRONG"})),
		at(4, batch(t, userSchema, chg{change.OpInsert, 4, "d"})),
		at(5, batch(t, userSchema, chg{change.OpUpdate, 4, "d5"})))
	if res.Skipped || res.Rows != 2 {
		t.Fatalf("apply 3..5 over fence 3: %+v, want the 2 rows of 4 and 5", res)
	}
	h.wantRows(`SELECT id, name FROM users ORDER BY id`, "1|a2", "4|d5")
	h.wantRows(`SELECT sequence FROM _skippr_state WHERE pipeline = 'p'`, "5")
}

// ±infinity arrives as the values plugin-sdk/values names for it, which are DuckDB's own infinities: the
// table holds infinity, not the finite instant next to it, and the microsecond before infinity stays a value.
func TestInfinityLandsAsDuckDBInfinity(t *testing.T) {
	h := newHarness(t, "")
	sc := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond}, Nullable: true},
		{Name: "tz", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "d", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
	}, []string{"id"})
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	for i, r := range []struct {
		ts arrow.Timestamp
		d  arrow.Date32
	}{{values.TimestampInfinity, values.DateInfinity}, {values.TimestampNegInfinity, values.DateNegInfinity}, {values.TimestampInfinity - 1, 0}} {
		b.Field(0).(*array.Int64Builder).Append(int64(i + 1))
		b.Field(1).(*array.TimestampBuilder).Append(r.ts)
		b.Field(2).(*array.TimestampBuilder).Append(r.ts)
		b.Field(3).(*array.Date32Builder).Append(r.d)
		b.Row(change.OpInsert, "")
	}
	rec := b.NewBatch()
	b.Release()
	defer rec.Release()
	h.apply(1, serve.Item{Stream: "public.edges", Record: rec})
	h.wantRows(`SELECT id, ts::VARCHAR, CASE WHEN isfinite(tz) THEN epoch_us(tz)::VARCHAR ELSE tz::VARCHAR END, d::VARCHAR FROM edges ORDER BY id`,
		"1|infinity|infinity|infinity", "2|-infinity|-infinity|-infinity", "3|294247-01-10 04:00:54.775806|9223372036854775806|1970-01-01")
}

package dest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"database/sql"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/util"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/snowflake/sfsql"
	"github.com/skippr-dev/skippr/testkit/pgtest"
	"github.com/skippr-dev/skippr/testkit/snowflaketest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// target is where a test applies: a real account when SKIPPR_SNOWFLAKE_ACCOUNT (and _USER, _PASSWORD or
// _PRIVATE_KEY, _WAREHOUSE, _DATABASE, _SCHEMA, _ROLE) are set, else the stand-in on a fresh PostgreSQL
// database. The same test functions run against both.
type target struct {
	t *testing.T
	// d serves dest as the engine does: one session for the target's settings.
	d        *serve.Sessions
	dest     *Destination
	settings json.RawMessage
	s        Settings
	standin  *snowflaketest.Server // nil when live
	pg       *pgtest.DB            // the PostgreSQL database behind the stand-in; nil when live
	prefix   string                // table name prefix, unique per test and run on a live account
	pipeline string                // the pipeline id, unique per test and run on a live account
	streams  []string              // the streams named (tg.stream), whose tables a live run drops at its end
}

// stream is the name of a test's stream: on a live account its table name (the last dotted part, TableName)
// carries the run's prefix, so runs and tests do not share tables.
func (tg *target) stream(name string) string {
	i := strings.LastIndexByte(name, '.') + 1
	s := name[:i] + tg.prefix + name[i:]
	tg.streams = append(tg.streams, s)
	return s
}

func live() bool { return os.Getenv("SKIPPR_SNOWFLAKE_ACCOUNT") != "" }

// TestLiveAccount: with SKIPPR_SNOWFLAKE_* set, every test of this package runs against that account; this one
// checks first that the role holds every privilege an apply needs (skippr connect's check). Without them it
// skips, saying how to run the live suite.
func TestLiveAccount(t *testing.T) {
	if !live() {
		t.Skip("no Snowflake account: set SKIPPR_SNOWFLAKE_ACCOUNT, _USER, _PASSWORD or _PRIVATE_KEY, _WAREHOUSE, _DATABASE, _SCHEMA, _ROLE and run `make live-snowflake` (plugins/snowflake/README.md, Tests); the other tests run on the stand-in")
	}
	tg := newTarget(t, nil)
	if err := tg.d.Check(tctx(t), tg.settings); err != nil {
		t.Fatalf("the live account's role cannot do what an apply does: %v (fix: %s)", err, fault.FixOf(err))
	}
}

func newTarget(t *testing.T, edit func(*Settings)) *target {
	t.Helper()
	dest := &Destination{TempDir: t.TempDir()}
	tg := &target{t: t, d: serve.NewSessions(dest), dest: dest}
	if live() {
		tg.s = Settings{
			Account: os.Getenv("SKIPPR_SNOWFLAKE_ACCOUNT"), User: os.Getenv("SKIPPR_SNOWFLAKE_USER"),
			Password: os.Getenv("SKIPPR_SNOWFLAKE_PASSWORD"), PrivateKey: os.Getenv("SKIPPR_SNOWFLAKE_PRIVATE_KEY"),
			Warehouse: os.Getenv("SKIPPR_SNOWFLAKE_WAREHOUSE"), Database: os.Getenv("SKIPPR_SNOWFLAKE_DATABASE"),
			Schema: os.Getenv("SKIPPR_SNOWFLAKE_SCHEMA"), Role: os.Getenv("SKIPPR_SNOWFLAKE_ROLE"),
		}
		if tg.s.Schema == "" {
			tg.s.Schema = DefaultSchema
		}
		run := fmt.Sprintf("%x%04x", time.Now().UnixNano(), mrand.IntN(1<<16))
		tg.prefix = "skippr_test_" + run + "_"
		tg.pipeline = "skippr-test-" + run
		t.Cleanup(tg.dropLive)
	} else {
		tg.pipeline = "p"
		db := pgtest.NewDB(t)
		tg.pg = db
		tg.s = Settings{Account: "standin", User: "loader", Password: "secret", Warehouse: "LOAD_WH",
			Database: "ANALYTICS", Schema: "RAW", Role: "LOADER"}
		tg.standin = snowflaketest.New(t, snowflaketest.Options{Account: "standin", User: "loader", Password: "secret",
			Database: "ANALYTICS", Schema: "RAW", Warehouse: "LOAD_WH", Role: "LOADER", ConnString: db.ConnString(),
			StageDir: t.TempDir()})
		tg.s.Host, tg.s.Port, tg.s.Protocol = tg.standin.Host, tg.standin.Port, "http"
		t.Cleanup(func() {
			if r := tg.standin.Rejected(); len(r) > 0 {
				t.Errorf("the stand-in refused statements outside the allow-list: %q", r)
			}
		})
	}
	if edit != nil {
		edit(&tg.s)
	}
	raw, err := json.Marshal(tg.s)
	if err != nil {
		t.Fatal(err)
	}
	tg.settings = raw
	t.Cleanup(func() { tg.d.Close() })
	return tg
}

// dropLive removes what a test made on a live account: its tables (their stages go with them) and its
// pipeline's state rows. The statements are not the plugin's, so they are never sent to the stand-in.
func (tg *target) dropLive() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := tg.db()
	for _, st := range tg.streams {
		t := (&conn{s: tg.s}).table(TableName(st))
		for _, t := range []sfsql.Table{t, historyTable(t)} { // the history table, when the test made one
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t.String()); err != nil {
				tg.t.Errorf("cleanup: drop the table %s of %s: %v", t, st, err)
			}
		}
	}
	state := Table(tg.s, sfsql.StateTable).String()
	if _, err := db.ExecContext(ctx, `DELETE FROM `+state+` WHERE "PIPELINE" = ?`, tg.pipeline); err != nil {
		tg.t.Errorf("cleanup: delete the state rows of %s: %v", tg.pipeline, err)
	}
}

// db is the connection pool of the target's session.
func (tg *target) db() *sql.DB {
	tg.t.Helper()
	x, err := tg.d.Session(tctx(tg.t), tg.settings)
	if err != nil {
		tg.t.Fatal(err)
	}
	return x.(*session).db
}

func tctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func (tg *target) apply(first, last uint64, items ...serve.Item) serve.ApplyResult {
	tg.t.Helper()
	res, err := tg.d.Apply(tctx(tg.t), serve.ApplyRequest{Settings: tg.settings, Pipeline: tg.pipeline, FirstSequence: first, Sequence: last, Items: items})
	if err != nil {
		tg.t.Fatalf("apply [%d, %d]: %v", first, last, err)
	}
	return res
}

// rows reads a table keyed by its ID column (or by row number for tables without one), values as JSON.
func (tg *target) rows(table string) map[string]map[string]any {
	tg.t.Helper()
	var list []map[string]any
	if tg.standin != nil {
		var err error
		if list, err = tg.standin.Rows(tctx(tg.t), table); err != nil {
			tg.t.Fatal(err)
		}
	} else {
		db := tg.db()
		r, err := db.QueryContext(tctx(tg.t), "SELECT TO_JSON(OBJECT_CONSTRUCT_KEEP_NULL(*)) FROM "+
			Table(tg.s, table).String())
		if err != nil {
			tg.t.Fatal(err)
		}
		for r.Next() {
			var j string
			var m map[string]any
			if err := r.Scan(&j); err != nil {
				tg.t.Fatal(err)
			}
			d := json.NewDecoder(strings.NewReader(j))
			d.UseNumber() // NUMBER(38,37) holds more digits than a float64
			if err := d.Decode(&m); err != nil {
				tg.t.Fatal(err, j)
			}
			list = append(list, m)
		}
		r.Close()
	}
	out := map[string]map[string]any{}
	for i, m := range list {
		k := fmt.Sprint(m["ID"])
		if _, ok := m["ID"]; !ok {
			k = fmt.Sprint(i)
		}
		if _, dup := out[k]; dup {
			tg.t.Fatalf("table %s holds key %s twice", table, k)
		}
		out[k] = m
	}
	return out
}

// Table is the qualified table of a stream name in s.
func Table(s Settings, name string) interface{ String() string } {
	x := &conn{s: s}
	return x.table(TableName(name))
}

var mem = memory.DefaultAllocator

func ordersSchema() *arrow.Schema {
	return change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "amount", Type: &arrow.Decimal128Type{Precision: 12, Scale: 2}, Nullable: true},
		{Name: "at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "attrs", Type: arrow.StructOf(arrow.Field{Name: "color", Type: arrow.BinaryTypes.String, Nullable: true},
			arrow.Field{Name: "size", Type: arrow.PrimitiveTypes.Int32, Nullable: true}), Nullable: true},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}, []string{"id"})
}

type order struct {
	op     change.Op
	id     int64
	name   string
	cents  int64
	color  string
	tags   []string
	atUnix int64
}

func orders(s *arrow.Schema, rows ...order) arrow.RecordBatch { return ordersIn(mem, s, rows...) }

// ordersIn is orders with its buffers from alloc.
func ordersIn(alloc memory.Allocator, s *arrow.Schema, rows ...order) arrow.RecordBatch {
	b := change.NewBuilder(alloc, s)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r.id)
		if r.op == change.OpDelete {
			for i := 1; i < len(s.Fields())-2; i++ {
				b.Field(i).AppendNull()
			}
			b.Row(r.op, "")
			continue
		}
		b.Field(1).(*array.StringBuilder).Append(r.name)
		b.Field(2).(*array.Decimal128Builder).Append(decimal128.FromI64(r.cents))
		b.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(r.atUnix * 1_000_000))
		sb := b.Field(4).(*array.StructBuilder)
		sb.Append(true)
		sb.FieldBuilder(0).(*array.StringBuilder).Append(r.color)
		sb.FieldBuilder(1).(*array.Int32Builder).Append(int32(r.id))
		lb := b.Field(5).(*array.ListBuilder)
		lb.Append(true)
		for _, tg := range r.tags {
			lb.ValueBuilder().(*array.StringBuilder).Append(tg)
		}
		for i := 6; i < len(s.Fields())-2; i++ {
			b.Field(i).AppendNull()
		}
		b.Row(r.op, "")
	}
	return b.NewBatch()
}

func item(stream string, seq uint64, rec arrow.RecordBatch) serve.Item {
	return serve.Item{Stream: stream, Record: rec, Sequence: seq}
}

// TestApplyMergesByKeyAndSkipsReplays: inserts, then updates and deletes in one apply (folded per key: an
// insert then delete of the same key leaves nothing), values of every kind read back, a replay skipped, the
// state rows read by LastApplied.
func TestApplyMergesByKeyAndSkipsReplays(t *testing.T) {
	tg := newTarget(t, nil)
	s := ordersSchema()
	st := tg.stream("public.orders")
	tbl := TableName(st)
	r1 := orders(s, order{op: change.OpInsert, id: 1, name: "a", cents: 1050, color: "red", tags: []string{"x"}, atUnix: 1700000000},
		order{op: change.OpInsert, id: 2, name: "b", cents: 20000, color: "blue", tags: []string{}, atUnix: 1700000001},
		order{op: change.OpInsert, id: 3, name: "c", cents: -1, color: "green", tags: []string{"y", "z"}, atUnix: 1700000002})
	defer r1.Release()
	if res := tg.apply(1, 1, item(st, 1, r1)); res.Skipped || res.Rows != 3 {
		t.Fatalf("apply 1: %+v", res)
	}
	r2 := orders(s, order{op: change.OpUpdate, id: 1, name: "a2", cents: 1, color: "red", atUnix: 1700000003},
		order{op: change.OpDelete, id: 2},
		order{op: change.OpInsert, id: 4, name: "d", cents: 7, color: "black", atUnix: 1700000004},
		order{op: change.OpDelete, id: 4},
		order{op: change.OpInsert, id: 5, name: `q"uo'te\`, cents: 99, color: "", atUnix: 1700000005})
	defer r2.Release()
	tg.apply(2, 2, item(st, 2, r2))

	got := tg.rows(tbl)
	want := map[string]map[string]any{
		"1": {"ID": 1.0, "NAME": "a2", "AMOUNT": 0.01, "ATTRS": map[string]any{"color": "red", "size": 1.0}, "TAGS": []any{}},
		"3": {"ID": 3.0, "NAME": "c", "AMOUNT": -0.01, "ATTRS": map[string]any{"color": "green", "size": 3.0}, "TAGS": []any{"y", "z"}},
		"5": {"ID": 5.0, "NAME": `q"uo'te\`, "AMOUNT": 0.99, "ATTRS": map[string]any{"color": "", "size": 5.0}, "TAGS": []any{}},
	}
	if len(got) != len(want) {
		t.Fatalf("rows %v, want keys 1, 3, 5", got)
	}
	for k, w := range want {
		for c, v := range w {
			if fmt.Sprint(got[k][c]) != fmt.Sprint(v) {
				t.Errorf("id %s column %s: %v, want %v", k, c, got[k][c], v)
			}
		}
		if at, _ := got[k]["AT"].(string); !strings.HasPrefix(at, "2023-11-14") {
			t.Errorf("id %s AT %v, want 2023-11-14…", k, got[k]["AT"])
		}
	}
	// A replay of sequence 2 is skipped and changes nothing.
	if res := tg.apply(2, 2, item(st, 2, r1)); !res.Skipped {
		t.Fatalf("replay of 2 applied: %+v", res)
	}
	if n := len(tg.rows(tbl)); n != 3 {
		t.Fatalf("after the replay %d rows", n)
	}
	a, err := tg.d.LastApplied(tctx(t), tg.settings, tg.pipeline)
	if err != nil || a.Sequence != 2 || a.Streams[st] != 2 {
		t.Fatalf("LastApplied %+v, %v", a, err)
	}
}

// TestCoalescedRangeAppliesOnlyPastTheFence: a range [2, 4] over a destination holding 3 writes only the
// items of entry 4; a range it holds entirely is skipped.
func TestCoalescedRangeAppliesOnlyPastTheFence(t *testing.T) {
	tg := newTarget(t, nil)
	s := ordersSchema()
	st := tg.stream("orders")
	mk := func(id int64, name string) arrow.RecordBatch {
		return orders(s, order{op: change.OpInsert, id: id, name: name, color: "c", atUnix: 1})
	}
	b1, b2, b3, b4 := mk(1, "one"), mk(2, "two"), mk(3, "three"), mk(1, "one again")
	defer func() { b1.Release(); b2.Release(); b3.Release(); b4.Release() }()
	tg.apply(1, 3, item(st, 1, b1), item(st, 2, b2), item(st, 3, b3))
	// Entry 2 carries a row that would be visible if the held part were applied again: id 2 renamed.
	b2x := mk(2, "two, replayed")
	defer b2x.Release()
	if res := tg.apply(2, 4, item(st, 2, b2x), item(st, 4, b4)); res.Skipped || res.Rows != 1 {
		t.Fatalf("range [2,4] over fence 3: %+v, want 1 row applied", res)
	}
	got := tg.rows(TableName(st))
	if got["2"]["NAME"] != "two" || got["1"]["NAME"] != "one again" || len(got) != 3 {
		t.Fatalf("rows %v", got)
	}
	if res := tg.apply(3, 4, item(st, 4, b2x)); !res.Skipped {
		t.Fatalf("range [3,4] over fence 4 applied: %+v", res)
	}
}

// TestSchemaEvolution: a grown schema adds its column; a column whose type Snowflake cannot change stops the
// apply with a data error naming the column and both types, and nothing of the apply is written.
func TestSchemaEvolution(t *testing.T) {
	tg := newTarget(t, nil)
	st := tg.stream("items")
	s1 := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int32}, {Name: "qty", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, []string{"id"})
	b := change.NewBuilder(mem, s1)
	b.Field(0).(*array.Int32Builder).Append(1)
	b.Field(1).(*array.Int64Builder).Append(5)
	b.Row(change.OpInsert, "")
	r1 := b.NewBatch()
	b.Release()
	defer r1.Release()
	tg.apply(1, 1, serve.Item{Stream: st, Schema: &serve.Stream{Name: st, Schema: s1}, Sequence: 1}, item(st, 1, r1))

	s2 := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "qty", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true}}, []string{"id"})
	b = change.NewBuilder(mem, s2)
	b.Field(0).(*array.Int64Builder).Append(2)
	b.Field(1).(*array.Int64Builder).Append(6)
	b.Field(2).(*array.StringBuilder).Append("new column")
	b.Row(change.OpInsert, "")
	r2 := b.NewBatch()
	b.Release()
	defer r2.Release()
	tg.apply(2, 2, serve.Item{Stream: st, Schema: &serve.Stream{Name: st, Schema: s2}, Sequence: 2}, item(st, 2, r2))
	got := tg.rows(TableName(st))
	if got["2"]["NOTE"] != "new column" || got["1"]["NOTE"] != nil || fmt.Sprint(got["1"]["QTY"]) != "5" {
		t.Fatalf("rows %v", got)
	}

	s3 := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "qty", Type: arrow.PrimitiveTypes.Float64, Nullable: true}}, []string{"id"})
	b = change.NewBuilder(mem, s3)
	b.Field(0).(*array.Int64Builder).Append(3)
	b.Field(1).(*array.Float64Builder).Append(1.5)
	b.Row(change.OpInsert, "")
	r3 := b.NewBatch()
	b.Release()
	defer r3.Release()
	_, err := tg.d.Apply(tctx(t), serve.ApplyRequest{Settings: tg.settings, Pipeline: tg.pipeline, FirstSequence: 3, Sequence: 3, Items: []serve.Item{item(st, 3, r3)}})
	if !errors.Is(err, fault.ErrData) || !strings.Contains(err.Error(), "QTY") || !strings.Contains(err.Error(), "NUMBER(38,0)") || !strings.Contains(err.Error(), "FLOAT") {
		t.Fatalf("int → float: %v, want a data error naming QTY, NUMBER(38,0) and FLOAT", err)
	}
	if _, ok := tg.rows(TableName(st))["3"]; ok {
		t.Fatal("the refused apply wrote its row")
	}
}

// TestKeylessStreamAppendsAndTruncates: a stream without a key appends every row; a truncate empties the
// table in the same transaction as the rows after it.
func TestKeylessStreamAppendsAndTruncates(t *testing.T) {
	tg := newTarget(t, nil)
	st := tg.stream("events")
	s := change.Schema([]arrow.Field{{Name: "msg", Type: arrow.BinaryTypes.String}}, nil)
	mk := func(msgs ...string) arrow.RecordBatch {
		b := change.NewBuilder(mem, s)
		defer b.Release()
		for _, m := range msgs {
			b.Field(0).(*array.StringBuilder).Append(m)
			b.Row(change.OpInsert, "")
		}
		return b.NewBatch()
	}
	r1, r2, r3 := mk("a", "a", "b"), mk("c"), mk("after")
	defer func() { r1.Release(); r2.Release(); r3.Release() }()
	tg.apply(1, 1, item(st, 1, r1))
	tg.apply(2, 2, item(st, 2, r2))
	if n := len(tg.rows(TableName(st))); n != 4 {
		t.Fatalf("%d rows after two appends, want 4", n)
	}
	tg.apply(3, 3, item(st, 3, r3), serve.Item{Stream: st, Truncate: true, Sequence: 3}, item(st, 3, r3))
	got := tg.rows(TableName(st))
	if len(got) != 1 || got["0"]["MSG"] != "after" {
		t.Fatalf("after truncate: %v, want the one row after it", got)
	}
}

// TestOutOfRangeTimesAreDataErrors: ±infinity as sources carry it (plugin-sdk/values) and years past 9999
// stop the apply with a data error naming the column and the value — the engine marks the pipeline failed
// instead of retrying a COPY the warehouse refuses — and nothing of the apply is written; the range's ends
// apply.
func TestOutOfRangeTimesAreDataErrors(t *testing.T) {
	tg := newTarget(t, nil)
	st := tg.stream("public.times")
	s := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "d", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond}, Nullable: true},
	}, []string{"id"})
	mk := func(id int64, d arrow.Date32, ts arrow.Timestamp) arrow.RecordBatch {
		b := change.NewBuilder(mem, s)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.Date32Builder).Append(d)
		b.Field(2).(*array.TimestampBuilder).Append(ts)
		b.Row(change.OpInsert, "")
		return b.NewBatch()
	}
	ends := mk(1, -719162, 253402300799999999) // 0001-01-01, 9999-12-31 23:59:59.999999
	defer ends.Release()
	tg.apply(1, 1, item(st, 1, ends))
	for i, c := range []struct {
		d    arrow.Date32
		ts   arrow.Timestamp
		want string
	}{
		{values.DateInfinity, 0, "column d: row 0: date infinity"},
		{values.DateNegInfinity, 0, "column d: row 0: date -infinity"},
		{0, values.TimestampInfinity, "column ts: row 0: timestamp infinity"},
		{0, values.TimestampNegInfinity, "column ts: row 0: timestamp -infinity"},
		{2932897, 0, "column d: row 0: date 2932897 days"},
		{0, -62135596800000001, "column ts: row 0: timestamp -62135596800000001 us"},
	} {
		rec := mk(int64(10+i), c.d, c.ts)
		_, err := tg.d.Apply(tctx(t), serve.ApplyRequest{Settings: tg.settings, Pipeline: tg.pipeline, FirstSequence: uint64(2 + i), Sequence: uint64(2 + i), Items: []serve.Item{item(st, uint64(2+i), rec)}})
		rec.Release()
		if err == nil || !strings.Contains(err.Error(), c.want) || fault.ClassOf(err) != fault.Data {
			t.Fatalf("case %d: want a data error containing %q, got %v (class %s)", i, c.want, err, fault.ClassOf(err))
		}
	}
	if got := tg.rows(TableName(st)); len(got) != 1 {
		t.Fatalf("%d rows, want only the one with the range's ends: %v", len(got), got)
	}
}

// TestStatementsPerApply: one apply of one stream costs a fixed number of requests; the figures in
// BENCHMARKS.md and the README's cost of each rowmeta setting come from here. Soft deletes and metadata
// columns ride in the same statements (more staged columns); history adds a PUT, a staging table, a COPY and
// an INSERT.
func TestStatementsPerApply(t *testing.T) {
	all := []string{"synced_at", "source_committed_at", "op", "position"}
	for _, c := range []struct {
		name string
		edit func(*Settings)
		want int64
	}{
		// read state, PUT, staging table, BEGIN, COPY, MERGE, state MERGE, COMMIT
		{"plain", nil, 8},
		{"soft_delete and metadata_columns", func(s *Settings) { s.SoftDelete, s.MetadataColumns = true, all }, 8},
		// + PUT, staging table, COPY, INSERT of the history
		{"history", func(s *Settings) { s.History = true }, 12},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg := newTarget(t, c.edit)
			s := ordersSchema()
			st := tg.stream("orders")
			r := orders(s, order{op: change.OpInsert, id: 1, name: "a", color: "c", atUnix: 1})
			defer r.Release()
			tg.apply(1, 1, item(st, 1, r)) // creates the table
			before := tg.dest.Stats()
			tg.apply(2, 2, item(st, 2, r))
			after := tg.dest.Stats()
			if n := after.Statements - before.Statements; n != c.want {
				t.Fatalf("a steady-state apply of one stream sent %d statements, want %d", n, c.want)
			}
			t.Logf("steady-state apply, one stream: %d statements, %d bytes put for %d row(s)", after.Statements-before.Statements,
				after.BytesPut-before.BytesPut, after.RowsPut-before.RowsPut)
		})
	}
}

func keyPair(t *testing.T) (*rsa.PrivateKey, string) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

// TestAuthentication: password, key-pair JWT and OAuth token each log in; a wrong secret of each is a config
// error that says what to check. Stand-in only: a live account has one set of credentials.
func TestAuthentication(t *testing.T) {
	if live() {
		t.Skip("needs the stand-in's configurable credentials; the live suite logs in with SKIPPR_SNOWFLAKE_* in every other test")
	}
	key, pemKey := keyPair(t)
	_, otherPEM := keyPair(t)
	db := pgtest.NewDB(t)
	srv := snowflaketest.New(t, snowflaketest.Options{Account: "acct", User: "svc", Password: "pw", PublicKey: &key.PublicKey,
		OAuthToken: "oauth-token", Database: "DB", Schema: "PUBLIC", Warehouse: "WH", Role: "R", ConnString: db.ConnString()})
	for _, c := range []struct {
		name string
		edit func(*Settings)
		ok   bool
	}{
		{"password", func(s *Settings) { s.Password = "pw" }, true},
		{"wrong password", func(s *Settings) { s.Password = "nope" }, false},
		{"key pair", func(s *Settings) { s.PrivateKey = pemKey }, true},
		{"another key", func(s *Settings) { s.PrivateKey = otherPEM }, false},
		{"oauth", func(s *Settings) { s.Token = "oauth-token" }, true},
		{"wrong oauth", func(s *Settings) { s.Token = "other" }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Settings{Account: "acct", User: "svc", Warehouse: "WH", Database: "DB", Role: "R",
				Host: srv.Host, Port: srv.Port, Protocol: "http"}
			c.edit(&s)
			raw, _ := json.Marshal(s)
			d := &Destination{TempDir: t.TempDir()}
			err := d.Check(tctx(t), raw)
			if c.ok && err != nil {
				t.Fatalf("check: %v", err)
			}
			if !c.ok && (!errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), "login refused")) {
				t.Fatalf("check with a wrong secret: %v, want a config error saying the login was refused", err)
			}
		})
	}
}

// TestCheckNamesEachMissingGrant: with privileges revoked, check lists each missing one with the GRANT that
// fixes it.
func TestCheckNamesEachMissingGrant(t *testing.T) {
	if live() {
		t.Skip("revokes privileges on the stand-in; a live account's grants are not the test's to change")
	}
	tg := newTarget(t, nil)
	if err := tg.d.Check(tctx(t), tg.settings); err != nil {
		t.Fatalf("check with every privilege: %v", err)
	}
	for _, c := range []struct {
		revoked []string
		grants  []string
	}{
		{[]string{"USAGE ON WAREHOUSE"}, []string{`GRANT USAGE ON WAREHOUSE "LOAD_WH" TO ROLE "LOADER"`}},
		{[]string{"USAGE ON WAREHOUSE", "CREATE TABLE ON SCHEMA"}, []string{`GRANT USAGE ON WAREHOUSE "LOAD_WH" TO ROLE "LOADER"`,
			`GRANT CREATE TABLE ON SCHEMA "ANALYTICS"."RAW" TO ROLE "LOADER"`}},
		{[]string{"USAGE ON SCHEMA"}, []string{`GRANT USAGE ON SCHEMA "ANALYTICS"."RAW" TO ROLE "LOADER"`}},
		{[]string{"USAGE ON DATABASE"}, []string{`GRANT USAGE ON DATABASE "ANALYTICS" TO ROLE "LOADER"`}},
	} {
		tg.standin.SetRevoked(c.revoked)
		err := tg.d.Check(tctx(t), tg.settings)
		if !errors.Is(err, fault.ErrConfig) {
			t.Fatalf("revoked %v: %v, want a config error", c.revoked, err)
		}
		fix := fault.FixOf(err)
		for _, g := range c.grants {
			if !strings.Contains(fix, g) {
				t.Errorf("revoked %v: fix %q lacks %s", c.revoked, fix, g)
			}
		}
		if n := strings.Count(fix, "GRANT "); n != len(c.grants) {
			t.Errorf("revoked %v: fix names %d grants, want %d: %s", c.revoked, n, len(c.grants), fix)
		}
	}
}

// TestSettingsRefused: missing settings and ambiguous authentication are config errors naming the fix.
func TestSettingsRefused(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{`{"user":"u","warehouse":"w","database":"d","password":"p"}`, "account"},
		{`{"account":"a","user":"u","warehouse":"w","database":"d"}`, "exactly one"},
		{`{"account":"a","user":"u","warehouse":"w","database":"d","password":"p","token":"t"}`, "exactly one"},
		{`{"account":"a","user":"u","warehouse":"w","database":"d","private_key":"not pem"}`, "not PEM"},
	} {
		s, err := ParseSettings(json.RawMessage(c.raw))
		if err == nil && strings.Contains(c.want, "PEM") {
			_, err = s.Config()
		}
		if !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a config error about %s", c.raw, err, c.want)
		}
	}
}

// TestStandInRefusesOtherStatements: the stand-in answers a statement outside its allow-list with a syntax
// error instead of running it on PostgreSQL.
func TestStandInRefusesOtherStatements(t *testing.T) {
	if live() {
		t.Skip("about the stand-in")
	}
	tg := newTarget(t, nil)
	cfg, err := tg.s.Config()
	if err != nil {
		t.Fatal(err)
	}
	_ = cfg
	db := tg.db()
	for _, q := range []string{"SELECT * FROM pg_catalog.pg_tables", `DROP TABLE "ANALYTICS"."RAW"."_SKIPPR_STATE"`,
		`create table if not exists "ANALYTICS"."RAW"."X" ("A" VARCHAR)`} {
		_, err := db.ExecContext(tctx(t), q)
		if err == nil || !strings.Contains(err.Error(), "outside the documented Snowflake syntax") {
			t.Errorf("%s: %v, want a refusal", q, err)
		}
	}
	// Cleanup would flag the refusals as the plugin's: they were this test's own.
	got := tg.standin.Rejected()
	sort.Strings(got)
	if len(got) != 3 {
		t.Fatalf("rejected %q", got)
	}
	tg.standin.ResetRejected()
}

// TestOrphanedTransactionIsAborted: a process that died inside its apply transaction leaves it open, holding
// the locks of its MERGE (Snowflake keeps it until the session expires, hours later). The next process aborts
// it by its name and applies, instead of waiting on the locks.
func TestOrphanedTransactionIsAborted(t *testing.T) {
	tg := newTarget(t, nil)
	s := ordersSchema()
	st := tg.stream("orders")
	r := orders(s, order{op: change.OpInsert, id: 1, name: "a", color: "c", atUnix: 1})
	defer r.Release()
	tg.apply(1, 1, item(st, 1, r))

	// The dead process: its named transaction updated the state row and never ended.
	cfg, err := tg.s.Config()
	if err != nil {
		t.Fatal(err)
	}
	dead := sql.OpenDB(sfConnector(*cfg))
	defer dead.Close()
	conn, err := dead.Conn(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	db, sc := tg.s.Database, tg.s.Schema
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{sfsqlBegin(TxName(tg.pipeline)), nil},
		{sfsqlUpsertState(db, sc), []any{tg.pipeline, "", "9", "1"}},
	} {
		if _, err := conn.ExecContext(tctx(t), q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}

	next := serve.NewSessions(&Destination{TempDir: t.TempDir()})
	defer next.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	r2 := orders(s, order{op: change.OpInsert, id: 2, name: "b", color: "c", atUnix: 1})
	defer r2.Release()
	res, err := next.Apply(ctx, serve.ApplyRequest{Settings: tg.settings, Pipeline: tg.pipeline, FirstSequence: 2, Sequence: 2, Items: []serve.Item{item(st, 2, r2)}})
	if err != nil || res.Skipped {
		t.Fatalf("apply after an orphaned transaction: %+v, %v", res, err)
	}
	if got := tg.rows(TableName(st)); len(got) != 2 {
		t.Fatalf("rows %v", got)
	}
	if a, err := next.LastApplied(tctx(t), tg.settings, tg.pipeline); err != nil || a.Sequence != 2 {
		t.Fatalf("LastApplied %+v, %v: the orphan's state update must be gone", a, err)
	}
}

// TestLongRangeIsFoldedInChunks applies a range of 30 entries, each changing 50 keys, with a fold budget of
// about three entries' batches: the apply must write the range out chunk by chunk (bytes of batches alive stay
// near the budget, not the range) and still leave exactly what one fold of the whole range would: each key's
// last change, a delete in an early chunk kept, a truncate in a middle chunk removing what earlier chunks
// wrote.
func TestLongRangeIsFoldedInChunks(t *testing.T) {
	tg := newTarget(t, nil)
	s := ordersSchema()
	st := tg.prefix + "events"
	alloc := memory.NewCheckedAllocator(memory.NewGoAllocator())
	const entries, keys = 30, 50
	batch := func(e int) arrow.RecordBatch {
		var rows []order
		n := keys
		if e > 20 {
			n = 20 // after the truncate in entry 21, only keys 1..20 come back
		}
		for id := 1; id <= n; id++ {
			op := change.OpUpdate
			switch {
			case id == 7 && e == 5:
				op = change.OpDelete
			case id == 7 && e > 5:
				continue // deleted in entry 5, in the first chunk, and never seen again
			}
			rows = append(rows, order{op: op, id: int64(id), name: fmt.Sprintf("%s-%d", strings.Repeat("x", 64), e), color: "c", atUnix: 1})
		}
		return ordersIn(alloc, s, rows...)
	}
	probe := batch(1)
	one := alloc.CurrentAlloc()
	tg.dest.FoldBudget = 3 * util.TotalRecordSize(probe) // the budget counts buffer lengths, alloc capacities
	probe.Release()
	var peak int
	items := func(yield func(serve.Item, error) bool) {
		for e := 1; e <= entries; e++ {
			if e == 21 {
				if !yield(serve.Item{Stream: st, Truncate: true, Sequence: uint64(e)}, nil) {
					return
				}
			}
			rec := batch(e)
			peak = max(peak, alloc.CurrentAlloc())
			ok := yield(serve.Item{Stream: st, Record: rec, Sequence: uint64(e)}, nil)
			rec.Release()
			if !ok {
				return
			}
		}
	}
	puts := tg.dest.stats.Puts
	req := serve.ApplyRequest{Settings: tg.settings, Pipeline: "p", FirstSequence: 1, Sequence: entries}
	if _, err := tg.d.ApplyStream(tctx(t), req, items); err != nil {
		t.Fatal(err)
	}
	alloc.AssertSize(t, 0)
	t.Logf("peak %d bytes of batches alive, one entry %d, %d files put", peak, one, tg.dest.stats.Puts-puts)
	if peak > 5*one {
		t.Errorf("batches alive peaked at %.1f entries (budget 3): the range is held whole, not in chunks", float64(peak)/float64(one))
	}
	if n := tg.dest.stats.Puts - puts; n < entries/6 {
		t.Errorf("%d Parquet files for %d entries with a budget of 3: the range was not split", n, entries)
	}
	got := tg.rows(TableName(st))
	if len(got) != 19 {
		t.Fatalf("%d rows, want keys 1..20 without 7: %v", len(got), got)
	}
	for id := 1; id <= 20; id++ {
		r, ok := got[fmt.Sprint(id)]
		if ok == (id == 7) {
			t.Fatalf("key %d present %v", id, ok)
		}
		if ok && !strings.HasSuffix(fmt.Sprint(r["NAME"]), fmt.Sprintf("-%d", entries)) {
			t.Errorf("key %d: %v, not its last change", id, r["NAME"])
		}
	}
	a, err := tg.d.LastApplied(tctx(t), tg.settings, "p")
	if err != nil || a.Sequence != entries || a.Streams[st] != entries {
		t.Fatalf("LastApplied %+v, %v", a, err)
	}
}

// TestLivePrefixReachesTheTable: a live run's prefix lands in the table name, which keeps only the stream's
// last dotted part (TableName), so runs and tests never share a table.
func TestLivePrefixReachesTheTable(t *testing.T) {
	tg := &target{t: t, prefix: "skippr_test_1a2b_"}
	for in, want := range map[string]string{"public.orders": "SKIPPR_TEST_1A2B_ORDERS", "orders": "SKIPPR_TEST_1A2B_ORDERS",
		"db.public.Order Lines": "skippr_test_1a2b_Order Lines"} {
		if got := TableName(tg.stream(in)); got != want {
			t.Errorf("stream %q: table %q, want %q", in, got, want)
		}
	}
}

// renameItems: rows 1..n under qty, then a schema whose amount was qty (change.MarkRenamed), then rows n+1..2n.
func renameItems(st string, n int) (s1, s2 *arrow.Schema, recs []arrow.RecordBatch) {
	s1 = change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "qty", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, []string{"id"})
	s2 = change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		change.MarkRenamed(arrow.Field{Name: "amount", Type: arrow.PrimitiveTypes.Int64, Nullable: true}, "qty")}, []string{"id"})
	for i := 1; i <= 2*n; i++ {
		s := s1
		if i > n {
			s = s2
		}
		b := change.NewBuilder(mem, s)
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.Int64Builder).Append(int64(10 * i))
		b.Row(change.OpInsert, "")
		recs = append(recs, b.NewBatch())
		b.Release()
	}
	return s1, s2, recs
}

// checkRenamed: every row holds its value under AMOUNT, and no QTY column is left.
func checkRenamed(t *testing.T, got map[string]map[string]any, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("%d rows, want %d: %v", len(got), n, got)
	}
	for id := 1; id <= n; id++ {
		r := got[fmt.Sprint(id)]
		if fmt.Sprint(r["AMOUNT"]) != fmt.Sprint(10*id) {
			t.Errorf("id %d: AMOUNT %v, want %d (row %v)", id, r["AMOUNT"], 10*id, r)
		}
		if _, ok := r["QTY"]; ok {
			t.Errorf("id %d: column QTY still there: %v", id, r)
		}
	}
}

// TestRenamedColumn: rows, a schema whose column the source renamed, more rows; the table's column is renamed
// (rows written before keep their values under the new name), and a replay of the range changes nothing.
func TestRenamedColumn(t *testing.T) {
	tg := newTarget(t, nil)
	st := tg.stream("items")
	s1, s2, recs := renameItems(st, 1)
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	tg.apply(1, 1, serve.Item{Stream: st, Schema: &serve.Stream{Name: st, Schema: s1}, Sequence: 1}, item(st, 1, recs[0]))
	second := []serve.Item{{Stream: st, Schema: &serve.Stream{Name: st, Schema: s2}, Sequence: 2}, item(st, 2, recs[1])}
	tg.apply(2, 2, second...)
	checkRenamed(t, tg.rows(TableName(st)), 2)
	if res := tg.apply(2, 2, second...); !res.Skipped {
		t.Fatalf("replay of 2 applied: %+v", res)
	}
	checkRenamed(t, tg.rows(TableName(st)), 2)
}

// TestRenameInALaterChunk: one apply folded in chunks (each DDL commits at once in Snowflake) whose rows of
// the first chunks were staged under the column's former name before a later chunk renamed it: the merges,
// all run after the last chunk, write them into the renamed column.
func TestRenameInALaterChunk(t *testing.T) {
	tg := newTarget(t, nil)
	st := tg.stream("items")
	const n = 4
	s1, s2, recs := renameItems(st, n)
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	tg.dest.FoldBudget = 1 // every batch is a chunk
	items := []serve.Item{{Stream: st, Schema: &serve.Stream{Name: st, Schema: s1}, Sequence: 1}}
	for i, r := range recs {
		seq := uint64(i + 1)
		if i == n {
			items = append(items, serve.Item{Stream: st, Schema: &serve.Stream{Name: st, Schema: s2}, Sequence: seq})
		}
		items = append(items, item(st, seq, r))
	}
	puts := tg.dest.stats.Puts
	tg.apply(1, uint64(2*n), items...)
	if p := tg.dest.stats.Puts - puts; p < 2*n {
		t.Fatalf("%d files put, want one a batch: the range was not split", p)
	}
	checkRenamed(t, tg.rows(TableName(st)), 2*n)
}

// TestChunkWithinFoldBudget applies a range of narrow rows, each a new key, in chunks of a small fold budget
// and reads the live heap where an apply's memory peaks (each Parquet file just written: the chunk's batches,
// its fold index and the picks all alive). The peak above the heap before the apply must stay near the budget:
// counting only the batches' bytes against it let the index and the picks hold about twice as much again
// beside them (the snowflake plugin's 64 MiB budget reached 550 MiB of RSS under a 79 MiB WAL range).
func TestChunkWithinFoldBudget(t *testing.T) {
	if live() {
		t.Skip("measures the heap of this process, which on the stand-in holds only the plugin's apply and the stand-in")
	}
	tg := newTarget(t, nil)
	s := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "v", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, []string{"id"})
	st := tg.stream("public.narrow")
	const budget, rows, per = 2 << 20, 60_000, 2_000
	batch := func(from int) arrow.RecordBatch {
		b := change.NewBuilder(mem, s)
		defer b.Release()
		for id := from; id < from+per; id++ {
			b.Field(0).(*array.Int64Builder).Append(int64(id))
			b.Field(1).(*array.Int64Builder).Append(int64(id) * 3)
			b.Row(change.OpInsert, "")
		}
		return b.NewBatch()
	}
	// A first apply makes the table and the state rows, so the measured one only folds and stages.
	first := batch(-per)
	tg.apply(1, 1, item(st, 1, first))
	first.Release()
	tg.dest.FoldBudget = budget
	live := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := live()
	var peak uint64
	tg.dest.staged = func() { peak = max(peak, live()) }
	items := func(yield func(serve.Item, error) bool) {
		for from := 0; from < rows; from += per {
			rec := batch(from)
			ok := yield(item(st, uint64(2+from/per), rec), nil)
			rec.Release()
			if !ok {
				return
			}
		}
	}
	puts := tg.dest.stats.Puts
	last := uint64(1 + rows/per)
	res, err := tg.d.ApplyStream(tctx(t), serve.ApplyRequest{Settings: tg.settings, Pipeline: tg.pipeline, FirstSequence: 2, Sequence: last}, items)
	if err != nil || res.Rows != rows {
		t.Fatalf("apply: %+v, %v", res, err)
	}
	grew := int64(peak) - int64(base)
	t.Logf("live heap at the chunks' peak: %.1f MiB above the %.1f MiB before the apply, budget %.1f MiB, %d files",
		float64(grew)/(1<<20), float64(base)/(1<<20), float64(budget)/(1<<20), tg.dest.stats.Puts-puts)
	if grew > budget*3/2 {
		t.Errorf("the apply's live heap peaked %.1f MiB above its start with a fold budget of %.1f MiB: the budget does not bound the chunk",
			float64(grew)/(1<<20), float64(budget)/(1<<20))
	}
	if n := tg.dest.stats.Puts - puts; n < 3 {
		t.Errorf("%d Parquet files: the range was not split into chunks, so the test measured nothing", n)
	}
	if got := len(tg.rows(TableName(st))); got != rows+per {
		t.Fatalf("%d rows, want %d", got, rows+per)
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// kvRow is one change of the test stream: id, v, and w when the schema has it.
type kvRow struct {
	op change.Op
	id int64
	v  string
	w  *int64
}

func kvBatch(t *testing.T, stream string, withW bool, key []string, rows ...kvRow) client.ApplyItem {
	t.Helper()
	fields := []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: arrow.BinaryTypes.String, Nullable: true}}
	if withW {
		fields = append(fields, arrow.Field{Name: "w", Type: arrow.PrimitiveTypes.Int64, Nullable: true})
	}
	sc := change.Schema(fields, key)
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r.id)
		if r.op == change.OpDelete {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(r.v)
		}
		if withW {
			if r.w == nil {
				b.Field(2).AppendNull()
			} else {
				b.Field(2).(*array.Int64Builder).Append(*r.w)
			}
		}
		b.Row(r.op, "")
	}
	rec := b.NewBatch()
	defer rec.Release()
	ipc, err := protocol.EncodeRecord(memory.DefaultAllocator, rec)
	if err != nil {
		t.Fatal(err)
	}
	return client.ApplyItem{Batch: &protocol.Batch{Stream: stream, SchemaID: protocol.SchemaID(sc), Rows: rec.NumRows(), IPC: ipc}}
}

// TestApplyRange: a coalesced range is one transaction recording its last entry; a replay of part of it is
// skipped; a range overlapping the fence applies only the entries above it; an entry that fails takes the
// whole range with it.
func TestApplyRange(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	dst := startPlugin(t)
	set := settings(db, map[string]any{"schema": "out"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := []string{"id"}
	kv := func(rows ...kvRow) client.ApplyItem { return kvBatch(t, "public.kv", false, key, rows...) }
	for _, tc := range []struct {
		name        string
		first, last uint64
		items       []client.ApplyItem
		skipped     bool
		err         string
		want        string // out.kv after the apply
		applied     uint64
	}{
		{name: "a range", first: 1, last: 3, items: []client.ApplyItem{
			{Entry: 1}, kv(kvRow{op: change.OpInsert, id: 1, v: "a"}),
			{Entry: 2}, kv(kvRow{op: change.OpUpdate, id: 1, v: "a2"}, kvRow{op: change.OpInsert, id: 2, v: "b"}),
			{Entry: 3}, kv(kvRow{op: change.OpDelete, id: 2}),
		}, want: "(1,a2)", applied: 3},
		{name: "a replay of part of it", first: 2, last: 3, items: []client.ApplyItem{
			{Entry: 2}, kv(kvRow{op: change.OpInsert, id: 8, v: "x"}), {Entry: 3}, kv(kvRow{op: change.OpInsert, id: 9, v: "x"}),
		}, skipped: true, want: "(1,a2)", applied: 3},
		{name: "overlapping the fence", first: 3, last: 5, items: []client.ApplyItem{
			{Entry: 3}, kv(kvRow{op: change.OpInsert, id: 9, v: "WRONG"}),
			{Entry: 4}, kv(kvRow{op: change.OpInsert, id: 4, v: "d"}),
			{Entry: 5}, kv(kvRow{op: change.OpUpdate, id: 4, v: "d5"}),
		}, want: "(1,a2) (4,d5)", applied: 5},
		{name: "a failing entry fails the range", first: 6, last: 7, items: []client.ApplyItem{
			{Entry: 6}, kv(kvRow{op: change.OpInsert, id: 6, v: "f"}),
			{Entry: 7}, kvBatch(t, "log", false, nil, kvRow{op: change.OpUpdate, id: 1, v: "y"}),
		}, err: "no primary key", want: "(1,a2) (4,d5)", applied: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := dst.ApplyRange(ctx, set, "p", tc.first, tc.last, slices.Values(tc.items))
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error containing %q", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case r.Skipped != tc.skipped:
				t.Errorf("skipped = %v, want %v", r.Skipped, tc.skipped)
			}
			if got := strings.Join(rowsText(t, db, "out.kv"), " "); got != tc.want {
				t.Errorf("out.kv = %s, want %s", got, tc.want)
			}
			la, err := dst.LastApplied(ctx, set, "p")
			if err != nil || la.Sequence != tc.applied {
				t.Errorf("last applied %v, %v; want %d", la, err, tc.applied)
			}
		})
	}
}

// TestApply: rows collapse per key within an apply (the last change wins), a replayed sequence number is
// skipped, a new column is added, and a stream without a key takes inserts only.
func TestApply(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	dst := startPlugin(t)
	set := settings(db, map[string]any{"schema": "out"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	apply := func(seq uint64, items ...client.ApplyItem) (bool, error) {
		r, err := dst.Apply(ctx, set, "p", seq, items)
		if err != nil {
			return false, err
		}
		return r.Skipped, nil
	}
	key := []string{"id"}
	seven := int64(7)
	for _, tc := range []struct {
		name    string
		seq     uint64
		items   []client.ApplyItem
		skipped bool
		want    string // out.kv after the apply
		err     string
	}{
		{name: "collapse per key", seq: 1, items: []client.ApplyItem{
			kvBatch(t, "public.kv", false, key, kvRow{op: change.OpRead, id: 1, v: "a"}, kvRow{op: change.OpInsert, id: 2, v: "b"}, kvRow{op: change.OpUpdate, id: 1, v: "a2"}),
			kvBatch(t, "public.kv", false, key, kvRow{op: change.OpDelete, id: 2}, kvRow{op: change.OpInsert, id: 3, v: "c"}, kvRow{op: change.OpDelete, id: 3}, kvRow{op: change.OpInsert, id: 3, v: "c2"}, kvRow{op: change.OpUpdate, id: 1, v: "a3"}),
		}, want: "(1,a3) (3,c2)"},
		{name: "replay is skipped", seq: 1, items: []client.ApplyItem{kvBatch(t, "public.kv", false, key, kvRow{op: change.OpInsert, id: 9, v: "x"})}, skipped: true, want: "(1,a3) (3,c2)"},
		{name: "older is skipped", seq: 0, items: []client.ApplyItem{kvBatch(t, "public.kv", false, key, kvRow{op: change.OpInsert, id: 9, v: "x"})}, skipped: true, want: "(1,a3) (3,c2)"},
		{name: "new column", seq: 2, items: []client.ApplyItem{
			kvBatch(t, "public.kv", true, key, kvRow{op: change.OpUpdate, id: 3, v: "c3", w: &seven}, kvRow{op: change.OpInsert, id: 4, v: "d"}),
		}, want: "(1,a3,) (3,c3,7) (4,d,)"},
		{name: "delete of a missing key", seq: 3, items: []client.ApplyItem{kvBatch(t, "public.kv", false, key, kvRow{op: change.OpDelete, id: 100}, kvRow{op: change.OpDelete, id: 1})},
			want: "(3,c3,7) (4,d,)"},
		{name: "no key: inserts", seq: 4, items: []client.ApplyItem{kvBatch(t, "log", false, nil, kvRow{op: change.OpInsert, id: 1, v: "x"}, kvRow{op: change.OpInsert, id: 1, v: "x"})},
			want: "(3,c3,7) (4,d,)"},
		{name: "no key: no updates", seq: 5, items: []client.ApplyItem{kvBatch(t, "log", false, nil, kvRow{op: change.OpUpdate, id: 1, v: "y"})},
			err: "no primary key"},
		// A truncate empties the table in the apply's transaction: rows before it in the apply go too, rows
		// after it stay.
		{name: "truncate between rows", seq: 5, items: []client.ApplyItem{
			kvBatch(t, "public.kv", true, key, kvRow{op: change.OpInsert, id: 5, v: "e"}),
			{Truncate: "public.kv"},
			kvBatch(t, "public.kv", true, key, kvRow{op: change.OpInsert, id: 6, v: "f"}, kvRow{op: change.OpUpdate, id: 6, v: "f2"}),
		}, want: "(6,f2,)"},
		{name: "a failed apply leaves the truncate undone", seq: 6, items: []client.ApplyItem{
			{Truncate: "public.kv"},
			kvBatch(t, "log", false, nil, kvRow{op: change.OpUpdate, id: 1, v: "y"}),
		}, err: "no primary key", want: "(6,f2,)"},
		{name: "truncate of a table not created yet", seq: 6, items: []client.ApplyItem{{Truncate: "public.nothere"}}, want: "(6,f2,)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			skipped, err := apply(tc.seq, tc.items...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error containing %q", err, tc.err)
				}
				if tc.want == "" {
					return
				}
				if got := strings.Join(rowsText(t, db, "out.kv"), " "); got != tc.want {
					t.Errorf("out.kv = %s, want %s", got, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if skipped != tc.skipped {
				t.Errorf("skipped = %v, want %v", skipped, tc.skipped)
			}
			if got := strings.Join(rowsText(t, db, "out.kv"), " "); got != tc.want {
				t.Errorf("out.kv = %s, want %s", got, tc.want)
			}
		})
	}
	if got := strings.Join(rowsText(t, db, "out.log"), " "); got != "(1,x) (1,x)" {
		t.Errorf("out.log = %s, want both inserts", got)
	}
	la, err := dst.LastApplied(ctx, set, "p")
	if err != nil {
		t.Fatal(err)
	}
	if la.Sequence != 6 || la.Streams["public.kv"] != 5 || la.Streams["log"] != 4 {
		t.Errorf("last applied: %d %v, want 6 with public.kv at 5 and log at 4", la.Sequence, la.Streams)
	}
	if la, err := dst.LastApplied(ctx, set, "other"); err != nil || la.Sequence != 0 {
		t.Errorf("last applied of another pipeline: %v %v, want 0", la, err)
	}

	// Nested Arrow types (as datagen's nested mode makes them): structs become jsonb, lists of scalars arrays.
	nsc := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "address", Nullable: true, Type: arrow.StructOf(
			arrow.Field{Name: "city", Type: arrow.BinaryTypes.String, Nullable: true},
			arrow.Field{Name: "zip", Type: arrow.PrimitiveTypes.Int32, Nullable: true})},
		{Name: "tags", Nullable: true, Type: arrow.ListOf(arrow.BinaryTypes.String)},
		{Name: "ts", Nullable: true, Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}},
	}, key)
	nrec, _, err := array.RecordFromJSON(memory.DefaultAllocator, nsc, strings.NewReader(`[
		{"id": 1, "address": {"city": "Zürich", "zip": 8000}, "tags": ["a", "b\"c", null], "ts": "2024-01-02T03:04:05.123456789Z", "_skippr_op": 1},
		{"id": 2, "address": null, "tags": [], "ts": null, "_skippr_op": 1}]`))
	if err != nil {
		t.Fatal(err)
	}
	defer nrec.Release()
	nipc, err := protocol.EncodeRecord(memory.DefaultAllocator, nrec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := apply(7, client.ApplyItem{Batch: &protocol.Batch{Stream: "nested", SchemaID: protocol.SchemaID(nsc), Rows: nrec.NumRows(), IPC: nipc}}); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(rowsText(t, db, "out.nested"), " "), `(1,"{""zip"": 8000, ""city"": ""Zürich""}","{a,""b\\""c"",NULL}","2024-01-02 03:04:05.123456+00") (2,,{},)`; got != want {
		t.Errorf("out.nested = %s, want %s", got, want)
	}

	// A role with rights on an existing schema only (none on the database) can apply.
	r := db.Server.CreateRole(t)
	db.Exec(t, `CREATE SCHEMA limited; GRANT USAGE, CREATE ON SCHEMA limited TO `+r.Name)
	limited := settings(db, map[string]any{"schema": "limited", "user": r.Name, "password": r.Password})
	if err := dst.Check(ctx, limited); err != nil {
		t.Fatalf("check: %v", err)
	}
	if _, err := dst.Apply(ctx, limited, "p", 1, []client.ApplyItem{kvBatch(t, "kv", false, key, kvRow{op: change.OpInsert, id: 1, v: "a"})}); err != nil {
		t.Fatalf("apply as a role with schema rights only: %v", err)
	}
}

// TestApplyNUL: a text value holding a NUL character (MySQL's VARCHAR can, PostgreSQL's text cannot) follows the
// destination's on_unrepresentable: fail is a data fault naming the table, the column and the row's key, not an
// error COPY repeats at every retry, and the apply changes nothing; null_and_record writes NULL and records the
// value in the row's _skippr_meta (added to the table), after what the source recorded there; a key holding a NUL
// fails under either policy.
func TestApplyNUL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, policy string
		keyNUL       bool
		fails        []string // the fault names these; empty: the apply succeeds
		want         string   // id|v|_skippr_meta of every row, or id|v when the apply fails
	}{
		{name: "fail", policy: "fail", fails: []string{"kv", "column v", "id=7", "NUL", "on_unrepresentable: null_and_record"}, want: "1|a"},
		{name: "default fails", policy: "", fails: []string{"kv", "column v", "id=7", "NUL"}, want: "1|a"},
		{name: "null_and_record", policy: "null_and_record",
			want: `1|a|NULL 2|ok|NULL 7|NULL|{"changes":[{"column":"v","reason":"PostgreSQL text cannot store a NUL character (0x00)","value":"a\u0000b"}]}`},
		{name: "null_and_record key", policy: "null_and_record", keyNUL: true, fails: []string{"kv", "column id", "NUL", "key value"}, want: "1|a|NULL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			db := pgtest.NewDB(t)
			dst := startPlugin(t)
			extra := map[string]any{"schema": "out"}
			if tc.policy != "" {
				extra["on_unrepresentable"] = tc.policy
			}
			set := settings(db, extra)
			key := "id"
			kv := func(rows ...kvRow) client.ApplyItem { return kvBatch(t, "public.kv", false, []string{key}, rows...) }
			if tc.keyNUL {
				// v is the key: a NUL in it cannot become NULL.
				key = "v"
			}
			if _, err := dst.Apply(ctx, set, "p", 1, []client.ApplyItem{kv(kvRow{op: change.OpInsert, id: 1, v: "a"})}); err != nil {
				t.Fatal(err)
			}
			_, err := dst.Apply(ctx, set, "p", 2, []client.ApplyItem{kv(kvRow{op: change.OpInsert, id: 2, v: "ok"}, kvRow{op: change.OpInsert, id: 7, v: "a\x00b"})})
			cols := "id, v"
			if tc.policy == "null_and_record" {
				cols += ", _skippr_meta"
			}
			if tc.keyNUL {
				tc.fails = []string{"kv", "column v", "NUL", "key value"}
			}
			if len(tc.fails) > 0 {
				if !errors.Is(err, fault.ErrData) {
					t.Fatalf("apply of a NUL: %v (class %v), want a data fault", err, fault.ClassOf(err))
				}
				for _, w := range tc.fails {
					if !strings.Contains(err.Error()+" "+fault.FixOf(err), w) {
						t.Errorf("fault %q (fix %q) does not name %q", err, fault.FixOf(err), w)
					}
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got := columnsText(t, db, "out.kv", cols); got != tc.want {
				t.Errorf("out.kv = %s, want %s", got, tc.want)
			}
		})
	}
}

// columnsText is the given columns of every row of table, as a|b|c, rows ordered by the first column and
// separated by spaces, NULL for NULL.
func columnsText(t *testing.T, db *pgtest.DB, table, cols string) string {
	t.Helper()
	conn := db.Connect(t)
	parts := strings.Split(cols, ", ")
	for i, c := range parts {
		parts[i] = "coalesce(" + c + "::text, 'NULL')"
	}
	rows, err := conn.Query(context.Background(), "SELECT concat_ws('|', "+strings.Join(parts, ", ")+") FROM "+table+" ORDER BY 1")
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	return strings.Join(out, " ")
}

// TestApplyNULKeepsSourceMeta: under null_and_record a NUL replaced by the destination is recorded after what the
// source recorded in the row's _skippr_meta (its own null_and_record), not in place of it.
func TestApplyNULKeepsSourceMeta(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := pgtest.NewDB(t)
	dst := startPlugin(t)
	set := settings(db, map[string]any{"schema": "out", "on_unrepresentable": "null_and_record"})
	sc := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: arrow.BinaryTypes.String, Nullable: true}, values.Field}, []string{"id"})
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	const fromSource = `{"changes":[{"column":"n","reason":"numeric NaN","value":"NaN"}]}`
	for _, r := range []struct {
		id      int64
		v, meta string
	}{{1, "a\x00b", fromSource}, {2, "x\x00", ""}, {3, "ok", fromSource}, {4, "ok", ""}} {
		b.Field(0).(*array.Int64Builder).Append(r.id)
		b.Field(1).(*array.StringBuilder).Append(r.v)
		if r.meta == "" {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.StringBuilder).Append(r.meta)
		}
		b.Row(change.OpInsert, "")
	}
	rec := b.NewBatch()
	defer rec.Release()
	ipc, err := protocol.EncodeRecord(memory.DefaultAllocator, rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Apply(ctx, set, "p", 1, []client.ApplyItem{{Batch: &protocol.Batch{Stream: "public.m", SchemaID: protocol.SchemaID(sc), Rows: rec.NumRows(), IPC: ipc}}}); err != nil {
		t.Fatal(err)
	}
	ours := `{"column":"v","reason":"PostgreSQL text cannot store a NUL character (0x00)","value":"%s"}`
	want := strings.Join([]string{
		`1|NULL|{"changes":[{"column":"n","reason":"numeric NaN","value":"NaN"},` + fmt.Sprintf(ours, `a\u0000b`) + `]}`,
		`2|NULL|{"changes":[` + fmt.Sprintf(ours, `x\u0000`) + `]}`,
		`3|ok|` + fromSource,
		`4|ok|NULL`,
	}, " ")
	if got := columnsText(t, db, "out.m", "id, v, _skippr_meta"); got != want {
		t.Errorf("out.m =\n%s\nwant\n%s", got, want)
	}
}

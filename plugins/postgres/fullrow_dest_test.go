package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// bagRow is a change of a keyless stream matched by full row: a (nullable int) and b (nullable text).
type bagRow struct {
	op change.Op
	a  *int64
	b  *string
}

func bagBatch(t testing.TB, stream string, rows ...bagRow) client.ApplyItem {
	t.Helper()
	sc := change.WithFullRow(change.Schema([]arrow.Field{
		{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil))
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, r := range rows {
		if r.a == nil {
			b.Field(0).AppendNull()
		} else {
			b.Field(0).(*array.Int64Builder).Append(*r.a)
		}
		if r.b == nil {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(*r.b)
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

// bag makes rows of op from "a,b" pairs, "-" for NULL.
func bag(op change.Op, pairs ...string) []bagRow {
	var out []bagRow
	for _, p := range pairs {
		a, b, _ := strings.Cut(p, ",")
		r := bagRow{op: op}
		if a != "-" {
			v := int64(a[0] - '0')
			r.a = &v
		}
		if b != "-" {
			r.b = &b
		}
		out = append(out, r)
	}
	return out
}

// TestApplyFullRow: a keyless stream matched by full row keeps the multiset of rows right: a delete removes
// exactly one equal row (NULL equal to NULL, NULL not equal to ”), an update (a delete and an insert) changes
// one of several identical rows, a range is one transaction and its replay is skipped, a truncate empties the
// table, and a delete that finds no equal row fails the apply as a data fault, changing nothing.
func TestApplyFullRow(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	dst := startPlugin(t)
	set := settings(db, map[string]any{"schema": "out"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := func(rows ...[]bagRow) client.ApplyItem { return bagBatch(t, "public.bag", slices.Concat(rows...)...) }
	for _, tc := range []struct {
		name        string
		first, last uint64
		items       []client.ApplyItem
		skipped     bool
		err         error
		want        string // out.bag after the apply, rows sorted
	}{
		{name: "identical rows and NULLs", first: 1, last: 1, items: []client.ApplyItem{
			b(bag(change.OpInsert, "1,x", "1,x", "1,x", "2,-", "2,-", "-,-", "2,")),
		}, want: "(,) (1,x) (1,x) (1,x) (2,\"\") (2,) (2,)"},
		{name: "delete one of three, update one of two", first: 2, last: 2, items: []client.ApplyItem{
			b(bag(change.OpDelete, "1,x", "2,-"), bag(change.OpInsert, "2,y")),
		}, want: "(,) (1,x) (1,x) (2,\"\") (2,) (2,y)"},
		{name: "a range: inserts cancelled by later deletes, deletes of rows the table holds", first: 3, last: 4, items: []client.ApplyItem{
			{Entry: 3}, b(bag(change.OpDelete, "-,-"), bag(change.OpInsert, "3,z", "3,z"), bag(change.OpDelete, "2,")),
			{Entry: 4}, b(bag(change.OpDelete, "3,z", "1,x"), bag(change.OpInsert, "1,x", "1,x")), b(bag(change.OpDelete, "1,x")),
		}, want: "(1,x) (1,x) (2,) (2,y) (3,z)"},
		{name: "a replay is skipped", first: 3, last: 4, items: []client.ApplyItem{
			{Entry: 3}, b(bag(change.OpDelete, "1,x")), {Entry: 4}, b(bag(change.OpInsert, "9,w")),
		}, skipped: true, want: "(1,x) (1,x) (2,) (2,y) (3,z)"},
		{name: "a delete without an equal row fails the range", first: 5, last: 6, items: []client.ApplyItem{
			{Entry: 5}, b(bag(change.OpDelete, "1,x")),
			{Entry: 6}, b(bag(change.OpDelete, "2,y", "2,y")),
		}, err: fault.ErrData, want: "(1,x) (1,x) (2,) (2,y) (3,z)"},
		{name: "a truncate, then rows", first: 5, last: 5, items: []client.ApplyItem{
			b(bag(change.OpDelete, "1,x")), {Truncate: "public.bag"}, b(bag(change.OpInsert, "4,v", "4,v"), bag(change.OpDelete, "4,v")),
		}, want: "(4,v)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := dst.ApplyRange(ctx, set, "p", tc.first, tc.last, slices.Values(tc.items))
			switch {
			case tc.err != nil:
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), `"out"."bag"`) {
					t.Fatalf("got %v, want %v naming the table", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case r.Skipped != tc.skipped:
				t.Errorf("skipped = %v, want %v", r.Skipped, tc.skipped)
			}
			if got := strings.Join(rowsText(t, db, "out.bag"), " "); got != tc.want {
				t.Errorf("out.bag = %s\nwant      %s", got, tc.want)
			}
		})
	}
}

// TestApplyFullRowThroughput measures a range of 100k full row changes over a 100k-row table: 50k deletes of
// rows the table holds (10k distinct rows, 5 copies each) and 50k inserts.
func TestApplyFullRowThroughput(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	t.Parallel()
	db := pgtest.NewDB(t)
	dst := startPlugin(t)
	set := settings(db, map[string]any{"schema": "out"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	row := func(op change.Op, i int, tag string) bagRow {
		a, s := int64(i), tag+strings.Repeat("x", 20)
		return bagRow{op: op, a: &a, b: &s}
	}
	var load []bagRow
	for i := range 100_000 {
		load = append(load, row(change.OpInsert, i%20_000, "old"))
	}
	if _, err := dst.Apply(ctx, set, "p", 1, []client.ApplyItem{bagBatch(t, "public.bag", load...)}); err != nil {
		t.Fatal(err)
	}
	var changes []client.ApplyItem
	for c := range 10 {
		var rows []bagRow
		for i := range 5_000 {
			n := c*5_000 + i
			rows = append(rows, row(change.OpDelete, n%10_000, "old"), row(change.OpInsert, n, "new"))
		}
		changes = append(changes, bagBatch(t, "public.bag", rows...))
	}
	start := time.Now()
	if _, err := dst.Apply(ctx, set, "p", 2, changes); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	var n int64
	if err := db.Connect(t).QueryRow(ctx, "SELECT count(*) FROM out.bag").Scan(&n); err != nil || n != 100_000 {
		t.Fatalf("out.bag has %d rows (%v), want 100000", n, err)
	}
	t.Logf("100k full row changes (50k deletes, 50k inserts) over 100k rows: %v, %.0f changes/s", took, 100_000/took.Seconds())
}

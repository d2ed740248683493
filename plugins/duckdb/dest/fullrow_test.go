package dest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

var bagSchema = change.WithFullRow(change.Schema([]arrow.Field{
	{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true},
}, nil))

// bag is a batch of op rows of the keyless stream public.bag from "a,b" pairs, "-" for NULL.
func bag(t *testing.T, seq uint64, op change.Op, pairs ...string) serve.Item {
	t.Helper()
	b := change.NewBuilder(memory.DefaultAllocator, bagSchema)
	defer b.Release()
	for _, p := range pairs {
		x, y, _ := strings.Cut(p, ",")
		if x == "-" {
			b.Field(0).AppendNull()
		} else {
			b.Field(0).(*array.Int64Builder).Append(int64(x[0] - '0'))
		}
		if y == "-" {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(y)
		}
		b.Row(op, "")
	}
	rec := b.NewBatch()
	t.Cleanup(rec.Release)
	return serve.Item{Stream: "public.bag", Record: rec, Sequence: seq}
}

// TestApplyFullRow: a keyless stream matched by full row keeps the multiset of rows right: a delete removes
// exactly one equal row (NULL equal to NULL, NULL not equal to ”), an update (a delete and an insert) changes
// one of several identical rows, rows inserted by an earlier entry of the same range are found, a replay is
// skipped, a truncate empties the table, and a delete that finds no equal row fails the apply as a data
// fault, changing nothing.
func TestApplyFullRow(t *testing.T) {
	h := newHarness(t, "")
	const q = `SELECT coalesce(a::VARCHAR, 'NULL') || '|' || coalesce(b, 'NULL') FROM bag ORDER BY 1`
	for _, tc := range []struct {
		name        string
		first, last uint64
		items       []serve.Item
		skipped     bool
		err         error
		want        []string
	}{
		{name: "identical rows and NULLs", first: 1, last: 1, items: []serve.Item{
			bag(t, 1, change.OpInsert, "1,x", "1,x", "1,x", "2,-", "2,-", "-,-", "2,"),
		}, want: []string{"1|x", "1|x", "1|x", "2|", "2|NULL", "2|NULL", "NULL|NULL"}},
		{name: "delete one of three, update one of two", first: 2, last: 2, items: []serve.Item{
			bag(t, 2, change.OpDelete, "1,x", "2,-"), bag(t, 2, change.OpInsert, "2,y"),
		}, want: []string{"1|x", "1|x", "2|", "2|NULL", "2|y", "NULL|NULL"}},
		{name: "a range: rows of an earlier entry, inserts cancelled by later deletes", first: 3, last: 4, items: []serve.Item{
			bag(t, 3, change.OpDelete, "-,-"), bag(t, 3, change.OpInsert, "3,z", "3,z", "5,v"), bag(t, 3, change.OpDelete, "2,"),
			bag(t, 4, change.OpDelete, "3,z", "1,x", "5,v"), bag(t, 4, change.OpInsert, "1,x", "1,x"), bag(t, 4, change.OpDelete, "1,x"),
		}, want: []string{"1|x", "1|x", "2|NULL", "2|y", "3|z"}},
		{name: "a replay is skipped", first: 3, last: 4, items: []serve.Item{
			bag(t, 3, change.OpDelete, "1,x"), bag(t, 4, change.OpInsert, "9,w"),
		}, skipped: true, want: []string{"1|x", "1|x", "2|NULL", "2|y", "3|z"}},
		{name: "a delete without an equal row fails the range", first: 5, last: 6, items: []serve.Item{
			bag(t, 5, change.OpDelete, "1,x"), bag(t, 6, change.OpDelete, "2,y", "2,y"),
		}, err: fault.ErrData, want: []string{"1|x", "1|x", "2|NULL", "2|y", "3|z"}},
		{name: "a truncate, then rows", first: 5, last: 5, items: []serve.Item{
			bag(t, 5, change.OpDelete, "1,x"), {Stream: "public.bag", Truncate: true, Sequence: 5},
			bag(t, 5, change.OpInsert, "4,v", "4,v"), bag(t, 5, change.OpDelete, "4,v"),
		}, want: []string{"4|v"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := h.d.Apply(ctx(t), serve.ApplyRequest{Settings: h.settings, Pipeline: "p", FirstSequence: tc.first, Sequence: tc.last, Items: tc.items})
			switch {
			case tc.err != nil:
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), "bag") {
					t.Fatalf("got %v, want %v naming the table", err, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case res.Skipped != tc.skipped:
				t.Errorf("skipped = %v, want %v", res.Skipped, tc.skipped)
			}
			h.wantRows(q, tc.want...)
		})
	}
}

// TestApplyFullRowThroughput measures a range of 100k full row changes over a 100k-row table: 50k deletes of
// rows the table holds (10k distinct rows of 5 copies each) and 50k inserts.
func TestApplyFullRowThroughput(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	h := newHarness(t, "")
	build := func(seq uint64, n int, f func(b *change.Builder, i int)) serve.Item {
		b := change.NewBuilder(memory.DefaultAllocator, bagSchema)
		defer b.Release()
		for i := range n {
			f(b, i)
		}
		rec := b.NewBatch()
		t.Cleanup(rec.Release)
		return serve.Item{Stream: "public.bag", Record: rec, Sequence: seq}
	}
	put := func(b *change.Builder, op change.Op, a int, tag string) {
		b.Field(0).(*array.Int64Builder).Append(int64(a))
		b.Field(1).(*array.StringBuilder).Append(tag + strings.Repeat("x", 20))
		b.Row(op, "")
	}
	h.apply(1, build(1, 100_000, func(b *change.Builder, i int) { put(b, change.OpInsert, i%20_000, "old") }))
	var items []serve.Item
	for c := range 10 {
		items = append(items, build(2, 10_000, func(b *change.Builder, i int) {
			n := c*5_000 + i/2
			if i%2 == 0 {
				put(b, change.OpDelete, n%10_000, "old")
			} else {
				put(b, change.OpInsert, n, "new")
			}
		}))
	}
	start := time.Now()
	h.apply(2, items...)
	took := time.Since(start)
	h.wantRows(`SELECT count(*) FROM bag`, "100000")
	t.Logf("100k full row changes (50k deletes, 50k inserts) over 100k rows: %v, %.0f changes/s", took, 100_000/took.Seconds())
}

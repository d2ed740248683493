package dest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/bigquery/gsql"
	"github.com/skippr-dev/skippr/testkit/bigquerytest"
)

// TestAddedColumnFillsExistingRows: a column added at the source with a value for the rows already there
// (values.MetaExistingRows, as PostgreSQL's ADD COLUMN … DEFAULT) gives the table's existing rows that value,
// also when the apply's transaction fails after the table patch added the column and a new process replays
// the range. Rows the range writes with an explicit NULL stay NULL; a replay of the range is skipped, a range
// reaching past the fence applies only its new part and fills nothing again, and a value the column's type
// cannot take leaves the rows NULL (logged) instead of failing every retry.
func TestAddedColumnFillsExistingRows(t *testing.T) {
	s := bigquerytest.Start(t, project)
	raw := settings(s)
	d := serve.NewSessions(&Destination{})
	t.Cleanup(func() { d.Close() })
	const st = "public.items"
	s1 := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "qty", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, []string{"id"})
	existing := func(v string) arrow.Metadata {
		return arrow.NewMetadata([]string{values.MetaExistingRows}, []string{v})
	}
	s2 := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "qty", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "grade", Type: arrow.PrimitiveTypes.Int64, Nullable: true, Metadata: existing("7")},
		{Name: "label", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: existing("it's old")},
		{Name: "day", Type: arrow.FixedWidthTypes.Date32, Nullable: true, Metadata: existing("not a date")}}, []string{"id"})
	// rows builds a batch of s: id, qty, then (for s2) grade and label, nil meaning NULL; day is always NULL.
	rows := func(s *arrow.Schema, op change.Op, rs ...[]any) arrow.RecordBatch {
		b := change.NewBuilder(memory.DefaultAllocator, s)
		defer b.Release()
		for _, r := range rs {
			b.Field(0).(*array.Int64Builder).Append(r[0].(int64))
			b.Field(1).(*array.Int64Builder).Append(r[1].(int64))
			if len(s.Fields()) > 4 {
				if r[2] == nil {
					b.Field(2).AppendNull()
				} else {
					b.Field(2).(*array.Int64Builder).Append(r[2].(int64))
				}
				if r[3] == nil {
					b.Field(3).AppendNull()
				} else {
					b.Field(3).(*array.StringBuilder).Append(r[3].(string))
				}
				b.Field(4).AppendNull()
			}
			b.Row(op, "")
		}
		return b.NewBatch()
	}
	dumpItems := func() string {
		t.Helper()
		r, err := s.Pool().Query(context.Background(), `SELECT concat_ws('|', id, coalesce(grade::text, '-'), coalesce(label, '-'), coalesce(day::text, '-')) FROM analytics.items ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var out []string
		for r.Next() {
			var l string
			if err := r.Scan(&l); err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		return strings.Join(out, " ")
	}
	r1 := rows(s1, change.OpInsert, []any{int64(1), int64(10)}, []any{int64(2), int64(20)})
	defer r1.Release()
	apply(t, d, raw, 1, 1, serve.Item{Stream: st, Schema: &serve.Stream{Name: st, Schema: s1}, Sequence: 1}, serve.Item{Stream: st, Record: r1, Sequence: 1})

	// Entry 2: a row in the old shape (inserted before the ADD COLUMN at the source), the column added, a row
	// with NULLs and one with values.
	r2old := rows(s1, change.OpInsert, []any{int64(3), int64(30)})
	defer r2old.Release()
	r2 := rows(s2, change.OpInsert, []any{int64(4), int64(40), nil, nil}, []any{int64(5), int64(50), int64(9), "new"})
	defer r2.Release()
	entry2 := []serve.Item{{Stream: st, Record: r2old, Sequence: 2}, {Stream: st, Schema: &serve.Stream{Name: st, Schema: s2}, Sequence: 2}, {Stream: st, Record: r2, Sequence: 2}}

	// The transaction fails after the patch added the columns: another transaction holds the state table.
	release := s.Mutate("analytics", gsql.StateTable("orders"))
	_, _, err := applyStats(d, serve.ApplyRequest{Settings: raw, Pipeline: "orders", FirstSequence: 2, Sequence: 2, Items: entry2})
	release()
	if err == nil {
		t.Fatal("the apply whose transaction was cancelled succeeded")
	}
	if got := dumpItems(); got != "1|-|-|- 2|-|-|-" {
		t.Fatalf("after the failed apply: %s, want rows 1 and 2 with the columns added and empty", got)
	}
	// A new process replays the range.
	d2 := serve.NewSessions(&Destination{})
	t.Cleanup(func() { d2.Close() })
	apply(t, d2, raw, 2, 2, entry2...)
	const old = "7|it's old|-"
	if got, want := dumpItems(), fmt.Sprintf("1|%s 2|%s 3|%s 4|-|-|- 5|9|new|-", old, old, old); got != want {
		t.Fatalf("after the replay:\n%s\nwant\n%s", got, want)
	}
	if res, _ := apply(t, d2, raw, 2, 2, entry2...); !res.Skipped {
		t.Fatalf("replay of 2: %+v, want skipped", res)
	}
	// A range reaching past the fence: entry 2 is skipped, entry 3 sets row 1's grade to NULL, which stays.
	r3 := rows(s2, change.OpUpdate, []any{int64(1), int64(11), nil, nil})
	defer r3.Release()
	apply(t, d2, raw, 2, 3, append(entry2, serve.Item{Stream: st, Record: r3, Sequence: 3})...)
	if got, want := dumpItems(), fmt.Sprintf("1|-|-|- 2|%s 3|%s 4|-|-|- 5|9|new|-", old, old); got != want {
		t.Fatalf("after 3:\n%s\nwant\n%s", got, want)
	}
	var left int
	if err := s.Pool().QueryRow(context.Background(), fmt.Sprintf("SELECT count(*) FROM analytics.%q", gsql.FillTable("orders"))).Scan(&left); err != nil || left != 0 {
		t.Fatalf("fills left recorded: %d %v", left, err)
	}
}

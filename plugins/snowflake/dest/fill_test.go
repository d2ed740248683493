package dest

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

// TestAddedColumnFillsExistingRows: a column added at the source with a value for the rows already there
// (values.MetaExistingRows, as PostgreSQL's ADD COLUMN … DEFAULT) gives the table's existing rows that value,
// also when the process dies between the ALTER (committed at once, Snowflake DDL) and the apply's commit and a
// new process replays the range. Rows the range writes with an explicit NULL stay NULL; a replay of the range
// is skipped, a range that reaches past the fence applies only its new part and fills nothing again, and a
// value the column's type cannot take leaves the rows NULL (logged) instead of failing every retry.
func TestAddedColumnFillsExistingRows(t *testing.T) {
	tg := newTarget(t, nil)
	if tg.standin == nil {
		t.Skip("the crash is simulated by the stand-in")
	}
	st := tg.stream("items")
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
		b := change.NewBuilder(mem, s)
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
	r1 := rows(s1, change.OpInsert, []any{int64(1), int64(10)}, []any{int64(2), int64(20)})
	defer r1.Release()
	tg.apply(1, 1, serve.Item{Stream: st, Schema: &serve.Stream{Name: st, Schema: s1}, Sequence: 1}, item(st, 1, r1))

	// Entry 2: a row in the old shape (inserted before the ADD COLUMN at the source), the column added, a row
	// with NULL and one with values.
	r2old := rows(s1, change.OpInsert, []any{int64(3), int64(30)})
	defer r2old.Release()
	r2 := rows(s2, change.OpInsert, []any{int64(4), int64(40), nil, nil}, []any{int64(5), int64(50), int64(9), "new"})
	defer r2.Release()
	entry2 := []serve.Item{item(st, 2, r2old), {Stream: st, Schema: &serve.Stream{Name: st, Schema: s2}, Sequence: 2}, item(st, 2, r2)}

	// The process dies after the ALTER committed and before the apply's commit.
	tg.standin.FailNext(`"_SKIPPR_STATE" AS t USING`, 630, "57014", "Statement reached its statement or warehouse timeout of 60 second(s) and was canceled.")
	if _, err := tg.d.Apply(tctx(t), serve.ApplyRequest{Settings: tg.settings, Pipeline: tg.pipeline, FirstSequence: 2, Sequence: 2, Items: entry2}); err == nil {
		t.Fatal("the apply whose state MERGE failed succeeded")
	}
	if got := tg.rows(TableName(st)); len(got) != 2 || got["1"]["GRADE"] != nil {
		t.Fatalf("after the failed apply: %v, want rows 1 and 2, the column added and empty", got)
	}
	// A new process replays the range.
	tg.d.Close()
	tg.dest = &Destination{TempDir: t.TempDir()}
	tg.d = serve.NewSessions(tg.dest)
	tg.apply(2, 2, entry2...)
	check := func(want map[string][2]any) {
		t.Helper()
		got := tg.rows(TableName(st))
		if len(got) != len(want) {
			t.Fatalf("rows %v, want %d", got, len(want))
		}
		for id, w := range want {
			g, l := got[id]["GRADE"], got[id]["LABEL"]
			if fmt.Sprint(g) != fmt.Sprint(w[0]) || fmt.Sprint(l) != fmt.Sprint(w[1]) || got[id]["DAY"] != nil {
				t.Errorf("row %s: grade %v label %v day %v, want %v %v <nil>", id, g, l, got[id]["DAY"], w[0], w[1])
			}
		}
	}
	check(map[string][2]any{"1": {7, "it's old"}, "2": {7, "it's old"}, "3": {7, "it's old"}, "4": {nil, nil}, "5": {9, "new"}})

	if res := tg.apply(2, 2, entry2...); !res.Skipped {
		t.Fatalf("replay of 2: %+v, want skipped", res)
	}
	// A range reaching past the fence: entry 2 is skipped, entry 3 sets row 1's grade to NULL, which stays.
	r3 := rows(s2, change.OpUpdate, []any{int64(1), int64(11), nil, nil})
	defer r3.Release()
	tg.apply(2, 3, append(entry2, item(st, 3, r3))...)
	check(map[string][2]any{"1": {nil, nil}, "2": {7, "it's old"}, "3": {7, "it's old"}, "4": {nil, nil}, "5": {9, "new"}})
	if fills, err := tg.standin.Rows(tctx(t), "_SKIPPR_FILL"); err != nil || len(fills) != 0 {
		t.Fatalf("fills left recorded: %v %v", fills, err)
	}
}

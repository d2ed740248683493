package dest

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// TestRenameColumn: a column the source renamed (change.RenamedFromMeta) is renamed by field id, so the rows
// written before read under the new name; rows of the old schema in the same apply land in the renamed
// column; and the same items applied again (a replay over a table already renamed) change nothing.
// Without the marker the table gains a column w beside v, and rows 1 and 3 have no w.
func TestRenameColumn(t *testing.T) {
	e := newEnv(t, nil)
	id := arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64}
	n := arrow.Field{Name: "n", Type: arrow.PrimitiveTypes.Int32, Nullable: true}
	v1 := change.Schema([]arrow.Field{id, {Name: "v", Type: arrow.BinaryTypes.String, Nullable: true}, n}, []string{"id"})
	v2 := change.Schema([]arrow.Field{id, change.MarkRenamed(arrow.Field{Name: "w", Type: arrow.BinaryTypes.String, Nullable: true}, "v"), n}, []string{"id"})
	e.apply(1, append([]serve.Item{schemaItem("t", v1)}, items("t", batch(t, v1, r(opI, 1, "a", 10), r(opI, 2, "b", 20), r(opI, 3, "c", 30)))...)...)
	before, ok := e.table("t").Schema().FindFieldByName("v")
	if !ok {
		t.Fatal("no column v after apply 1")
	}
	second := func(op4 change.Op) []serve.Item {
		return []serve.Item{
			{Stream: "t", Record: batch(t, v1, r(opU, 3, "c2", 31))},
			schemaItem("t", v2),
			{Stream: "t", Record: batch(t, v2, r(op4, 4, "d", 40), r(opU, 2, "b2", 21))},
		}
	}
	want := map[string]map[string]any{
		"1": {"id": float64(1), "w": "a", "n": float64(10)},
		"2": {"id": float64(2), "w": "b2", "n": float64(21)},
		"3": {"id": float64(3), "w": "c2", "n": float64(31)},
		"4": {"id": float64(4), "w": "d", "n": float64(40)},
	}
	check := func(after string) {
		t.Helper()
		sch := e.table("t").Schema()
		if _, ok := sch.FindFieldByName("v"); ok {
			t.Errorf("after %s: the table still has column v: %s", after, sch)
		}
		if w, ok := sch.FindFieldByName("w"); !ok || w.ID != before.ID {
			t.Errorf("after %s: column w is %+v (found %v), want v's field id %d", after, w, ok, before.ID)
		}
		got := e.rows("t", "id")
		for k, row := range want {
			for c, v := range row {
				if got[k][c] != v {
					t.Errorf("after %s: row %s column %s = %v, want %v (row %v)", after, k, c, got[k][c], v, got[k])
				}
			}
		}
		if len(got) != len(want) {
			t.Errorf("after %s: %d rows, want %d", after, len(got), len(want))
		}
	}
	e.apply(2, second(opI)...)
	check("the rename")
	if res := e.apply(2, second(opI)...); !res.Skipped {
		t.Error("apply 2 again is not skipped")
	}
	// The same changes again under a new sequence number (a source that re-reads them after a restart, with
	// the row inserted before now an update): the table, renamed already, stays as it is.
	e.apply(3, second(opU)...)
	check("the rename applied twice")
}

// TestRenameColumnAndAddItsOldName: RENAME COLUMN v TO w, ADD COLUMN v in one statement: v's field is renamed
// to w (its values kept) and a new v is added, empty for the old rows.
func TestRenameColumnAndAddItsOldName(t *testing.T) {
	e := newEnv(t, nil)
	id := arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64}
	v1 := change.Schema([]arrow.Field{id, {Name: "v", Type: arrow.BinaryTypes.String, Nullable: true}}, []string{"id"})
	v2 := change.Schema([]arrow.Field{id, change.MarkRenamed(arrow.Field{Name: "w", Type: arrow.BinaryTypes.String, Nullable: true}, "v"),
		{Name: "v", Type: arrow.PrimitiveTypes.Int32, Nullable: true}}, []string{"id"})
	e.apply(1, append([]serve.Item{schemaItem("t", v1)}, items("t", batch(t, v1, r(opI, 1, "a"), r(opI, 2, "b")))...)...)
	before, _ := e.table("t").Schema().FindFieldByName("v")
	e.apply(2, schemaItem("t", v2), serve.Item{Stream: "t", Record: batch(t, v2, r(opU, 2, "b2", 7))})
	sch := e.table("t").Schema()
	w, _ := sch.FindFieldByName("w")
	v, _ := sch.FindFieldByName("v")
	if w.ID != before.ID || v.ID == before.ID {
		t.Fatalf("schema %s: w must have v's old field id %d, v a new one", sch, before.ID)
	}
	got := e.rows("t", "id")
	if got["1"]["w"] != "a" || got["1"]["v"] != nil || got["2"]["w"] != "b2" || got["2"]["v"] != float64(7) {
		t.Fatalf("rows %v", got)
	}
}

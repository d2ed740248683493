package dest

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

// TestAddedColumnInitialDefault: on a format v3 table, a column added with a value for the rows already there
// (values.MetaExistingRows) gets it as its initial-default, committed with the rows: the rows written before
// read it through iceberg-go, and the plan `skippr query` reads with carries it (lakequery.MetaInitialDefault).
// A row of the same apply in the older shape (inserted before the ADD COLUMN) gets it too, written with the
// value. Rows the apply writes with NULL stay NULL, as does a row set to NULL later; a replay is skipped; compaction
// keeps the values; a value
// that does not convert to the column's type leaves the old rows NULL (logged). Without the change every old
// row reads NULL.
func TestAddedColumnInitialDefault(t *testing.T) {
	e := newEnv(t, map[string]any{"format_version": 3})
	existing := func(v string) arrow.Metadata {
		return arrow.NewMetadata([]string{values.MetaExistingRows}, []string{v})
	}
	id := arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64}
	qty := arrow.Field{Name: "qty", Type: arrow.PrimitiveTypes.Int64, Nullable: true}
	v1 := change.Schema([]arrow.Field{id, qty}, []string{"id"})
	v2 := change.Schema([]arrow.Field{id, qty,
		{Name: "grade", Type: arrow.PrimitiveTypes.Int32, Nullable: true, Metadata: existing("7")},
		{Name: "label", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: existing("it's old")},
		{Name: "day", Type: arrow.FixedWidthTypes.Date32, Nullable: true, Metadata: existing("2020-01-02")},
		{Name: "bad", Type: arrow.PrimitiveTypes.Int32, Nullable: true, Metadata: existing("not a number")},
	}, []string{"id"})
	e.apply(1, append([]serve.Item{schemaItem("t", v1)}, items("t", batch(t, v1, r(opI, 1, 10), r(opI, 2, 20)))...)...)
	// Entry 2: row 3 inserted before the ADD COLUMN at the source (the old shape), the column added, a row
	// with NULLs and one with values.
	entry2 := []serve.Item{{Stream: "t", Record: batch(t, v1, r(opI, 3, 30))}, schemaItem("t", v2),
		{Stream: "t", Record: batch(t, v2, r(opI, 4, 40, nil, nil, nil, nil), r(opI, 5, 50, 9, "new", nil, 3))}}
	e.apply(2, entry2...)
	check := func(after string, want map[string]map[string]any) {
		t.Helper()
		got := e.rows("t", "id")
		if len(got) != len(want) {
			t.Fatalf("after %s: rows %v, want %d", after, got, len(want))
		}
		for k, w := range want {
			for _, c := range []string{"grade", "label", "day", "bad"} {
				if g := got[k][c]; g != w[c] {
					t.Errorf("after %s: row %s column %s = %v, want %v", after, k, c, g, w[c])
				}
			}
		}
	}
	old := map[string]any{"grade": float64(7), "label": "it's old", "day": "2020-01-02"}
	check("the column was added", map[string]map[string]any{"1": old, "2": old, "3": old, "4": {}, "5": {"grade": float64(9), "label": "new", "bad": float64(3)}})
	if res := e.apply(2, entry2...); !res.Skipped {
		t.Fatal("a replay of 2 was not skipped")
	}
	e.apply(3, serve.Item{Stream: "t", Record: batch(t, v2, r(opU, 1, 11, nil, nil, nil, nil))})
	check("row 1 set to NULL", map[string]map[string]any{"1": {}, "2": old, "3": old, "4": {}, "5": {"grade": float64(9), "label": "new", "bad": float64(3)}})

	// Compaction rewrites the old files through iceberg-go's reader: the value is in the new files.
	if res, err := Compact(ctxT(t), e.raw, "t", CompactOptions{}); err != nil || res.RemovedDataFiles == 0 {
		t.Fatalf("compact: %+v, %v", res, err)
	}
	check("compaction", map[string]map[string]any{"1": {}, "2": old, "3": old, "4": {}, "5": {"grade": float64(9), "label": "new", "bad": float64(3)}})

	p, err := PlanTables(ctxT(t), e.raw, PlanOptions{Pipeline: "p1"})
	if err != nil || len(p.Tables) != 1 {
		t.Fatalf("plan: %+v, %v", p, err)
	}
	sc, err := protocol.DecodeSchema(memory.DefaultAllocator, p.Tables[0].ArrowSchema)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"grade": "7", "label": "it's old", "day": "2020-01-02"}
	for _, f := range sc.Fields() {
		v, ok := f.Metadata.GetValue(lakequery.MetaInitialDefault)
		if w, has := want[f.Name]; ok != has || v != w {
			t.Errorf("plan column %s: initial default %q (%v), want %q", f.Name, v, ok, w)
		}
	}
}

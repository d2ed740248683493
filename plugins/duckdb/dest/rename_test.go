package dest

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// TestRenameColumn: columns the source renamed (change.RenamedFromMeta), the key among them, are renamed, so
// the rows written before keep their values under the new names; rows of the old schema in the same apply
// land there too; the same changes applied again (the table already renamed) leave it as it is. Without the
// marker the table gains uid and full_name beside id and name, and the old rows have NULL there.
func TestRenameColumn(t *testing.T) {
	h := newHarness(t, "")
	renamed := change.Schema([]arrow.Field{
		change.MarkRenamed(arrow.Field{Name: "uid", Type: arrow.PrimitiveTypes.Int64}, "id"),
		change.MarkRenamed(arrow.Field{Name: "full_name", Type: arrow.BinaryTypes.String, Nullable: true}, "name"),
	}, []string{"uid"})
	h.apply(1, batch(t, userSchema, chg{change.OpInsert, 1, "ann"}, chg{change.OpInsert, 2, "bob"}, chg{change.OpInsert, 3, "cy"}))
	second := func(op4 change.Op) []serve.Item {
		return []serve.Item{
			batch(t, userSchema, chg{change.OpUpdate, 3, "cy2"}),
			{Stream: "public.users", Schema: &serve.Stream{Name: "public.users", Schema: renamed, PrimaryKey: []string{"uid"}}},
			batch(t, renamed, chg{op4, 4, "dan"}, chg{change.OpUpdate, 2, "bob2"}),
		}
	}
	check := func() {
		t.Helper()
		h.wantRows(`SELECT column_name FROM duckdb_columns() WHERE table_name = 'users' ORDER BY column_index`, "uid", "full_name")
		h.wantRows(`SELECT uid, full_name FROM users ORDER BY uid`, "1|ann", "2|bob2", "3|cy2", "4|dan")
	}
	h.apply(2, second(change.OpInsert)...)
	check()
	if res := h.apply(2, second(change.OpInsert)...); !res.Skipped {
		t.Fatal("apply 2 again is not skipped")
	}
	h.apply(3, second(change.OpUpdate)...)
	check()
	// The key still works as one: an update by the renamed key replaces the row.
	h.apply(4, batch(t, renamed, chg{change.OpUpdate, 1, "ann2"}))
	h.wantRows(`SELECT uid, full_name FROM users ORDER BY uid`, "1|ann2", "2|bob2", "3|cy2", "4|dan")
}

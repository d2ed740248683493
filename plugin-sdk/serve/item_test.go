package serve

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
)

// An item carries a table rename's marker in its schema change or in its batch's schema alike.
func TestItemRenamedFromTable(t *testing.T) {
	plain := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, []string{"id"})
	marked := change.MarkRenamedTable(plain, "shop.a")
	b := array.NewRecordBuilder(memory.DefaultAllocator, marked)
	defer b.Release()
	rec := b.NewRecordBatch()
	defer rec.Release()
	for _, tc := range []struct {
		name string
		it   Item
		want string
	}{
		{"truncate", Item{Stream: "shop.b", Truncate: true}, ""},
		{"unmarked schema", Item{Stream: "shop.b", Schema: &Stream{Schema: plain}}, ""},
		{"marked schema", Item{Stream: "shop.b", Schema: &Stream{Schema: marked}}, "shop.a"},
		{"marked batch", Item{Stream: "shop.b", Record: rec}, "shop.a"},
	} {
		if got := tc.it.RenamedFromTable(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

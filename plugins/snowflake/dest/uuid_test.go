package dest

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/extensions"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
)

// TestUUIDColumnIsBinary: the postgres source sends a uuid column as fixed_size_binary[16] marked
// arrow.uuid (an Arrow extension type); it lands in a BINARY column holding the 16 bytes, as any
// fixed_size_binary does. Before, the extension type had no mapping and the first apply of any table with a
// uuid column failed (found by test/e2e's TestTypeMatrixIntoSnowflake). On the stand-in, or live.
func TestUUIDColumnIsBinary(t *testing.T) {
	tg := newTarget(t, nil)
	st := tg.stream("public.ids")
	s := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "u", Type: extensions.NewUUIDType(), Nullable: true},
	}, []string{"id"})
	b := change.NewBuilder(mem, s)
	defer b.Release()
	u := [16]byte{0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11}
	b.Field(0).(*array.Int64Builder).Append(1)
	b.Field(1).(*extensions.UUIDBuilder).AppendBytes(u)
	b.Row(change.OpInsert, "")
	b.Field(0).(*array.Int64Builder).Append(2)
	b.Field(1).AppendNull()
	b.Row(change.OpInsert, "")
	rec := b.NewBatch()
	defer rec.Release()
	tg.apply(1, 1, item(st, 1, rec))
	got := tg.rows(TableName(st))
	// The stand-in gives PostgreSQL's bytea text (\x…), Snowflake's TO_JSON hex.
	if v, ok := got["1"]["U"].(string); !ok || strings.ToLower(strings.TrimPrefix(v, `\x`)) != "a0eebc999c0b4ef8bb6d6bb9bd380a11" {
		t.Errorf("row 1: U = %#v, want the uuid's 16 bytes", got["1"]["U"])
	}
	if v := got["2"]["U"]; v != nil {
		t.Errorf("row 2: U = %#v, want NULL", v)
	}
}

package connector

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// CatalogOf keeps the data columns only; WriteText prints key, modes and nullability; a bad schema names its stream.
func TestCatalog(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: change.OpColumn, Type: arrow.PrimitiveTypes.Int8},
	}, nil)
	ipc, err := protocol.EncodeSchema(memory.DefaultAllocator, sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		streams []Stream
		want    string
		err     string
	}{
		{"columns", []Stream{{Name: "orders", ArrowSchema: ipc, PrimaryKey: []string{"id"}, Modes: []SyncMode{ModeSnapshot, ModeCDC}}},
			"stream orders  key (id)  modes snapshot, cdc\n  id    int64  not null\n  note  utf8   null\n", ""},
		{"none", nil, "", ""},
		{"bad schema", []Stream{{Name: "broken", ArrowSchema: []byte("x")}}, "", "stream broken: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cat, err := CatalogOf(tc.streams)
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			var b strings.Builder
			if err != nil || cat.WriteText(&b) != nil || b.String() != tc.want {
				t.Fatalf("err %v, got:\n%s\nwant:\n%s", err, b.String(), tc.want)
			}
		})
	}
}

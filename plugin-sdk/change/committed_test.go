package change

import (
	"errors"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// TestCommitted: RowAt fills the commit-time column of a TimedSchema (the zero time as null), Row leaves it
// null, a schema without the column (Schema, or a WAL entry written before it) reads as unknown, and a column
// of another type is a data fault.
func TestCommitted(t *testing.T) {
	fields := []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}
	at := time.Date(2026, 3, 4, 5, 6, 7, 891000, time.UTC)
	cases := []struct {
		name   string
		schema *arrow.Schema
		want   []time.Time // zero: unknown
	}{
		{name: "timed", schema: TimedSchema(fields, []string{"id"}), want: []time.Time{at, {}, {}}},
		{name: "without the column", schema: Schema(fields, []string{"id"}), want: []time.Time{{}, {}, {}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBuilder(memory.DefaultAllocator, tc.schema)
			defer b.Release()
			for i, row := range []func(){
				func() { b.RowAt(OpInsert, "p", at) },
				func() { b.RowAt(OpUpdate, "", time.Time{}) },
				func() { b.Row(OpRead, "") },
			} {
				b.Field(0).(*array.Int64Builder).Append(int64(i))
				row()
			}
			rec := b.NewBatch()
			defer rec.Release()
			col, err := Committed(rec)
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range tc.want {
				got, ok := CommittedAt(col, i)
				if ok != !w.IsZero() || !got.Equal(w) {
					t.Errorf("row %d: %v %v, want %v", i, got, ok, w)
				}
			}
		})
	}
	t.Run("wrong type", func(t *testing.T) {
		sc := arrow.NewSchema([]arrow.Field{OpField, PosField, {Name: CommittedColumn, Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		defer b.Release()
		rec := b.NewRecordBatch()
		defer rec.Release()
		if _, err := Committed(rec); err == nil || !errors.Is(err, fault.ErrData) {
			t.Fatalf("err = %v, want a data fault", err)
		}
	})
}

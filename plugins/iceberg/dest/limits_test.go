package dest

import (
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// The list the engine checks at start is what newTableSchema really refuses, and nothing it accepts.
func TestUnsupportedTypesAreRefused(t *testing.T) {
	examples := map[string]arrow.DataType{
		"decimal256":        &arrow.Decimal256Type{Precision: 65, Scale: 30},
		"duration":          arrow.FixedWidthTypes.Duration_us,
		"month_interval":    arrow.FixedWidthTypes.MonthInterval,
		"day_time_interval": arrow.FixedWidthTypes.DayTimeInterval,
		"dense_union":       arrow.DenseUnionOf([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int32}}, []arrow.UnionTypeCode{0}),
		"sparse_union":      arrow.SparseUnionOf([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int32}}, []arrow.UnionTypeCode{0}),
		"string_view":       arrow.BinaryTypes.StringView,
		"binary_view":       arrow.BinaryTypes.BinaryView,
	}
	supported := []arrow.DataType{
		&arrow.Decimal128Type{Precision: 38, Scale: 2}, arrow.FixedWidthTypes.MonthDayNanoInterval, arrow.PrimitiveTypes.Uint64,
		arrow.FixedWidthTypes.Date64, arrow.FixedWidthTypes.Time32ms, arrow.ListOf(arrow.BinaryTypes.String),
	}
	unsupported := (&Destination{}).UnsupportedTypes()
	for _, name := range unsupported {
		dt, ok := examples[name]
		if !ok {
			t.Fatalf("no example of %s", name)
		}
		if dt.Name() != name {
			t.Fatalf("example of %s is %s", name, dt.Name())
		}
		s := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "c", Type: dt, Nullable: true}}, nil)
		if _, err := newTableSchema("t", s, []string{"id"}); err == nil {
			t.Errorf("%s is listed as unsupported but a table takes it", dt)
		}
	}
	for _, dt := range supported {
		if slices.Contains(unsupported, dt.Name()) {
			t.Errorf("%s is listed as unsupported", dt)
		}
		s := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "c", Type: dt, Nullable: true}}, nil)
		if _, err := newTableSchema("t", s, []string{"id"}); err != nil {
			t.Errorf("%s: %v", dt, err)
		}
	}
}

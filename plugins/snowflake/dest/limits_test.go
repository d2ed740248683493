package dest

import (
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

var _ serve.TypeLimits = (*Destination)(nil)

// The list the engine checks at start is what the plugin's own mapping (stageColumns, through sfsql.Of)
// really refuses, and nothing it accepts.
func TestUnsupportedTypesAreRefused(t *testing.T) {
	i32 := []arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int32}}
	examples := map[string]arrow.DataType{
		"decimal32":               &arrow.Decimal32Type{Precision: 9, Scale: 2},
		"decimal64":               &arrow.Decimal64Type{Precision: 18, Scale: 2},
		"decimal256":              &arrow.Decimal256Type{Precision: 40, Scale: 2},
		"date64":                  arrow.FixedWidthTypes.Date64,
		"duration":                arrow.FixedWidthTypes.Duration_us,
		"month_interval":          arrow.FixedWidthTypes.MonthInterval,
		"day_time_interval":       arrow.FixedWidthTypes.DayTimeInterval,
		"month_day_nano_interval": arrow.FixedWidthTypes.MonthDayNanoInterval,
		"dense_union":             arrow.DenseUnionOf(i32, []arrow.UnionTypeCode{0}),
		"sparse_union":            arrow.SparseUnionOf(i32, []arrow.UnionTypeCode{0}),
		"list_view":               arrow.ListViewOf(arrow.PrimitiveTypes.Int32),
		"large_list_view":         arrow.LargeListViewOf(arrow.PrimitiveTypes.Int32),
		"run_end_encoded":         arrow.RunEndEncodedOf(arrow.PrimitiveTypes.Int32, arrow.BinaryTypes.String),
	}
	supported := []arrow.DataType{
		&arrow.Decimal128Type{Precision: 38, Scale: 2}, arrow.PrimitiveTypes.Uint64, arrow.FixedWidthTypes.Date32,
		arrow.FixedWidthTypes.Time32ms, arrow.ListOf(arrow.BinaryTypes.String), arrow.BinaryTypes.StringView,
		arrow.StructOf(i32...), arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int32),
	}
	schema := func(dt arrow.DataType) *arrow.Schema {
		return change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "c", Type: dt, Nullable: true}}, []string{"id"})
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
		if _, err := stageColumns(schema(dt)); err == nil {
			t.Errorf("%s is listed as unsupported but the plugin maps it", dt)
		}
	}
	for _, dt := range supported {
		if slices.Contains(unsupported, dt.Name()) {
			t.Errorf("%s is listed as unsupported", dt)
		}
		if _, err := stageColumns(schema(dt)); err != nil {
			t.Errorf("%s: %v", dt, err)
		}
	}
}

package dest

import (
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

// The list the engine checks at start is what ducksql.Type really refuses, and nothing it maps.
func TestUnsupportedTypesAreRefused(t *testing.T) {
	i32 := arrow.PrimitiveTypes.Int32
	examples := map[string]arrow.DataType{
		"dense_union":     arrow.DenseUnionOf([]arrow.Field{{Name: "a", Type: i32}}, []arrow.UnionTypeCode{0}),
		"sparse_union":    arrow.SparseUnionOf([]arrow.Field{{Name: "a", Type: i32}}, []arrow.UnionTypeCode{0}),
		"run_end_encoded": arrow.RunEndEncodedOf(i32, arrow.BinaryTypes.String),
	}
	supported := []arrow.DataType{
		&arrow.Decimal256Type{Precision: 65, Scale: 30}, arrow.FixedWidthTypes.Duration_us, arrow.FixedWidthTypes.MonthDayNanoInterval,
		arrow.ListOf(arrow.ListOf(i32)), arrow.ListViewOf(i32), arrow.MapOf(arrow.BinaryTypes.String, i32),
	}
	unsupported := (&Destination{}).UnsupportedTypes()
	for _, name := range unsupported {
		dt, ok := examples[name]
		if !ok || dt.Name() != name {
			t.Fatalf("no example of %s", name)
		}
		if ct, err := ducksql.Type(dt); err == nil {
			t.Errorf("%s is listed as unsupported but maps to %s", dt, ct)
		}
	}
	for _, dt := range supported {
		if slices.Contains(unsupported, dt.Name()) {
			t.Errorf("%s is listed as unsupported", dt)
		}
		if _, err := ducksql.Type(dt); err != nil {
			t.Errorf("%s: %v", dt, err)
		}
	}
}

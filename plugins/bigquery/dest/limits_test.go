package dest

import (
	"errors"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/bigquery/rows"
)

var _ serve.TypeLimits = (*Destination)(nil)

// The list the engine checks at start is what the plugin's own encoder really refuses, and nothing it takes.
func TestUnsupportedTypesAreRefused(t *testing.T) {
	i32 := []arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int32}}
	examples := map[string]arrow.DataType{
		"dense_union":     arrow.DenseUnionOf(i32, []arrow.UnionTypeCode{0}),
		"sparse_union":    arrow.SparseUnionOf(i32, []arrow.UnionTypeCode{0}),
		"run_end_encoded": arrow.RunEndEncodedOf(arrow.PrimitiveTypes.Int32, arrow.BinaryTypes.String),
	}
	supported := []arrow.DataType{
		&arrow.Decimal128Type{Precision: 38, Scale: 2}, &arrow.Decimal256Type{Precision: 76, Scale: 10}, arrow.PrimitiveTypes.Uint64,
		arrow.FixedWidthTypes.Date64, arrow.FixedWidthTypes.Duration_us, arrow.FixedWidthTypes.MonthDayNanoInterval,
		arrow.ListOf(arrow.BinaryTypes.String), arrow.BinaryTypes.StringView, arrow.Null,
		arrow.StructOf(i32...), arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int32),
	}
	encode := func(dt arrow.DataType) error {
		s := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "c", Type: dt, Nullable: true}}, nil)
		_, err := rows.NewEncoder(s, []int{0, 1})
		return err
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
		// Inside a struct too: the engine counts the type at any depth.
		for _, in := range []arrow.DataType{dt, arrow.StructOf(arrow.Field{Name: "x", Type: dt, Nullable: true})} {
			if err := encode(in); !errors.Is(err, fault.ErrData) {
				t.Errorf("%s is listed as unsupported but the plugin takes it (err %v)", in, err)
			}
		}
	}
	for _, dt := range supported {
		if slices.Contains(unsupported, dt.Name()) {
			t.Errorf("%s is listed as unsupported", dt)
		}
		if err := encode(dt); err != nil {
			t.Errorf("%s: %v", dt, err)
		}
	}
}

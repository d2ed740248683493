package precheck

import (
	"errors"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

func TestUnsupported(t *testing.T) {
	dec := &arrow.Decimal256Type{Precision: 65, Scale: 30}
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "amount", Type: dec},
		{Name: "amounts", Type: arrow.ListOf(dec)},
		{Name: "nested", Type: arrow.StructOf(arrow.Field{Name: "a", Type: arrow.BinaryTypes.String}, arrow.Field{Name: "b", Type: dec})},
		{Name: "by_name", Type: arrow.MapOf(arrow.BinaryTypes.String, dec)},
		{Name: "dict", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: dec}},
		{Name: "fine", Type: arrow.StructOf(arrow.Field{Name: "x", Type: &arrow.Decimal128Type{Precision: 10, Scale: 2}})},
		{Name: "span", Type: arrow.FixedWidthTypes.Duration_us},
	}, nil)
	for _, tc := range []struct {
		name  string
		types []string
		want  []string
	}{
		{"none", nil, nil},
		{"decimal256 at any depth", []string{"decimal256"}, []string{"amount", "amounts", "nested", "by_name", "dict"}},
		{"a top-level type", []string{"duration"}, []string{"span"}},
		{"a nested container", []string{"struct"}, []string{"nested", "fine"}},
		{"absent", []string{"dense_union"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range Unsupported(schema, tc.types) {
				got = append(got, c.Column)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("columns %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRefusalClassAndFix(t *testing.T) {
	err := refuse(fault.Config, "destination lake cannot hold table t, column c: type decimal256(65, 30)", "change the column's type")
	if !errors.Is(err, ErrRefused) || !errors.Is(err, fault.ErrConfig) || fault.FixOf(err) != "change the column's type" {
		t.Fatalf("refusal %v: refused %v, config %v, fix %q", err, errors.Is(err, ErrRefused), errors.Is(err, fault.ErrConfig), fault.FixOf(err))
	}
}

package protocol

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

// TestSchemaIDsFollowsTheSchema: the cache answers SchemaID of the schema it is given, per stream, also when
// a stream's schema changes to another one and back.
func TestSchemaIDsFollowsTheSchema(t *testing.T) {
	a := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: arrow.BinaryTypes.String}}, nil)
	aAgain := arrow.NewSchema(a.Fields(), nil) // equal to a, another pointer
	if SchemaID(a) == SchemaID(b) {
		t.Fatal("two different schemas have one id: the test would prove nothing")
	}
	var ids SchemaIDs
	for i, step := range []struct {
		stream string
		schema *arrow.Schema
	}{
		{"s1", a}, {"s1", a}, {"s2", b}, {"s1", b}, {"s1", b}, {"s2", a}, {"s1", aAgain}, {"s1", a}, {"s2", a},
	} {
		if got, want := ids.ID(step.stream, step.schema), SchemaID(step.schema); got != want {
			t.Fatalf("step %d: stream %s: id %s, want %s", i, step.stream, got, want)
		}
	}
}

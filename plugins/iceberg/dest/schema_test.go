package dest

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

func TestPlanEvolution(t *testing.T) {
	f := func(name string, typ arrow.DataType, nullable bool) arrow.Field {
		return arrow.Field{Name: name, Type: typ, Nullable: nullable}
	}
	base := []arrow.Field{
		f("id", arrow.PrimitiveTypes.Int64, false),
		f("n", arrow.PrimitiveTypes.Int32, true),
		f("x", arrow.PrimitiveTypes.Float32, true),
		f("amount", &arrow.Decimal128Type{Precision: 10, Scale: 2}, true),
		f("name", arrow.BinaryTypes.String, false),
		f("s", arrow.StructOf(f("a", arrow.BinaryTypes.String, true)), true),
		f("l", arrow.ListOf(arrow.StructOf(f("sku", arrow.BinaryTypes.String, true))), true),
		f("ts", &arrow.TimestampType{Unit: arrow.Microsecond}, true),
	}
	cur, err := newTableSchema("t", change.Schema(base, []string{"id"}), []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	with := func(i int, fl arrow.Field) []arrow.Field {
		out := append([]arrow.Field{}, base...)
		if i < 0 {
			return append(out, fl)
		}
		out[i] = fl
		return out
	}
	without := func(i int) []arrow.Field {
		return append(append([]arrow.Field{}, base[:i]...), base[i+1:]...)
	}
	cases := []struct {
		name    string
		fields  []arrow.Field
		want    []string // schemaChange.String()
		wantErr string   // substring; the column and both types
	}{
		{name: "same", fields: base},
		{name: "new top-level column", fields: with(-1, f("email", arrow.BinaryTypes.String, true)), want: []string{"add email string"}},
		{name: "new nested field", fields: with(5, f("s", arrow.StructOf(f("a", arrow.BinaryTypes.String, true), f("b", arrow.PrimitiveTypes.Int64, true)), true)), want: []string{"add s.b long"}},
		{name: "new field in list element struct", fields: with(6, f("l", arrow.ListOf(arrow.StructOf(f("sku", arrow.BinaryTypes.String, true), f("price", arrow.PrimitiveTypes.Float64, true))), true)), want: []string{"add l.element.price double"}},
		{name: "int to long", fields: with(1, f("n", arrow.PrimitiveTypes.Int64, true)), want: []string{"widen n int -> long"}},
		{name: "float to double", fields: with(2, f("x", arrow.PrimitiveTypes.Float64, true)), want: []string{"widen x float -> double"}},
		{name: "decimal precision", fields: with(3, f("amount", &arrow.Decimal128Type{Precision: 18, Scale: 2}, true)), want: []string{"widen amount decimal(10, 2) -> decimal(18, 2)"}},
		{name: "required becomes nullable", fields: with(4, f("name", arrow.BinaryTypes.String, true)), want: []string{"make name optional"}},
		{name: "required column dropped", fields: without(4), want: []string{"make name optional"}},
		{name: "nullable key stays required", fields: with(0, f("id", arrow.PrimitiveTypes.Int64, true))},
		{name: "narrower data is cast up", fields: with(1, f("n", arrow.PrimitiveTypes.Int16, true))},
		{name: "long to string", fields: with(0, f("id", arrow.BinaryTypes.String, false)), wantErr: "column id cannot change from long to string"},
		{name: "string to int", fields: with(4, f("name", arrow.PrimitiveTypes.Int32, false)), wantErr: "column name cannot change from string to int"},
		{name: "decimal scale", fields: with(3, f("amount", &arrow.Decimal128Type{Precision: 12, Scale: 4}, true)), wantErr: "column amount cannot change from decimal(10, 2) to decimal(12, 4)"},
		{name: "int to double", fields: with(1, f("n", arrow.PrimitiveTypes.Float64, true)), wantErr: "column n cannot change from int to double"},
		{name: "timestamp gains a zone", fields: with(7, f("ts", &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "Europe/Paris"}, true)), wantErr: "column ts cannot change from timestamp to timestamptz"},
		{name: "timestamp unit changes", fields: with(7, f("ts", &arrow.TimestampType{Unit: arrow.Nanosecond}, true))},
		{name: "struct to string", fields: with(5, f("s", arrow.BinaryTypes.String, true)), wantErr: "column s cannot change from struct"},
		{name: "nested narrowing error names the path", fields: with(6, f("l", arrow.ListOf(arrow.StructOf(f("sku", arrow.PrimitiveTypes.Int64, true))), true)), wantErr: "column l.element.sku cannot change from string to long"},
		{name: "key dropped", fields: without(0), wantErr: "primary key column id is missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			changes, err := planEvolution("ns.t", cur, change.Schema(tc.fields, []string{"id"}), []string{"id"})
			if tc.wantErr != "" {
				var ise *IncompatibleSchemaError
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(tc.wantErr, "cannot change") && !errors.As(err, &ise) {
					t.Fatalf("err %T is not an IncompatibleSchemaError", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range changes {
				got = append(got, c.String())
			}
			if strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
				t.Fatalf("changes %q, want %q", got, tc.want)
			}
		})
	}
}

// A stream's schema grows mid-stream: the table follows and the old rows read back with nulls in new columns.
func TestSchemaEvolutionMidStream(t *testing.T) {
	e := newEnv(t, nil)
	v1 := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "n", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "name", Type: arrow.BinaryTypes.String},
		{Name: "address", Type: arrow.StructOf(arrow.Field{Name: "city", Type: arrow.BinaryTypes.String, Nullable: true}), Nullable: true},
	}, []string{"id"})
	v2 := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "address", Type: arrow.StructOf(
			arrow.Field{Name: "city", Type: arrow.BinaryTypes.String, Nullable: true},
			arrow.Field{Name: "zip", Type: arrow.BinaryTypes.String, Nullable: true},
		), Nullable: true},
		{Name: "email", Type: arrow.BinaryTypes.String, Nullable: true},
	}, []string{"id"})
	e.apply(1, append([]serve.Item{schemaItem("users", v1)}, items("users", batch(t, v1,
		r(opI, 1, 10, "a", map[string]any{"city": "x"}),
		r(opI, 2, 20, "b", nil),
		r(opI, 3, 30, "c", map[string]any{"city": "y"})))...)...)
	e.check("users", "users", "id")

	// Apply 2: a batch in the old schema, then the schema change, then rows using it, one of them with a
	// value only a long holds.
	e.apply(2,
		serve.Item{Stream: "users", Record: batch(t, v1, r(opU, 3, 31, "c2", map[string]any{"city": "z"}))},
		schemaItem("users", v2),
		serve.Item{Stream: "users", Record: batch(t, v2,
			r(opU, 1, 1<<40, nil, map[string]any{"city": "x", "zip": "123"}, "a@x"),
			r(opI, 4, 40, "d", map[string]any{"city": nil, "zip": "9"}, nil),
			r(opD, 2, nil, nil, nil, nil))})
	e.check("users", "users", "id")

	sch := e.table("users").Schema()
	for _, c := range []struct {
		col      string
		typ      iceberg.Type
		required bool
	}{
		{"n", iceberg.PrimitiveTypes.Int64, false},
		{"name", iceberg.PrimitiveTypes.String, false},
		{"email", iceberg.PrimitiveTypes.String, false},
		{"address.zip", iceberg.PrimitiveTypes.String, false},
		{"id", iceberg.PrimitiveTypes.Int64, true},
	} {
		fld, ok := sch.FindFieldByName(c.col)
		if !ok || !fld.Type.Equals(c.typ) || fld.Required != c.required {
			t.Errorf("column %s: %+v (found %v), want %s required=%v", c.col, fld, ok, c.typ, c.required)
		}
	}
	// A batch still in the old schema after the change is written into the new one.
	e.apply(3, items("users", batch(t, v1, r(opU, 4, 41, "d2", map[string]any{"city": "q"})))...)
	e.check("users", "users", "id")
}

// A table that exists with a schema the stream cannot be written into fails with the column and both types.
func TestIncompatibleExistingTable(t *testing.T) {
	e := newEnv(t, nil)
	old := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, []string{"id"})
	e.apply(1, items("users", batch(t, old, r(opI, 1, 5)))...)
	_, err := e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: 2,
		Items: items("users", batch(t, usersSchema(), user(opI, 2, "b")))})
	var ise *IncompatibleSchemaError
	if !errors.As(err, &ise) || ise.Column != "name" || ise.Old != "long" || ise.New != "string" {
		t.Fatalf("err = %v, want an IncompatibleSchemaError for column name long -> string", err)
	}
	if !errors.Is(err, fault.ErrData) || fault.FixOf(err) == "" {
		t.Fatalf("err = %v, want a Data fault with a fix", err)
	}
	if !strings.Contains(err.Error(), "apply 2") || !strings.Contains(err.Error(), "lake.users") {
		t.Fatalf("error %q does not name the apply and the table", err)
	}
	// A stream whose key differs from the table's identifier fields is refused too.
	other := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.PrimitiveTypes.Int64},
	}, []string{"name"})
	_, err = e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: 2,
		Items: items("users", batch(t, other, r(opU, 1, 6)))})
	if !errors.Is(err, fault.ErrData) || !strings.Contains(err.Error(), "primary key (name) differs from the table's identifier fields (id)") {
		t.Fatalf("err = %v, want a key mismatch", err)
	}
	if a := e.lastApplied(); a.Sequence != 1 {
		t.Fatalf("failed applies moved LastApplied to %d", a.Sequence)
	}
}

// Source types without an exact Iceberg twin land in the type that holds every value, and read back equal.
// fieldIDs are the ids in an Iceberg type's text, which the catalog assigns.
var fieldIDs = regexp.MustCompile(`\d+: `)

func TestSourceTypesMapLosslessly(t *testing.T) {
	e := newEnv(t, nil)
	sc := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "u32", Type: arrow.PrimitiveTypes.Uint32, Nullable: true},
		{Name: "u64", Type: arrow.PrimitiveTypes.Uint64, Nullable: true},
		{Name: "d64", Type: arrow.FixedWidthTypes.Date64, Nullable: true},
		{Name: "t32", Type: arrow.FixedWidthTypes.Time32ms, Nullable: true},
		{Name: "ns", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "America/New_York"}, Nullable: true},
		{Name: "ls", Type: arrow.BinaryTypes.LargeString, Nullable: true},
		{Name: "m", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64), Nullable: true},
		{Name: "iv", Type: arrow.FixedWidthTypes.MonthDayNanoInterval, Nullable: true},
		{Name: "ivs", Type: arrow.ListOf(arrow.FixedWidthTypes.MonthDayNanoInterval), Nullable: true},
	}, []string{"id"})
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(1)
	b.Field(1).(*array.Uint32Builder).Append(math.MaxUint32)
	b.Field(2).(*array.Uint64Builder).Append(math.MaxUint64)
	b.Field(3).(*array.Date64Builder).Append(arrow.Date64(86400000 * 3))
	b.Field(4).(*array.Time32Builder).Append(arrow.Time32(45_296_789))
	b.Field(5).(*array.TimestampBuilder).Append(arrow.Timestamp(1_700_000_000_123_456_789))
	b.Field(6).(*array.LargeStringBuilder).Append("large")
	mb := b.Field(7).(*array.MapBuilder)
	mb.Append(true)
	mb.KeyBuilder().(*array.StringBuilder).Append("k")
	mb.ItemBuilder().(*array.Int64Builder).Append(7)
	b.Field(8).(*array.MonthDayNanoIntervalBuilder).Append(arrow.MonthDayNanoInterval{Months: -14, Days: 3, Nanoseconds: -1000})
	lb := b.Field(9).(*array.ListBuilder)
	lb.Append(true)
	lb.ValueBuilder().(*array.MonthDayNanoIntervalBuilder).Append(arrow.MonthDayNanoInterval{Months: 1})
	lb.ValueBuilder().AppendNull()
	b.Row(opI, "")
	rec := b.NewBatch()
	defer rec.Release()
	e.apply(1, serve.Item{Stream: "types", Record: rec})
	got := e.rows("types", "id")["1"]
	want := map[string]any{
		"id": 1.0, "u32": float64(math.MaxUint32), "u64": "18446744073709551615", "d64": "1970-01-04",
		"t32": "12:34:56.789", "ns": "2023-11-14T22:13:20.123456Z", "ls": "large",
		"m":   []any{map[string]any{"key": "k", "value": 7.0}},
		"iv":  map[string]any{"months": -14.0, "days": 3.0, "nanoseconds": -1000.0},
		"ivs": []any{map[string]any{"months": 1.0, "days": 0.0, "nanoseconds": 0.0}, nil},
	}
	for k, w := range want {
		if !reflect.DeepEqual(got[k], w) {
			t.Errorf("%s: got %#v, want %#v", k, got[k], w)
		}
	}
	sch := e.table("types").Schema()
	for col, typ := range map[string]string{"u32": "long", "u64": "decimal(20, 0)", "d64": "date", "t32": "time", "ns": "timestamptz",
		"iv": "struct<months: required int, days: required int, nanoseconds: required long>"} {
		if f, ok := sch.FindFieldByName(col); !ok || fieldIDs.ReplaceAllString(f.Type.String(), "") != typ {
			t.Errorf("column %s is %v, want %s", col, f.Type, typ)
		}
	}
}

// Two schema changes in one apply (ADD COLUMN a1; INSERT; ADD COLUMN a2 with a widened column; INSERT, within one
// group commit) evolve the table in one step: no other writer exists, so the commit must not fail on its own
// schema assertions.
func TestTwoSchemaChangesInOneApply(t *testing.T) {
	e := newEnv(t, nil)
	id := arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64}
	v1 := change.Schema([]arrow.Field{id, {Name: "n", Type: arrow.PrimitiveTypes.Int32, Nullable: true}}, []string{"id"})
	v2 := change.Schema([]arrow.Field{id, {Name: "n", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "a1", Type: arrow.BinaryTypes.String, Nullable: true}}, []string{"id"})
	v3 := change.Schema([]arrow.Field{id, {Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "a1", Type: arrow.BinaryTypes.String, Nullable: true}, {Name: "a2", Type: arrow.PrimitiveTypes.Float64, Nullable: true}}, []string{"id"})
	e.apply(1, append([]serve.Item{schemaItem("t", v1)}, items("t", batch(t, v1, r(opI, 1, 10)))...)...)
	e.apply(2,
		schemaItem("t", v2),
		serve.Item{Stream: "t", Record: batch(t, v2, r(opI, 2, 20, "x"))},
		schemaItem("t", v3),
		serve.Item{Stream: "t", Record: batch(t, v3, r(opI, 3, 1<<40, "y", 1.5), r(opU, 1, 11, nil, 2.5))})
	e.check("t", "t", "id")
	sch := e.table("t").Schema()
	for col, typ := range map[string]iceberg.Type{"n": iceberg.PrimitiveTypes.Int64, "a1": iceberg.PrimitiveTypes.String, "a2": iceberg.PrimitiveTypes.Float64} {
		if f, ok := sch.FindFieldByName(col); !ok || !f.Type.Equals(typ) {
			t.Errorf("column %s: %+v (found %v), want %s", col, f, ok, typ)
		}
	}
	// The next apply starts from the evolved table as any other.
	e.apply(3, items("t", batch(t, v3, r(opI, 4, 40, "z", 4.5)))...)
	e.check("t", "t", "id")
}

// A column added with a value its existing rows hold at the source (ADD COLUMN … DEFAULT x) that does not
// convert to the column's type: on a v2 table (which otherwise rewrites the old rows with it, fill.go) the old
// rows keep NULL and the log says so, naming the column and the value.
func TestAddedColumnWithExistingRowsValueIsLogged(t *testing.T) {
	e := newEnv(t, nil)
	var logs bytes.Buffer
	e.d.Log = slog.New(slog.NewTextHandler(&logs, nil))
	id := arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64}
	v1 := change.Schema([]arrow.Field{id}, []string{"id"})
	md := arrow.NewMetadata([]string{values.MetaExistingRows}, []string{"not a number"})
	v2 := change.Schema([]arrow.Field{id, {Name: "n", Type: arrow.PrimitiveTypes.Int32, Nullable: true, Metadata: md},
		{Name: "plain", Type: arrow.PrimitiveTypes.Int32, Nullable: true}}, []string{"id"})
	e.apply(1, items("t", batch(t, v1, r(opI, 1)))...)
	e.apply(2, items("t", batch(t, v2, r(opI, 2, 7, nil)))...)
	e.check("t", "t", "id")
	if !strings.Contains(logs.String(), "does not convert to the column's type") ||
		!strings.Contains(logs.String(), `column=n type=int value_at_source="not a number"`) || strings.Contains(logs.String(), "column=plain") {
		t.Errorf("log does not name column n and its value (only):\n%s", logs.String())
	}
}

// Changes under a column the same update adds are folded into its type: iceberg-go finds parents only in the
// table's schema, so a struct added by one schema of a coalesced apply and extended by the next would fail.
func TestFoldIntoPendingAdds(t *testing.T) {
	str := iceberg.PrimitiveTypes.String
	long := iceberg.PrimitiveTypes.Int64
	address := &iceberg.StructType{FieldList: []iceberg.NestedField{{Name: "city", Type: str}}}
	inner := &iceberg.StructType{FieldList: []iceberg.NestedField{{Name: "n", Type: iceberg.PrimitiveTypes.Int32, Required: true}}}
	nested := &iceberg.StructType{FieldList: []iceberg.NestedField{{Name: "in", Type: inner}}}
	tests := []struct {
		name string
		in   []schemaChange
		want string
	}{
		{"a field of an added struct",
			[]schemaChange{{kind: addColumn, path: []string{"address"}, typ: address}, {kind: addColumn, path: []string{"address", "zip"}, typ: long}, {kind: addColumn, path: []string{"tags"}, typ: str}},
			"add address struct<0: city: optional string, 0: zip: optional long>, add tags string"},
		{"promotion and optional deep inside an added struct",
			[]schemaChange{{kind: addColumn, path: []string{"x"}, typ: nested}, {kind: promoteColumn, path: []string{"x", "in", "n"}, typ: long}, {kind: makeOptional, path: []string{"x", "in", "n"}}},
			"add x struct<0: in: optional struct<0: n: optional long>>"},
		{"a field of an existing struct stays its own change",
			[]schemaChange{{kind: addColumn, path: []string{"address", "zip"}, typ: long}},
			"add address.zip long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := describe(foldIntoPendingAdds(tt.in)); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

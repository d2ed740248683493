package dest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

// Each Arrow type lands in its DuckDB column type and a value survives the trip: the value goes in as Arrow
// JSON, comes back as DuckDB's text form of the column, and typeof names the column type ColumnType chose.
func TestTypesRoundTrip(t *testing.T) {
	jsonType, err := extensions.NewJSONType(arrow.BinaryTypes.String)
	if err != nil {
		t.Fatal(err)
	}
	nyc := &arrow.TimestampType{Unit: arrow.Second, TimeZone: "America/New_York"}
	for _, tc := range []struct {
		name     string
		dt       arrow.DataType
		value    string // Arrow JSON
		wantType string
		wantText string
	}{
		{"int8", arrow.PrimitiveTypes.Int8, `-5`, "TINYINT", "-5"},
		{"int16", arrow.PrimitiveTypes.Int16, `-300`, "SMALLINT", "-300"},
		{"int32", arrow.PrimitiveTypes.Int32, `70000`, "INTEGER", "70000"},
		{"int64", arrow.PrimitiveTypes.Int64, `9007199254740993`, "BIGINT", "9007199254740993"},
		{"uint8", arrow.PrimitiveTypes.Uint8, `255`, "UTINYINT", "255"},
		{"uint16", arrow.PrimitiveTypes.Uint16, `65535`, "USMALLINT", "65535"},
		{"uint32", arrow.PrimitiveTypes.Uint32, `4294967295`, "UINTEGER", "4294967295"},
		{"uint64", arrow.PrimitiveTypes.Uint64, `18446744073709551615`, "UBIGINT", "18446744073709551615"},
		{"float16", arrow.FixedWidthTypes.Float16, `1.5`, "FLOAT", "1.5"},
		{"float32", arrow.PrimitiveTypes.Float32, `0.25`, "FLOAT", "0.25"},
		{"float64", arrow.PrimitiveTypes.Float64, `-3.5e-7`, "DOUBLE", "-3.5e-07"},
		{"decimal64", &arrow.Decimal64Type{Precision: 18, Scale: 3}, `"-123456789012345.678"`, "DECIMAL(18,3)", "-123456789012345.678"},
		{"decimal128", &arrow.Decimal128Type{Precision: 10, Scale: 2}, `"12345678.91"`, "DECIMAL(10,2)", "12345678.91"},
		{"decimal128 wide", &arrow.Decimal128Type{Precision: 38, Scale: 10}, `"1234567890123456789012345678.0123456789"`, "DECIMAL(38,10)", "1234567890123456789012345678.0123456789"},
		{"decimal256 wider than DuckDB", &arrow.Decimal256Type{Precision: 50, Scale: 5}, `"123456789012345678901234567890123456789012345.67891"`, "VARCHAR", "123456789012345678901234567890123456789012345.67891"},
		{"string", arrow.BinaryTypes.String, `"héllo 'q' \"dq\""`, "VARCHAR", `héllo 'q' "dq"`},
		{"large string", arrow.BinaryTypes.LargeString, `"big"`, "VARCHAR", "big"},
		{"binary", arrow.BinaryTypes.Binary, `"AKr/"`, "BLOB", `\x00\xAA\xFF`},
		{"fixed size binary", &arrow.FixedSizeBinaryType{ByteWidth: 2}, `"AAE="`, "BLOB", `\x00\x01`},
		{"bool", arrow.FixedWidthTypes.Boolean, `true`, "BOOLEAN", "true"},
		{"date32", arrow.FixedWidthTypes.Date32, `"2026-01-02"`, "DATE", "2026-01-02"},
		{"date64", arrow.FixedWidthTypes.Date64, `"1969-12-31"`, "DATE", "1969-12-31"},
		{"time32 ms", arrow.FixedWidthTypes.Time32ms, `"12:34:56.789"`, "TIME", "12:34:56.789"},
		{"time64 us", arrow.FixedWidthTypes.Time64us, `"23:59:59.999999"`, "TIME", "23:59:59.999999"},
		{"time64 ns truncates to us", arrow.FixedWidthTypes.Time64ns, `"01:02:03.123456789"`, "TIME", "01:02:03.123456"},
		{"timestamp us", &arrow.TimestampType{Unit: arrow.Microsecond}, `"2026-03-04 05:06:07.123456"`, "TIMESTAMP", "2026-03-04 05:06:07.123456"},
		{"timestamp ns", &arrow.TimestampType{Unit: arrow.Nanosecond}, `"2026-03-04 05:06:07.123456789"`, "TIMESTAMP_NS", "2026-03-04 05:06:07.123456789"},
		{"timestamp ms utc", &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}, `"2026-03-04 05:06:07.123Z"`, "TIMESTAMP WITH TIME ZONE", "2026-03-04 05:06:07.123+00"},
		{"timestamp s in a zone keeps the instant", nyc, `"2026-07-01 12:00:00-04:00"`, "TIMESTAMP WITH TIME ZONE", "2026-07-01 16:00:00+00"},
		{"duration ms", &arrow.DurationType{Unit: arrow.Millisecond}, `90061001`, "INTERVAL", "25:01:01.001"},
		{"month day nano", arrow.FixedWidthTypes.MonthDayNanoInterval, `{"months": 14, "days": 3, "nanoseconds": 5000}`, "INTERVAL", "1 year 2 months 3 days 00:00:00.000005"},
		{"list", arrow.ListOf(arrow.PrimitiveTypes.Int64), `[1, null, 3]`, "BIGINT[]", "[1, NULL, 3]"},
		{"empty list", arrow.ListOf(arrow.BinaryTypes.String), `[]`, "VARCHAR[]", "[]"},
		{"fixed size list", arrow.FixedSizeListOf(2, arrow.PrimitiveTypes.Float32), `[1.5, 2]`, "FLOAT[]", "[1.5, 2.0]"},
		{"struct", arrow.StructOf(arrow.Field{Name: "a b", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, arrow.Field{Name: "c", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true}),
			`{"a b": 1, "c": ["x"]}`, `STRUCT("a b" INTEGER, c VARCHAR[])`, `{'a b': 1, 'c': [x]}`},
		{"map", arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int32), `[{"key": "k", "value": 1}]`, "MAP(VARCHAR, INTEGER)", "{k=1}"},
		{"json extension", jsonType, `"{\"a\": [1, 2]}"`, "VARCHAR", `{"a": [1, 2]}`},
		{"uuid extension", extensions.NewUUIDType(), `"6ba7b810-9dad-11d1-80b4-00c04fd430c8"`, "BLOB", `k\xA7\xB8\x10\x9D\xAD\x11\xD1\x80\xB4\x00\xC0O\xD40\xC8`},
		{"null", arrow.Null, `null`, "VARCHAR", "NULL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "")
			sc := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: tc.dt, Nullable: true}}, []string{"id"})
			rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, sc, strings.NewReader(fmt.Sprintf(`[{"id": 1, "v": %s, "_skippr_op": 1}]`, tc.value)))
			if err != nil {
				t.Fatalf("arrow JSON %s: %v", tc.value, err)
			}
			defer rec.Release()
			h.apply(1, serve.Item{Stream: "s", Record: rec})
			h.rows(`SET TimeZone = 'UTC'`)
			h.wantRows(`SELECT typeof(v), coalesce(v::VARCHAR, 'NULL') FROM s`, tc.wantType+"|"+tc.wantText)
		})
	}
}

func TestColumnTypeRefusals(t *testing.T) {
	for _, tc := range []struct {
		dt   arrow.DataType
		want string
	}{
		{arrow.StructOf(), "no empty STRUCT"},
		{arrow.RunEndEncodedOf(arrow.PrimitiveTypes.Int32, arrow.BinaryTypes.String), "has no DuckDB mapping"},
		{arrow.ListOf(arrow.StructOf()), "no empty STRUCT"},
	} {
		if got, err := ducksql.Type(tc.dt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ducksql.Type(%s) = %q, %v; want an error containing %q", tc.dt, got, err, tc.want)
		}
	}
}

// A dictionary-encoded column lands as its values.
func TestDictionaryColumn(t *testing.T) {
	h := newHarness(t, "")
	dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}
	sc := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: dt, Nullable: true}}, []string{"id"})
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i, v := range []string{"red", "blue", "red"} {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		if err := b.Field(1).(*array.BinaryDictionaryBuilder).AppendString(v); err != nil {
			t.Fatal(err)
		}
		b.Row(change.OpInsert, "")
	}
	rec := b.NewBatch()
	defer rec.Release()
	h.apply(1, serve.Item{Stream: "s", Record: rec})
	h.wantRows(`SELECT typeof(v), v FROM s ORDER BY id`, "VARCHAR|red", "VARCHAR|blue", "VARCHAR|red")
}

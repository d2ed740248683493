package dest

import (
	"fmt"
	"math/big"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/duckdb/duckdb-go/v2"

	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

var midnight = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)

// appenderless is a DuckDB expression for row i of a when the appender cannot take it, else "": ±infinity in a
// top-level timestamp[us] or date32 (carried as plugin-sdk/values names it), and timestamps in the years the
// appender refuses (it takes a time.Time and stops at 294246, while DuckDB's TIMESTAMP goes on to
// 294247-01-10). DuckDB's infinities are those very values, so the expressions are exact.
func appenderless(a arrow.Array, i int) string {
	if a.IsNull(i) {
		return ""
	}
	switch a := a.(type) {
	case *array.Timestamp:
		tt := a.DataType().(*arrow.TimestampType)
		if tt.Unit != arrow.Microsecond {
			return ""
		}
		v := a.Value(i)
		switch {
		case v == values.TimestampInfinity:
			return "'infinity'"
		case v == values.TimestampNegInfinity:
			return "'-infinity'"
		case v > appenderMaxMicros || v < appenderMinMicros:
			if tt.TimeZone != "" {
				// As UTC text: a cast from TIMESTAMP would read it in the session's zone, and ICU's
				// arithmetic overflows there.
				return ducksql.Literal(time.UnixMicro(int64(v)).UTC().Format("2006-01-02 15:04:05.999999")+"+00") + "::TIMESTAMPTZ"
			}
			return fmt.Sprintf("make_timestamp(%d)", int64(v))
		}
	case *array.Date32:
		switch a.Value(i) {
		case values.DateInfinity:
			return "'infinity'"
		case values.DateNegInfinity:
			return "'-infinity'"
		}
	}
	return ""
}

// The appender's range for TIMESTAMP values: years -290307 to 294246.
var (
	appenderMaxMicros = arrow.Timestamp(time.Date(294247, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro() - 1)
	appenderMinMicros = arrow.Timestamp(time.Date(-290307, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
)

// Value returns row i of a as the Go value the DuckDB appender takes for ducksql.Type(a.DataType()): nil for
// null, []any for lists, map[string]any for structs, duckdb.OrderedMap for maps.
func Value(a arrow.Array, i int) (any, error) {
	if a.IsNull(i) {
		return nil, nil
	}
	switch a := a.(type) {
	case *array.Null:
		return nil, nil
	case *array.Boolean:
		return a.Value(i), nil
	case *array.Int8:
		return a.Value(i), nil
	case *array.Int16:
		return a.Value(i), nil
	case *array.Int32:
		return a.Value(i), nil
	case *array.Int64:
		return a.Value(i), nil
	case *array.Uint8:
		return a.Value(i), nil
	case *array.Uint16:
		return a.Value(i), nil
	case *array.Uint32:
		return a.Value(i), nil
	case *array.Uint64:
		return a.Value(i), nil
	case *array.Float16:
		return a.Value(i).Float32(), nil
	case *array.Float32:
		return a.Value(i), nil
	case *array.Float64:
		return a.Value(i), nil
	case *array.Decimal32:
		t := a.DataType().(*arrow.Decimal32Type)
		return decimal(t.Precision, t.Scale, big.NewInt(int64(a.Value(i))), a.ValueStr(i)), nil
	case *array.Decimal64:
		t := a.DataType().(*arrow.Decimal64Type)
		return decimal(t.Precision, t.Scale, big.NewInt(int64(a.Value(i))), a.ValueStr(i)), nil
	case *array.Decimal128:
		t := a.DataType().(*arrow.Decimal128Type)
		return decimal(t.Precision, t.Scale, a.Value(i).BigInt(), a.ValueStr(i)), nil
	case *array.Decimal256:
		t := a.DataType().(*arrow.Decimal256Type)
		return decimal(t.Precision, t.Scale, a.Value(i).BigInt(), a.ValueStr(i)), nil
	case *array.String:
		return a.Value(i), nil
	case *array.LargeString:
		return a.Value(i), nil
	case *array.StringView:
		return a.Value(i), nil
	case *array.Binary:
		return a.Value(i), nil
	case *array.LargeBinary:
		return a.Value(i), nil
	case *array.BinaryView:
		return a.Value(i), nil
	case *array.FixedSizeBinary:
		return a.Value(i), nil
	case *array.Date32:
		return a.Value(i).ToTime(), nil
	case *array.Date64:
		return a.Value(i).ToTime(), nil
	case *array.Time32:
		return midnight.Add(time.Duration(a.Value(i)) * a.DataType().(*arrow.Time32Type).Unit.Multiplier()), nil
	case *array.Time64:
		return midnight.Add(time.Duration(a.Value(i)) * a.DataType().(*arrow.Time64Type).Unit.Multiplier()), nil
	case *array.Timestamp:
		return a.Value(i).ToTime(a.DataType().(*arrow.TimestampType).Unit), nil
	case *array.Duration:
		d := time.Duration(a.Value(i)) * a.DataType().(*arrow.DurationType).Unit.Multiplier()
		return duckdb.Interval{Micros: d.Microseconds()}, nil
	case *array.MonthInterval:
		return duckdb.Interval{Months: int32(a.Value(i))}, nil
	case *array.DayTimeInterval:
		v := a.Value(i)
		return duckdb.Interval{Days: v.Days, Micros: int64(v.Milliseconds) * 1000}, nil
	case *array.MonthDayNanoInterval:
		v := a.Value(i)
		return duckdb.Interval{Months: v.Months, Days: v.Days, Micros: v.Nanoseconds / 1000}, nil
	case array.ListLike: // lists, large lists, fixed-size lists, list views, maps
		start, end := a.ValueOffsets(i)
		child := a.ListValues()
		if m, ok := a.(*array.Map); ok {
			return mapValue(m, int(start), int(end))
		}
		out := make([]any, 0, end-start)
		for j := int(start); j < int(end); j++ {
			v, err := Value(child, j)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case *array.Struct:
		t := a.DataType().(*arrow.StructType)
		out := make(map[string]any, t.NumFields())
		for j, f := range t.Fields() {
			v, err := Value(a.Field(j), i)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f.Name, err)
			}
			out[f.Name] = v
		}
		return out, nil
	case *array.Dictionary:
		return Value(a.Dictionary(), a.GetValueIndex(i))
	case array.ExtensionArray:
		return Value(a.Storage(), i)
	}
	return nil, fmt.Errorf("arrow type %s has no DuckDB mapping", a.DataType())
}

func mapValue(m *array.Map, start, end int) (any, error) {
	var out duckdb.OrderedMap
	keys, items := m.Keys(), m.Items()
	for j := start; j < end; j++ {
		k, err := Value(keys, j)
		if err != nil {
			return nil, fmt.Errorf("map key: %w", err)
		}
		v, err := Value(items, j)
		if err != nil {
			return nil, fmt.Errorf("map value: %w", err)
		}
		out.Set(k, v)
	}
	return out, nil
}

// decimal is an Arrow decimal as the appender takes it: the unscaled integer with width and scale, or the
// text form for decimals wider than DuckDB's (their column is VARCHAR).
func decimal(precision, scale int32, unscaled *big.Int, text string) any {
	if ducksql.DecimalAsText(precision, scale) {
		return text
	}
	return duckdb.Decimal{Width: uint8(precision), Scale: uint8(scale), Value: unscaled}
}

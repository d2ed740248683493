package typemap

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/skippr-dev/skippr/plugin-sdk/civil"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

// ColumnType returns the PostgreSQL type a destination column gets for an Arrow field. hint is the field's
// MetaType when the destination has that type (the caller checks with to_regtype), else "".
func ColumnType(f arrow.Field, hint string) (string, error) {
	if IsUUID(f) {
		return "uuid", nil
	}
	dt := f.Type
	if ext, ok := dt.(arrow.ExtensionType); ok {
		dt = ext.StorageType()
	}
	switch t := dt.(type) {
	case *arrow.StringType, *arrow.LargeStringType, *arrow.StringViewType:
		if hint != "" {
			return hint, nil
		}
		return "text", nil
	case *arrow.BooleanType:
		return "boolean", nil
	case *arrow.Int8Type, *arrow.Int16Type, *arrow.Uint8Type:
		return "smallint", nil
	case *arrow.Int32Type, *arrow.Uint16Type:
		return "integer", nil
	case *arrow.Int64Type, *arrow.Uint32Type:
		return "bigint", nil
	case *arrow.Uint64Type:
		return "numeric(20,0)", nil
	case *arrow.Float16Type, *arrow.Float32Type:
		return "real", nil
	case *arrow.Float64Type:
		return "double precision", nil
	case *arrow.Decimal32Type, *arrow.Decimal64Type, *arrow.Decimal128Type, *arrow.Decimal256Type:
		dec := t.(arrow.DecimalType)
		return fmt.Sprintf("numeric(%d,%d)", dec.GetPrecision(), dec.GetScale()), nil
	case *arrow.BinaryType, *arrow.LargeBinaryType, *arrow.BinaryViewType, *arrow.FixedSizeBinaryType:
		return "bytea", nil
	case *arrow.Date32Type, *arrow.Date64Type:
		return "date", nil
	case *arrow.Time32Type, *arrow.Time64Type:
		return "time", nil
	case *arrow.TimestampType:
		if t.TimeZone != "" {
			return "timestamptz", nil
		}
		return "timestamp", nil
	case *arrow.MonthDayNanoIntervalType, *arrow.MonthIntervalType, *arrow.DayTimeIntervalType, *arrow.DurationType:
		return "interval", nil
	case *arrow.ListType, *arrow.LargeListType, *arrow.FixedSizeListType:
		elem := t.(arrow.ListLikeType).ElemField()
		if isNested(elem.Type) {
			return "jsonb", nil
		}
		if hint != "" {
			return hint, nil
		}
		et, err := ColumnType(elem, "")
		if err != nil {
			return "", err
		}
		return et + "[]", nil
	case *arrow.StructType, *arrow.MapType:
		return "jsonb", nil
	case *arrow.NullType:
		return "text", nil
	case *arrow.DictionaryType:
		return ColumnType(arrow.Field{Name: f.Name, Type: t.ValueType, Metadata: f.Metadata}, hint)
	}
	return "", fmt.Errorf("column %s: Arrow type %s has no PostgreSQL mapping", f.Name, f.Type)
}

func isNested(dt arrow.DataType) bool {
	switch dt.(type) {
	case *arrow.ListType, *arrow.LargeListType, *arrow.FixedSizeListType, *arrow.StructType, *arrow.MapType:
		return true
	}
	return false
}

// HintApplies says whether a field's MetaType may replace the Arrow-derived column type: only where the value
// travels as the type's own text form.
func HintApplies(f arrow.Field) bool {
	switch t := f.Type.(type) {
	case *arrow.StringType, *arrow.LargeStringType:
		return true
	case *arrow.ListType:
		_, ok := t.Elem().(*arrow.StringType)
		return ok
	}
	return false
}

// Encoder appends the PostgreSQL text form of row i of an array to buf.
type Encoder func(buf []byte, i int) []byte

// NewEncoder returns the encoder of a column. The caller handles nulls (arr.IsNull) before calling it.
func NewEncoder(f arrow.Field, arr arrow.Array) (Encoder, error) {
	if ext, ok := arr.(array.ExtensionArray); ok {
		arr = ext.Storage()
	}
	if IsUUID(f) {
		a, ok := arr.(*array.FixedSizeBinary)
		if !ok {
			return nil, fmt.Errorf("column %s: uuid storage is %s", f.Name, arr.DataType())
		}
		return func(buf []byte, i int) []byte { return appendUUID(buf, a.Value(i)) }, nil
	}
	switch a := arr.(type) {
	case *array.String:
		return func(buf []byte, i int) []byte { return append(buf, a.Value(i)...) }, nil
	case *array.LargeString:
		return func(buf []byte, i int) []byte { return append(buf, a.Value(i)...) }, nil
	case *array.StringView:
		return func(buf []byte, i int) []byte { return append(buf, a.Value(i)...) }, nil
	case *array.Boolean:
		return func(buf []byte, i int) []byte {
			if a.Value(i) {
				return append(buf, 't')
			}
			return append(buf, 'f')
		}, nil
	case *array.Int8:
		return func(buf []byte, i int) []byte { return strconv.AppendInt(buf, int64(a.Value(i)), 10) }, nil
	case *array.Int16:
		return func(buf []byte, i int) []byte { return strconv.AppendInt(buf, int64(a.Value(i)), 10) }, nil
	case *array.Int32:
		return func(buf []byte, i int) []byte { return strconv.AppendInt(buf, int64(a.Value(i)), 10) }, nil
	case *array.Int64:
		return func(buf []byte, i int) []byte { return strconv.AppendInt(buf, a.Value(i), 10) }, nil
	case *array.Uint8:
		return func(buf []byte, i int) []byte { return strconv.AppendUint(buf, uint64(a.Value(i)), 10) }, nil
	case *array.Uint16:
		return func(buf []byte, i int) []byte { return strconv.AppendUint(buf, uint64(a.Value(i)), 10) }, nil
	case *array.Uint32:
		return func(buf []byte, i int) []byte { return strconv.AppendUint(buf, uint64(a.Value(i)), 10) }, nil
	case *array.Uint64:
		return func(buf []byte, i int) []byte { return strconv.AppendUint(buf, a.Value(i), 10) }, nil
	case *array.Float16:
		return func(buf []byte, i int) []byte { return appendFloat(buf, float64(a.Value(i).Float32()), 32) }, nil
	case *array.Float32:
		return func(buf []byte, i int) []byte { return appendFloat(buf, float64(a.Value(i)), 32) }, nil
	case *array.Float64:
		return func(buf []byte, i int) []byte { return appendFloat(buf, a.Value(i), 64) }, nil
	case *array.Decimal128:
		scale := a.DataType().(*arrow.Decimal128Type).Scale
		return func(buf []byte, i int) []byte { return append(buf, a.Value(i).ToString(scale)...) }, nil
	case *array.Decimal256:
		scale := a.DataType().(*arrow.Decimal256Type).Scale
		return func(buf []byte, i int) []byte { return append(buf, a.Value(i).ToString(scale)...) }, nil
	case *array.Binary:
		return func(buf []byte, i int) []byte { return appendBytea(buf, a.Value(i)) }, nil
	case *array.LargeBinary:
		return func(buf []byte, i int) []byte { return appendBytea(buf, a.Value(i)) }, nil
	case *array.BinaryView:
		return func(buf []byte, i int) []byte { return appendBytea(buf, a.Value(i)) }, nil
	case *array.FixedSizeBinary:
		return func(buf []byte, i int) []byte { return appendBytea(buf, a.Value(i)) }, nil
	case *array.Date32:
		return func(buf []byte, i int) []byte {
			switch v := a.Value(i); v {
			case values.DateInfinity:
				return append(buf, "infinity"...)
			case values.DateNegInfinity:
				return append(buf, "-infinity"...)
			default:
				return AppendDate(buf, int64(v))
			}
		}, nil
	case *array.Date64:
		return func(buf []byte, i int) []byte { return AppendDate(buf, int64(a.Value(i))/86400000) }, nil
	case *array.Time32:
		mult := int64(1e6)
		if a.DataType().(*arrow.Time32Type).Unit == arrow.Millisecond {
			mult = 1e3
		}
		return func(buf []byte, i int) []byte { return appendClock(buf, int64(a.Value(i))*mult) }, nil
	case *array.Time64:
		div := int64(1)
		if a.DataType().(*arrow.Time64Type).Unit == arrow.Nanosecond {
			div = 1000
		}
		return func(buf []byte, i int) []byte { return appendClock(buf, int64(a.Value(i))/div) }, nil
	case *array.Timestamp:
		tt := a.DataType().(*arrow.TimestampType)
		return func(buf []byte, i int) []byte {
			v := a.Value(i)
			if tt.Unit == arrow.Microsecond {
				switch v {
				case values.TimestampInfinity:
					return append(buf, "infinity"...)
				case values.TimestampNegInfinity:
					return append(buf, "-infinity"...)
				}
			}
			return AppendTimestamp(buf, v, tt.Unit, tt.TimeZone != "")
		}, nil
	case *array.MonthDayNanoInterval:
		return func(buf []byte, i int) []byte { return appendInterval(buf, a.Value(i)) }, nil
	case *array.MonthInterval:
		return func(buf []byte, i int) []byte {
			return appendInterval(buf, arrow.MonthDayNanoInterval{Months: int32(a.Value(i))})
		}, nil
	case *array.DayTimeInterval:
		return func(buf []byte, i int) []byte {
			v := a.Value(i)
			return appendInterval(buf, arrow.MonthDayNanoInterval{Days: v.Days, Nanoseconds: int64(v.Milliseconds) * 1e6})
		}, nil
	case *array.Duration:
		unit := a.DataType().(*arrow.DurationType).Unit
		return func(buf []byte, i int) []byte {
			return appendInterval(buf, arrow.MonthDayNanoInterval{Nanoseconds: int64(a.Value(i)) * int64(unit.Multiplier())})
		}, nil
	case *array.Dictionary:
		inner, err := NewEncoder(arrow.Field{Name: f.Name, Type: a.Dictionary().DataType()}, a.Dictionary())
		if err != nil {
			return nil, err
		}
		return func(buf []byte, i int) []byte { return inner(buf, a.GetValueIndex(i)) }, nil
	case array.ListLike:
		elemField := a.DataType().(arrow.ListLikeType).ElemField()
		if isNested(elemField.Type) {
			return jsonEncoder(arr), nil
		}
		values := a.ListValues()
		inner, err := NewEncoder(elemField, values)
		if err != nil {
			return nil, err
		}
		return func(buf []byte, i int) []byte {
			start, end := a.ValueOffsets(i)
			buf = append(buf, '{')
			for j := start; j < end; j++ {
				if j > start {
					buf = append(buf, ',')
				}
				if values.IsNull(int(j)) {
					buf = append(buf, "NULL"...)
					continue
				}
				buf = appendArrayElem(buf, inner(nil, int(j)))
			}
			return append(buf, '}')
		}, nil
	case *array.Struct, *array.Map:
		return jsonEncoder(arr), nil
	case *array.Null:
		return func(buf []byte, _ int) []byte { return buf }, nil
	}
	return nil, fmt.Errorf("column %s: Arrow type %s has no PostgreSQL mapping", f.Name, arr.DataType())
}

func jsonEncoder(arr arrow.Array) Encoder {
	return func(buf []byte, i int) []byte {
		b, err := json.Marshal(arr.GetOneForMarshal(i))
		if err != nil {
			b, _ = json.Marshal(err.Error())
		}
		return append(buf, b...)
	}
}

// appendArrayElem quotes an array element: always quoted, so no element text needs to be classified.
func appendArrayElem(buf, elem []byte) []byte {
	buf = append(buf, '"')
	for _, c := range elem {
		if c == '"' || c == '\\' {
			buf = append(buf, '\\')
		}
		buf = append(buf, c)
	}
	return append(buf, '"')
}

func appendFloat(buf []byte, v float64, bits int) []byte {
	switch {
	case math.IsNaN(v):
		return append(buf, "NaN"...)
	case math.IsInf(v, 1):
		return append(buf, "Infinity"...)
	case math.IsInf(v, -1):
		return append(buf, "-Infinity"...)
	}
	return strconv.AppendFloat(buf, v, 'g', -1, bits)
}

func appendBytea(buf, v []byte) []byte {
	buf = append(buf, `\x`...)
	return hex.AppendEncode(buf, v)
}

func appendUUID(buf, v []byte) []byte {
	h := hex.EncodeToString(v)
	if len(h) != 32 {
		return append(buf, h...)
	}
	return append(buf, h[0:8]+"-"+h[8:12]+"-"+h[12:16]+"-"+h[16:20]+"-"+h[20:32]...)
}

func appendYear(buf []byte, y int64) ([]byte, bool) {
	bc := y <= 0
	if bc {
		y = 1 - y
	}
	s := strconv.FormatInt(y, 10)
	if len(s) < 4 {
		s = strings.Repeat("0", 4-len(s)) + s
	}
	return append(buf, s...), bc
}

// AppendDate formats days since 1970-01-01 as a date (ISO, with BC for years before 1).
func AppendDate(buf []byte, days int64) []byte {
	y, m, d := civil.Date(days)
	buf, isBC := appendYear(buf, y)
	buf = fmt.Appendf(buf, "-%02d-%02d", m, d)
	if isBC {
		buf = append(buf, " BC"...)
	}
	return buf
}

func appendClock(buf []byte, us int64) []byte {
	s := us / 1e6
	buf = fmt.Appendf(buf, "%02d:%02d:%02d", s/3600, s/60%60, s%60)
	if f := us % 1e6; f != 0 {
		buf = fmt.Appendf(buf, ".%06d", f)
	}
	return buf
}

// AppendTimestamp formats a timestamp of any unit (UTC, with +00 when tz) at microsecond precision.
func AppendTimestamp(buf []byte, v arrow.Timestamp, unit arrow.TimeUnit, tz bool) []byte {
	var us int64
	switch unit {
	case arrow.Second:
		us = int64(v) * 1e6
	case arrow.Millisecond:
		us = int64(v) * 1e3
	case arrow.Microsecond:
		us = int64(v)
	case arrow.Nanosecond:
		us = floorDiv(int64(v), 1000)
	}
	days := floorDiv(us, 86400e6)
	rem := us - days*86400e6
	y, m, d := civil.Date(days)
	buf, isBC := appendYear(buf, y)
	buf = fmt.Appendf(buf, "-%02d-%02d ", m, d)
	buf = appendClock(buf, rem)
	if tz {
		buf = append(buf, "+00"...)
	}
	if isBC {
		buf = append(buf, " BC"...)
	}
	return buf
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// appendInterval writes an interval PostgreSQL's input accepts in any IntervalStyle. Nanoseconds are cut to
// microseconds, PostgreSQL's resolution.
func appendInterval(buf []byte, v arrow.MonthDayNanoInterval) []byte {
	return fmt.Appendf(buf, "%d months %d days %d microseconds", v.Months, v.Days, v.Nanoseconds/1000)
}

// FormatTime is for messages and tests: a timestamp[us] as RFC 3339.
func FormatTime(us int64) string { return time.UnixMicro(us).UTC().Format(time.RFC3339Nano) }

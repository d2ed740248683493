package values

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// IntervalStruct is how a lake holds an interval where its format has none (Iceberg; Parquet cannot hold
// Arrow's month_day_nano_interval): the three parts kept apart, exactly as Arrow and PostgreSQL hold them,
// since a month has no fixed number of days nor a day of seconds. The names are those of the Arrow value's
// JSON form. A string would read better but would need parsing to compute with. A lake writer and a query
// engine reading the lake beside unapplied WAL rows must agree on it, hence one definition here.
var IntervalStruct = arrow.StructOf(
	arrow.Field{Name: "months", Type: arrow.PrimitiveTypes.Int32},
	arrow.Field{Name: "days", Type: arrow.PrimitiveTypes.Int32},
	arrow.Field{Name: "nanoseconds", Type: arrow.PrimitiveTypes.Int64},
)

// IntervalsAsStruct builds an array of t from intervals; t is IntervalStruct, or the same three fields with
// metadata of the caller's (an Iceberg table's field ids).
func IntervalsAsStruct(mem memory.Allocator, arr *array.MonthDayNanoInterval, t *arrow.StructType) arrow.Array {
	b := array.NewStructBuilder(mem, t)
	defer b.Release()
	months, days, nanos := b.FieldBuilder(0).(*array.Int32Builder), b.FieldBuilder(1).(*array.Int32Builder), b.FieldBuilder(2).(*array.Int64Builder)
	for i := 0; i < arr.Len(); i++ {
		if arr.IsNull(i) {
			b.AppendNull()
			continue
		}
		v := arr.Value(i)
		b.Append(true)
		months.Append(v.Months)
		days.Append(v.Days)
		nanos.Append(v.Nanoseconds)
	}
	return b.NewArray()
}

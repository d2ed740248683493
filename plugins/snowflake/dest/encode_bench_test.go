package dest

import (
	"context"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
)

// benchBatch is a 64K-row change batch of the shape of BENCHMARKS.md's other figures: int64 key, text,
// numeric(12,2), timestamptz, and with nested set a struct and a list (which the plugin sends as JSON text).
func benchBatch(nested bool) arrow.RecordBatch {
	fields := []arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "amount", Type: &arrow.Decimal128Type{Precision: 12, Scale: 2}, Nullable: true},
		{Name: "at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	}
	if nested {
		fields = append(fields,
			arrow.Field{Name: "attrs", Type: arrow.StructOf(arrow.Field{Name: "color", Type: arrow.BinaryTypes.String, Nullable: true},
				arrow.Field{Name: "size", Type: arrow.PrimitiveTypes.Int32, Nullable: true}), Nullable: true},
			arrow.Field{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true})
	}
	s := change.Schema(fields, []string{"id"})
	b := change.NewBuilder(mem, s)
	defer b.Release()
	const n = 65536
	for i := 0; i < n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append("customer name number " + string(rune('a'+i%26)))
		b.Field(2).(*array.Decimal128Builder).Append(decimal128.FromI64(int64(i) * 125))
		b.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(1_700_000_000_000_000 + int64(i)))
		if nested {
			sb := b.Field(4).(*array.StructBuilder)
			sb.Append(true)
			sb.FieldBuilder(0).(*array.StringBuilder).Append("red")
			sb.FieldBuilder(1).(*array.Int32Builder).Append(int32(i % 40))
			lb := b.Field(5).(*array.ListBuilder)
			lb.Append(true)
			lb.ValueBuilder().(*array.StringBuilder).Append("a")
			lb.ValueBuilder().(*array.StringBuilder).Append("b")
		}
		b.Row(change.OpUpdate, "")
	}
	return b.NewBatch()
}

// benchEncode runs the plugin's path: fold, pick the survivors, convert, write Parquet.
func benchEncode(b *testing.B, nested bool) {
	rec := benchBatch(nested)
	defer rec.Release()
	cols, err := stageColumns(rec.Schema())
	if err != nil {
		b.Fatal(err)
	}
	var size int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f := change.NewFold(change.FoldOptions{Rows: int(rec.NumRows())})
		ops, _ := change.OpValues(rec)
		key, _ := change.KeyOf(rec)
		if err := f.Add(key, ops); err != nil {
			b.Fatal(err)
		}
		p := part{rec: rec}
		for _, l := range f.Last() {
			p.picks = append(p.picks, pick{row: l.Row, op: l.Op})
		}
		cw := &countingWriter{w: io.Discard}
		if _, err := EncodeParquet(context.Background(), cw, rec.Schema(), cols, []part{p}); err != nil {
			b.Fatal(err)
		}
		size = cw.n
	}
	b.ReportMetric(float64(rec.NumRows())*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(size)/float64(rec.NumRows()), "bytes/row")
}

// benchRaw writes the same batch's data columns with pqarrow alone, same writer properties: the baseline.
func benchRaw(b *testing.B, nested bool) {
	rec := benchBatch(nested)
	defer rec.Release()
	data := change.StripReserved(rec)
	defer data.Release()
	props, aprops := WriterProperties()
	var size int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cw := &countingWriter{w: io.Discard}
		fw, err := pqarrow.NewFileWriter(data.Schema(), cw, props, aprops)
		if err != nil {
			b.Fatal(err)
		}
		if err := fw.Write(data); err != nil {
			b.Fatal(err)
		}
		if err := fw.Close(); err != nil {
			b.Fatal(err)
		}
		size = cw.n
	}
	b.ReportMetric(float64(rec.NumRows())*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(size)/float64(rec.NumRows()), "bytes/row")
}

func BenchmarkEncodeFlat(b *testing.B)       { benchEncode(b, false) }
func BenchmarkPqarrowRawFlat(b *testing.B)   { benchRaw(b, false) }
func BenchmarkEncodeNested(b *testing.B)     { benchEncode(b, true) }
func BenchmarkPqarrowRawNested(b *testing.B) { benchRaw(b, true) }

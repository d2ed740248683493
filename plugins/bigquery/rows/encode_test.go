package rows

import (
	"fmt"
	"strings"
	"testing"

	"cloud.google.com/go/bigquery"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

// orders builds n rows of the benchmark's table: id int64, name utf8, amount decimal(12,2), tags list<utf8>,
// doc jsonb, at timestamp[us, UTC], and a struct{a int32, b utf8}.
func orders(n int) arrow.RecordBatch {
	jsonb := arrow.NewMetadata([]string{MetaPostgresType}, []string{"jsonb"})
	st := arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true})
	s := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "amount", Type: &arrow.Decimal128Type{Precision: 12, Scale: 2}, Nullable: true},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
		{Name: "doc", Type: arrow.BinaryTypes.String, Nullable: true, Metadata: jsonb},
		{Name: "at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "pair", Type: st, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, s)
	defer b.Release()
	for i := 0; i < n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("customer %d", i))
		b.Field(2).(*array.Decimal128Builder).Append(decimal128.FromI64(int64(i) * 125))
		lb := b.Field(3).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.StringBuilder).Append("a")
		lb.ValueBuilder().(*array.StringBuilder).Append(fmt.Sprintf("b%d", i%5))
		b.Field(4).(*array.StringBuilder).Append(fmt.Sprintf(`{"k": %d}`, i))
		b.Field(5).(*array.TimestampBuilder).Append(arrow.Timestamp(1767225600000000 + int64(i)*1000000))
		sb := b.Field(6).(*array.StructBuilder)
		sb.Append(true)
		sb.FieldBuilder(0).(*array.Int32Builder).Append(int32(i))
		if i%2 == 0 {
			sb.FieldBuilder(1).(*array.StringBuilder).Append("even")
		} else {
			sb.FieldBuilder(1).AppendNull()
		}
	}
	return b.NewRecordBatch()
}

func allCols(s *arrow.Schema) []int {
	out := make([]int, s.NumFields())
	for i := range out {
		out[i] = i
	}
	return out
}

func stageOf(s *arrow.Schema) bigquery.Schema {
	var cols []*bigquery.FieldSchema
	for _, f := range s.Fields() {
		cols = append(cols, Column(f.Name, f))
	}
	return StageSchema(cols)
}

func messageType(t testing.TB, dp *descriptorpb.DescriptorProto) protoreflect.MessageDescriptor {
	t.Helper()
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{Name: proto.String("r.proto"), Syntax: proto.String("proto2"),
		MessageType: []*descriptorpb.DescriptorProto{dp}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().Get(0)
}

// TestEncodeDecodesWithTheDescriptor: a row the encoder writes decodes, with the descriptor the plugin sends,
// to the values of the Arrow row — nothing lands in unknown fields.
func TestEncodeDecodesWithTheDescriptor(t *testing.T) {
	rec := orders(3)
	defer rec.Release()
	schema := stageOf(rec.Schema())
	md := messageType(t, Descriptor(schema))
	enc, err := NewEncoder(rec.Schema(), allCols(rec.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	buf, err := enc.Append(nil, rec, 2, 1, 7)
	if err != nil {
		t.Fatal(err)
	}
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(buf, m); err != nil {
		t.Fatal(err)
	}
	if len(m.GetUnknown()) > 0 {
		t.Fatalf("%d bytes of the row match no field of the descriptor", len(m.GetUnknown()))
	}
	get := func(name string) protoreflect.Value { return m.Get(md.Fields().ByName(protoreflect.Name(name))) }
	pair := get("c6").Message()
	got := fmt.Sprintf("%d|%s|%s|%v|%s|%d|%d:%v|%d|%d", get("c0").Int(), get("c1").String(), get("c2").String(),
		[]string{get("c3").List().Get(0).String(), get("c3").List().Get(1).String()}, get("c4").String(), get("c5").Int(),
		pair.Get(pair.Descriptor().Fields().ByName("a")).Int(), pair.Has(pair.Descriptor().Fields().ByName("b")), get(OpColumn).Int(), get(OrdColumn).Int())
	want := `2|customer 2|2.50|[a b2]|{"k": 2}|1767225602000000|2:true|1|7`
	if got != want {
		t.Fatalf("decoded %s, want %s", got, want)
	}
}

// TestColumnTypes pins the type table of the README.
func TestColumnTypes(t *testing.T) {
	for _, c := range []struct {
		f    arrow.Field
		want string
	}{
		{arrow.Field{Type: arrow.PrimitiveTypes.Uint64}, "NUMERIC"},
		{arrow.Field{Type: &arrow.Decimal128Type{Precision: 38, Scale: 9}}, "NUMERIC"},
		{arrow.Field{Type: &arrow.Decimal128Type{Precision: 38, Scale: 10}}, "BIGNUMERIC"},
		{arrow.Field{Type: &arrow.Decimal256Type{Precision: 76, Scale: 10}}, "STRING"},
		{arrow.Field{Type: &arrow.TimestampType{Unit: arrow.Microsecond}}, "DATETIME"},
		{arrow.Field{Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}}, "TIMESTAMP"},
		{arrow.Field{Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)}, "ARRAY<INT64>"},
		{arrow.Field{Type: arrow.ListOf(arrow.ListOf(arrow.PrimitiveTypes.Int32))}, "JSON"},
		{arrow.Field{Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int32)}, "JSON"},
		{arrow.Field{Type: arrow.StructOf(arrow.Field{Name: "a b", Type: arrow.PrimitiveTypes.Int32})}, "JSON"},
		{arrow.Field{Type: arrow.ListOf(arrow.StructOf(arrow.Field{Name: "x", Type: arrow.FixedWidthTypes.Date32}))}, "ARRAY<STRUCT<x DATE>>"},
		{arrow.Field{Type: arrow.FixedWidthTypes.MonthDayNanoInterval}, "STRING"},
	} {
		if got := Describe(Column("c", c.f)); got != c.want {
			t.Errorf("%s: %s, want %s", c.f.Type, got, c.want)
		}
	}
}

// TestNullArrayElementIsADataError: BigQuery arrays hold no NULL.
func TestNullArrayElementIsADataError(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, s)
	lb := b.Field(0).(*array.ListBuilder)
	lb.Append(true)
	lb.ValueBuilder().AppendNull()
	rec := b.NewRecordBatch()
	b.Release()
	enc, err := NewEncoder(s, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := enc.Append(nil, rec, 0, 1, 0); err == nil || !strings.Contains(err.Error(), "column tags") || !strings.Contains(err.Error(), "NULL") {
		t.Fatalf("want an error naming column tags and the NULL, got %v", err)
	}
}

// TestOutOfRangeTimesAreDataErrors: ±infinity as sources carry it (plugin-sdk/values) and dates or
// timestamps past BigQuery's years 1–9999 stop the pipeline as data errors naming the column and the value;
// the ends of the range encode.
func TestOutOfRangeTimesAreDataErrors(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{
		{Name: "d", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond}, Nullable: true},
		{Name: "tz", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	}, nil)
	const (
		firstDay, lastDay     = -719162, 2932896
		firstMicro, lastMicro = -62135596800000000, 253402300799999999
		inDay, inMicro        = 0, 0
		wantOK                = ""
	)
	for _, c := range []struct {
		name      string
		d         arrow.Date32
		ts, tz    arrow.Timestamp
		wantError string // "" when the row encodes
	}{
		{"range ends", firstDay, firstMicro, lastMicro, wantOK},
		{"other ends", lastDay, lastMicro, firstMicro, wantOK},
		{"date infinity", values.DateInfinity, inMicro, inMicro, "column d: date infinity"},
		{"date -infinity", values.DateNegInfinity, inMicro, inMicro, "column d: date -infinity"},
		{"date year 10000", lastDay + 1, inMicro, inMicro, "column d: date 2932897 days"},
		{"date year 0", firstDay - 1, inMicro, inMicro, "column d: date -719163 days"},
		{"datetime infinity", inDay, values.TimestampInfinity, inMicro, "column ts: timestamp infinity"},
		{"datetime -infinity", inDay, values.TimestampNegInfinity, inMicro, "column ts: timestamp -infinity"},
		{"datetime year 10000", inDay, lastMicro + 1, inMicro, "column ts: timestamp 253402300800000000 us"},
		{"timestamp infinity", inDay, inMicro, values.TimestampInfinity, "column tz: timestamp infinity"},
		{"timestamp before year 1", inDay, inMicro, firstMicro - 1, "column tz: timestamp -62135596800000001 us"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := array.NewRecordBuilder(memory.DefaultAllocator, s)
			defer b.Release()
			b.Field(0).(*array.Date32Builder).Append(c.d)
			b.Field(1).(*array.TimestampBuilder).Append(c.ts)
			b.Field(2).(*array.TimestampBuilder).Append(c.tz)
			rec := b.NewRecordBatch()
			defer rec.Release()
			enc, err := NewEncoder(s, []int{0, 1, 2})
			if err != nil {
				t.Fatal(err)
			}
			_, err = enc.Append(nil, rec, 0, 1, 0)
			switch {
			case c.wantError == "" && err != nil:
				t.Fatalf("want the row encoded, got %v", err)
			case c.wantError == "":
			case err == nil || !strings.Contains(err.Error(), c.wantError):
				t.Fatalf("want an error containing %q, got %v", c.wantError, err)
			case fault.ClassOf(err) != fault.Data:
				t.Fatalf("error class %s, want data (stops the pipeline, no retry): %v", fault.ClassOf(err), err)
			}
		})
	}
}

// BenchmarkEncode measures Arrow → Storage Write API rows: the plugin's encoder, and beside it, in the same
// run, the baseline of building a dynamicpb message per row and marshalling it.
func BenchmarkEncode(b *testing.B) {
	const n = 65536
	rec := orders(n)
	defer rec.Release()
	b.Run("protowire", func(b *testing.B) {
		enc, err := NewEncoder(rec.Schema(), allCols(rec.Schema()))
		if err != nil {
			b.Fatal(err)
		}
		var buf []byte
		for b.Loop() {
			buf = buf[:0]
			for i := 0; i < n; i++ {
				if buf, err = enc.Append(buf, rec, i, 1, int64(i)); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		b.ReportMetric(float64(len(buf))/n, "bytes/row")
	})
	b.Run("dynamicpb", func(b *testing.B) {
		md := messageType(b, Descriptor(stageOf(rec.Schema())))
		f := func(i int) protoreflect.FieldDescriptor { return md.Fields().Get(i) }
		ids := rec.Column(0).(*array.Int64)
		names := rec.Column(1).(*array.String)
		amounts := rec.Column(2).(*array.Decimal128)
		tags := rec.Column(3).(*array.List)
		tagv := tags.ListValues().(*array.String)
		docs := rec.Column(4).(*array.String)
		ats := rec.Column(5).(*array.Timestamp)
		pairs := rec.Column(6).(*array.Struct)
		pd := f(6).Message()
		var size int
		for b.Loop() {
			size = 0
			for i := 0; i < n; i++ {
				m := dynamicpb.NewMessage(md)
				m.Set(f(0), protoreflect.ValueOfInt64(ids.Value(i)))
				m.Set(f(1), protoreflect.ValueOfString(names.Value(i)))
				m.Set(f(2), protoreflect.ValueOfString(amounts.Value(i).ToString(2)))
				l := m.Mutable(f(3)).List()
				s, e := tags.ValueOffsets(i)
				for j := s; j < e; j++ {
					l.Append(protoreflect.ValueOfString(tagv.Value(int(j))))
				}
				m.Set(f(4), protoreflect.ValueOfString(docs.Value(i)))
				m.Set(f(5), protoreflect.ValueOfInt64(int64(ats.Value(i))))
				p := dynamicpb.NewMessage(pd)
				p.Set(pd.Fields().Get(0), protoreflect.ValueOfInt64(int64(pairs.Field(0).(*array.Int32).Value(i))))
				if !pairs.Field(1).IsNull(i) {
					p.Set(pd.Fields().Get(1), protoreflect.ValueOfString(pairs.Field(1).(*array.String).Value(i)))
				}
				m.Set(f(6), protoreflect.ValueOfMessage(p))
				m.Set(f(7), protoreflect.ValueOfInt64(1))
				out, err := proto.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				size += len(out)
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		b.ReportMetric(float64(size)/n, "bytes/row")
	})
}

// A column of Arrow's null type is NULL in every row (its array has no validity bitmap, so IsNull says
// false), not the text "(null)".
func TestNullTypeEncodesNull(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "n", Type: arrow.Null, Nullable: true}}, nil)
	ids := array.NewInt64Builder(memory.DefaultAllocator)
	ids.Append(7)
	rec := array.NewRecordBatch(s, []arrow.Array{ids.NewArray(), array.NewNull(1)}, 1)
	enc, err := NewEncoder(s, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	buf, err := enc.Append(nil, rec, 0, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	cols := []*bigquery.FieldSchema{Column("id", s.Field(0)), Column("n", s.Field(1))}
	md := messageType(t, Descriptor(StageSchema(cols)))
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(buf, m); err != nil {
		t.Fatal(err)
	}
	if m.Has(md.Fields().ByName("c1")) {
		t.Fatalf("the null-typed column holds %v, want NULL", m.Get(md.Fields().ByName("c1")))
	}
}

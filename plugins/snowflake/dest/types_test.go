package dest

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// TestParquetReadWithLogicalTypes: COPY reads the staged file as Snowflake documents it (CREATE FILE FORMAT,
// TYPE = PARQUET: BINARY_AS_TEXT "Boolean that specifies whether to interpret columns with no defined logical
// data type as UTF-8 text", default TRUE; USE_LOGICAL_TYPE "Boolean that specifies whether to use Parquet
// logical types", default FALSE). On the stand-in, which reads the file under the options the COPY names
// (testkit/snowflaketest/parquet.go) because the service cannot run here: a TIME without a legacy converted
// type, nanosecond timestamps and bytes that are not hex text must read back as the source had them.
func TestParquetReadWithLogicalTypes(t *testing.T) {
	tg := newTarget(t, nil)
	st := tg.stream("public.kinds")
	s := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "at_time", Type: arrow.FixedWidthTypes.Time64us, Nullable: true},
		{Name: "local_ns", Type: &arrow.TimestampType{Unit: arrow.Nanosecond}, Nullable: true},
		{Name: "utc_ns", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "raw", Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: "uid", Type: &arrow.FixedSizeBinaryType{ByteWidth: 4}, Nullable: true},
	}, []string{"id"})
	b := change.NewBuilder(mem, s)
	b.Field(0).(*array.Int64Builder).Append(1)
	b.Field(1).(*array.Time64Builder).Append(arrow.Time64((12*3600 + 34*60 + 56) * 1_000_000))
	b.Field(2).(*array.TimestampBuilder).Append(arrow.Timestamp(1_700_000_000_123_456_000))
	b.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(1_700_000_000_000_001_000))
	b.Field(4).(*array.BinaryBuilder).Append([]byte{0x00, 0xff, 'x'})
	b.Field(5).(*array.FixedSizeBinaryBuilder).Append([]byte{0xde, 0xad, 0xbe, 0xef})
	b.Row(change.OpInsert, "")
	rec := b.NewBatch()
	b.Release()
	defer rec.Release()
	tg.apply(1, 1, item(st, 1, rec))
	got := tg.rows(TableName(st))["1"]
	for c, want := range map[string]string{
		"AT_TIME": "12:34:56", "LOCAL_NS": "2023-11-14T22:13:20.123456", "UTC_NS": "2023-11-14T22:13:20.000001",
	} {
		// Snowflake's TO_JSON writes a space between date and time, PostgreSQL's to_jsonb a T.
		if v := strings.Replace(fmt.Sprint(got[c]), " ", "T", 1); !strings.HasPrefix(v, want) {
			t.Errorf("%s = %v, want %s…", c, got[c], want)
		}
	}
	for c, want := range map[string]string{"RAW": "00ff78", "UID": "deadbeef"} {
		if v := strings.ToLower(strings.TrimPrefix(fmt.Sprint(got[c]), `\x`)); v != want {
			t.Errorf("%s = %v, want the bytes %s", c, got[c], want)
		}
	}
}

// TestMapsLoadAsObjects: a map column becomes an OBJECT keyed by the map's keys, at the top and nested in a
// struct. TO_OBJECT reports an error for anything but an object (docs.snowflake.com/en/sql-reference/functions
// /to_object: "For all other input values, reports an error"); the stand-in does the same, standing in for the
// service, which cannot run here.
func TestMapsLoadAsObjects(t *testing.T) {
	tg := newTarget(t, nil)
	st := tg.stream("public.maps")
	mt := arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64)
	s := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "props", Type: mt, Nullable: true},
		{Name: "doc", Type: arrow.StructOf(arrow.Field{Name: "m", Type: mt, Nullable: true}), Nullable: true},
	}, []string{"id"})
	b := change.NewBuilder(mem, s)
	b.Field(0).(*array.Int64Builder).Append(1)
	fill := func(mb *array.MapBuilder) {
		mb.Append(true)
		mb.KeyBuilder().(*array.StringBuilder).AppendValues([]string{"a", "b"}, nil)
		mb.ItemBuilder().(*array.Int64Builder).AppendValues([]int64{1, 2}, nil)
	}
	fill(b.Field(1).(*array.MapBuilder))
	sb := b.Field(2).(*array.StructBuilder)
	sb.Append(true)
	fill(sb.FieldBuilder(0).(*array.MapBuilder))
	b.Row(change.OpInsert, "")
	rec := b.NewBatch()
	b.Release()
	defer rec.Release()
	tg.apply(1, 1, item(st, 1, rec))
	got := tg.rows(TableName(st))["1"]
	if v := fmt.Sprint(got["PROPS"]); v != "map[a:1 b:2]" {
		t.Errorf("PROPS = %v, want the object {a: 1, b: 2}", got["PROPS"])
	}
	if v := fmt.Sprint(got["DOC"]); v != "map[m:map[a:1 b:2]]" {
		t.Errorf("DOC = %v, want {m: {a: 1, b: 2}}", got["DOC"])
	}
}

// TestDecimalScale38: Snowflake's NUMBER has a scale of at most 37 (docs.snowflake.com/en/sql-reference
// /data-types-numeric: "The maximum scale … is 37"), and the stand-in refuses NUMBER(38,38) as the service
// does. A decimal(38,38) column goes into NUMBER(38,37): values whose 38th decimal is 0 load exactly; one that
// needs it stops the apply with a data error naming the column and the value, not a retried CREATE.
func TestDecimalScale38(t *testing.T) {
	tg := newTarget(t, nil)
	st := tg.stream("public.fractions")
	dt := &arrow.Decimal128Type{Precision: 38, Scale: 38}
	s := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "f", Type: dt, Nullable: true}}, []string{"id"})
	mk := func(id int64, digits string) arrow.RecordBatch {
		n, ok := new(big.Int).SetString(digits, 10)
		if !ok {
			t.Fatal(digits)
		}
		b := change.NewBuilder(mem, s)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.Decimal128Builder).Append(decimal128.FromBigInt(n))
		b.Row(change.OpInsert, "")
		return b.NewBatch()
	}
	fits := mk(1, "12345678901234567890123456789012345670")
	defer fits.Release()
	tg.apply(1, 1, item(st, 1, fits))
	if v := fmt.Sprint(tg.rows(TableName(st))["1"]["F"]); !strings.HasPrefix(v, "0.1234567890123456789012345678901234567") {
		t.Fatalf("F = %v, want 0.1234567890123456789012345678901234567", v)
	}
	needs := mk(2, "12345678901234567890123456789012345678")
	defer needs.Release()
	_, err := tg.d.Apply(tctx(t), serve.ApplyRequest{Settings: tg.settings, Pipeline: tg.pipeline, FirstSequence: 2, Sequence: 2, Items: []serve.Item{item(st, 2, needs)}})
	if !errors.Is(err, fault.ErrData) || !strings.Contains(err.Error(), "column f") || !strings.Contains(err.Error(), "0.12345678901234567890123456789012345678") {
		t.Fatalf("a value needing scale 38: %v, want a data error naming column f and the value", err)
	}
}

package query

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// extremeRow is one row of the extremes table: timestamps in microseconds, the date in days, since 1970.
type extremeRow struct {
	id   int64
	ts   int64
	tz   int64
	d    int32
	uuid []byte
}

// Sources carry ±infinity as DuckDB does (the largest count of the unit and its negation), so these are the
// values a lake and the WAL hold for PostgreSQL's ±infinity, its earliest timestamp and the last instant
// before infinity.
var (
	uuidA       = []byte{0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11}
	uuidB       = []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	extremeLake = []extremeRow{
		{1, math.MaxInt64, -math.MaxInt64, math.MaxInt32, uuidA},
		{2, -math.MaxInt64, math.MaxInt64 - 1, -math.MaxInt32, nil},
		{3, -210866803200000000, 0, -2440588, uuidB}, // 4714-11-24 BC, the first day PostgreSQL has
	}
	extremeWAL = []extremeRow{{4, math.MaxInt64 - 1, math.MaxInt64, 0, uuidA}}
)

func extremeFields(uuidType arrow.DataType, uuidMeta arrow.Metadata) []arrow.Field {
	return []arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond}, Nullable: true},
		{Name: "tz", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "d", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "u", Type: uuidType, Nullable: true, Metadata: uuidMeta},
	}
}

func appendExtreme(b *array.RecordBuilder, r extremeRow) {
	b.Field(0).(*array.Int64Builder).Append(r.id)
	b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(r.ts))
	b.Field(2).(*array.TimestampBuilder).Append(arrow.Timestamp(r.tz))
	b.Field(3).(*array.Date32Builder).Append(arrow.Date32(r.d))
	u := b.Field(4)
	switch {
	case r.uuid == nil:
		u.AppendNull()
	case u.Type().ID() == arrow.EXTENSION:
		u.(*extensions.UUIDBuilder).AppendBytes([16]byte(r.uuid))
	default:
		u.(*array.FixedSizeBinaryBuilder).Append(r.uuid)
	}
}

// extremeLakePlan writes the lake rows to a Parquet file with field ids, the uuid column as 16 bytes with
// Parquet's UUID logical type (logical) or without it, and plans it with the schema Iceberg gives: the uuid
// column as the arrow.uuid extension.
func extremeLakePlan(t *testing.T, logical bool) lakequery.TablePlan {
	t.Helper()
	var fileType arrow.DataType = &arrow.FixedSizeBinaryType{ByteWidth: 16}
	if logical {
		fileType = extensions.NewUUIDType()
	}
	fields := extremeFields(fileType, arrow.Metadata{})
	planFields := extremeFields(extensions.NewUUIDType(), arrow.Metadata{})
	for i := range fields {
		fields[i].Metadata = arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{fmt.Sprint(i + 1)})
		planFields[i].Metadata = fields[i].Metadata
	}
	sc := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, r := range extremeLake {
		appendExtreme(b, r)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	path := filepath.Join(t.TempDir(), "data.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(sc, f, nil, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	schemaIPC, err := protocol.EncodeSchema(memory.DefaultAllocator, arrow.NewSchema(planFields, nil))
	if err != nil {
		t.Fatal(err)
	}
	return lakequery.TablePlan{Stream: "public.extremes", Name: "lake.extremes", Table: "extremes", Exists: true, Fence: 1,
		Key: []string{"id"}, ArrowSchema: schemaIPC, Files: []lakequery.PlanFile{{Path: path, Location: "file://" + path, Rows: 3}}}
}

// extremeWALBatch is a WAL batch as the PostgreSQL source sends it: the uuid column as 16 bytes named
// arrow.uuid in its metadata.
func extremeWALBatch(t *testing.T) []byte {
	t.Helper()
	meta := arrow.NewMetadata([]string{"ARROW:extension:name", "ARROW:extension:metadata"}, []string{"arrow.uuid", ""})
	sc := change.Schema(extremeFields(&arrow.FixedSizeBinaryType{ByteWidth: 16}, meta), []string{"id"})
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, r := range extremeWAL {
		b.Field(0).(*array.Int64Builder).Append(r.id)
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(r.ts))
		b.Field(2).(*array.TimestampBuilder).Append(arrow.Timestamp(r.tz))
		b.Field(3).(*array.Date32Builder).Append(arrow.Date32(r.d))
		b.Field(4).(*array.FixedSizeBinaryBuilder).Append(r.uuid)
		b.Row(change.OpInsert, "")
	}
	rec := b.NewBatch()
	defer rec.Release()
	ipc, err := protocol.EncodeRecord(memory.DefaultAllocator, rec)
	if err != nil {
		t.Fatal(err)
	}
	return ipc
}

// TestQueryExtremeValues: every format answers over ±infinity, the first and the last timestamps and UUIDs,
// in the lake and in the WAL alike, and prints them as DuckDB's own text does: words for ±infinity (never the
// finite instant of a sentinel), "(BC)" years, the microsecond before infinity exactly in a TIMESTAMPTZ, and
// UUIDs as UUIDs.
func TestQueryExtremeValues(t *testing.T) {
	const q = "SELECT id, ts, tz, d, u FROM extremes ORDER BY id"
	for _, c := range []struct {
		format  string
		logical bool // the lake file marks the uuid column with Parquet's UUID logical type
		want    string
	}{
		{"csv", false, `id,ts,tz,d,u
1,infinity,-infinity,infinity,a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11
2,-infinity,294247-01-10 04:00:54.775806+00,-infinity,
3,4714-11-24 (BC) 00:00:00,1970-01-01 00:00:00+00,4714-11-24 (BC),00010203-0405-0607-0809-0a0b0c0d0e0f
4,294247-01-10 04:00:54.775806,infinity,1970-01-01,a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11
`},
		{"csv", true, `id,ts,tz,d,u
1,infinity,-infinity,infinity,a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11
2,-infinity,294247-01-10 04:00:54.775806+00,-infinity,
3,4714-11-24 (BC) 00:00:00,1970-01-01 00:00:00+00,4714-11-24 (BC),00010203-0405-0607-0809-0a0b0c0d0e0f
4,294247-01-10 04:00:54.775806,infinity,1970-01-01,a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11
`},
		{"json", false, `{"id":1,"ts":"infinity","tz":"-infinity","d":"infinity","u":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"}
{"id":2,"ts":"-infinity","tz":"294247-01-10 04:00:54.775806+00","d":"-infinity","u":null}
{"id":3,"ts":"4714-11-24 (BC) 00:00:00","tz":"1970-01-01 00:00:00+00","d":"4714-11-24 (BC)","u":"00010203-0405-0607-0809-0a0b0c0d0e0f"}
{"id":4,"ts":"294247-01-10 04:00:54.775806","tz":"infinity","d":"1970-01-01","u":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"}
`},
		{"table", false, `id   ts                            tz                             d                u
---  ---                           ---                            ---              ---
1    infinity                      -infinity                      infinity         a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11
2    -infinity                     294247-01-10 04:00:54.775806Z  -infinity        NULL
3    4714-11-24 (BC) 00:00:00      1970-01-01 00:00:00Z           4714-11-24 (BC)  00010203-0405-0607-0809-0a0b0c0d0e0f
4    294247-01-10 04:00:54.775806  infinity                       1970-01-01       a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11
`},
	} {
		t.Run(fmt.Sprintf("%s logical=%v", c.format, c.logical), func(t *testing.T) {
			var in bytes.Buffer
			w, err := lakequery.NewWriter(&in, lakequery.Request{SQL: q, Format: c.format,
				Lakes: []lakequery.Lake{{Pipeline: "p", Plan: lakequery.Plan{Namespace: "lake", Tables: []lakequery.TablePlan{extremeLakePlan(t, c.logical)}}}}})
			if err != nil {
				t.Fatal(err)
			}
			w.Entry("p", 2)
			if err := w.Batch("public.extremes", int64(len(extremeWAL)), extremeWALBatch(t)); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if _, err := Answer(context.Background(), &in, &out, Options{TempDir: t.TempDir()}); err != nil {
				t.Fatal(err)
			}
			if out.String() != c.want {
				t.Fatalf("got\n%s\nwant\n%s", out.String(), c.want)
			}
		})
	}
}

// TestQueryJSONFloats: json stays JSON over float NaN and ±Infinity, alone and in lists, where DuckDB's own
// writer puts the bare words; csv keeps DuckDB's text.
func TestQueryJSONFloats(t *testing.T) {
	const q = `SELECT 'NaN'::DOUBLE AS f, [1.5, 'NaN'::DOUBLE, 'Infinity'::DOUBLE, '-Infinity'::DOUBLE, NULL] AS l, ['-Infinity'::FLOAT] AS lf, NULL::DOUBLE[] AS n`
	for _, c := range []struct{ format, want string }{
		{"json", `{"f":"NaN","l":[1.5,"NaN","Infinity","-Infinity",null],"lf":["-Infinity"],"n":null}` + "\n"},
		{"csv", "f,l,lf,n\nnan,\"[1.5, nan, inf, -inf, NULL]\",[-inf],\n"},
	} {
		t.Run(c.format, func(t *testing.T) {
			var in bytes.Buffer
			if _, err := lakequery.NewWriter(&in, lakequery.Request{SQL: q, Format: c.format}); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if _, err := Answer(context.Background(), &in, &out, Options{TempDir: t.TempDir()}); err != nil {
				t.Fatal(err)
			}
			if out.String() != c.want {
				t.Fatalf("got\n%s\nwant\n%s", out.String(), c.want)
			}
			if c.format == "json" {
				var v map[string]any
				if err := json.Unmarshal(out.Bytes(), &v); err != nil {
					t.Fatalf("not JSON: %v", err)
				}
			}
		})
	}
}

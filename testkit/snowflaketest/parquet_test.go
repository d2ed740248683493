package snowflaketest

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// TestParquetReaderOptions: how COPY reads each column of a file arrow-go writes, under the options a
// statement names and Snowflake's documented defaults (BINARY_AS_TEXT = TRUE, USE_LOGICAL_TYPE = FALSE: CREATE
// FILE FORMAT, TYPE = PARQUET).
func TestParquetReaderOptions(t *testing.T) {
	fields := []arrow.Field{
		{Name: "t_us", Type: arrow.FixedWidthTypes.Time64us},                 // logical TIME, no converted type
		{Name: "ts_ns", Type: &arrow.TimestampType{Unit: arrow.Nanosecond}},  // no converted type for ns
		{Name: "ts_us", Type: &arrow.TimestampType{Unit: arrow.Microsecond}}, // TIMESTAMP_MICROS
		{Name: "ts_us_utc", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
		{Name: "bin", Type: arrow.BinaryTypes.Binary},                    // no logical type
		{Name: "fixed", Type: &arrow.FixedSizeBinaryType{ByteWidth: 16}}, // no logical type
		{Name: "str", Type: arrow.BinaryTypes.String},                    // UTF8
		{Name: "n", Type: arrow.PrimitiveTypes.Int64},
		{Name: "d", Type: &arrow.Decimal128Type{Precision: 38, Scale: 2}}, // DECIMAL
	}
	ps, err := pqarrow.ToParquet(arrow.NewSchema(fields, nil), parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	lex := func(q string) []token {
		toks, err := lex(q)
		if err != nil {
			t.Fatal(err)
		}
		return toks
	}
	for _, c := range []struct {
		format        string
		integer, text []string
	}{
		{"FILE_FORMAT = (TYPE = PARQUET)", []string{"t_us", "ts_ns"}, []string{"bin", "fixed"}},
		{"FILE_FORMAT = (TYPE = PARQUET USE_LOGICAL_TYPE = TRUE)", nil, []string{"bin", "fixed"}},
		{"FILE_FORMAT = (TYPE = PARQUET BINARY_AS_TEXT = FALSE)", []string{"t_us", "ts_ns"}, nil},
		{"FILE_FORMAT = (TYPE = PARQUET USE_LOGICAL_TYPE = TRUE BINARY_AS_TEXT = FALSE)", nil, nil},
	} {
		o := readerOptions(lex(c.format))
		for i, f := range fields {
			r := o.readAs(ps.Column(i), f.Name, "")
			if want := contains(c.integer, f.Name); r.integer != want {
				t.Errorf("%s: column %s read as an integer: %v, want %v", c.format, f.Name, r.integer, want)
			}
			if want := contains(c.text, f.Name); r.text != want {
				t.Errorf("%s: column %s read as text: %v, want %v", c.format, f.Name, r.text, want)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

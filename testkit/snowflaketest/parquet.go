package snowflaketest

import (
	"encoding/hex"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

// How COPY reads a Parquet file depends on two options of the file format (docs.snowflake.com/en/sql-reference
// /sql/create-file-format, "TYPE = PARQUET"): BINARY_AS_TEXT, "whether to interpret columns with no defined
// logical data type as UTF-8 text. When set to FALSE, Snowflake interprets these columns as binary data",
// default TRUE; and USE_LOGICAL_TYPE, "whether to use Parquet logical types", default FALSE — without it only
// the legacy converted types are read, so a column that has a logical type but no converted type (a TIME that
// is not adjusted to UTC, as arrow-go writes Arrow's time types; any nanosecond TIME or TIMESTAMP) is its
// physical integer. The stand-in reads the way those options say, then converts each value to the target
// column's type as Snowflake's casts do (…/sql-reference/data-type-conversion): text into BINARY is decoded
// as hex (BINARY_INPUT_FORMAT's default), a number into TIME is not a conversion Snowflake has, a number into
// a TIMESTAMP is seconds since the epoch (…/functions/to_timestamp).
type parquetOptions struct{ binaryAsText, useLogicalType bool }

// readerOptions reads FILE_FORMAT = (TYPE = PARQUET [USE_LOGICAL_TYPE = …] [BINARY_AS_TEXT = …]) with the
// documented defaults.
func readerOptions(toks []token) parquetOptions {
	o := parquetOptions{binaryAsText: true, useLogicalType: false}
	for i := 0; i+2 < len(toks); i++ {
		if toks[i+1].text != "=" {
			continue
		}
		v := strings.EqualFold(toks[i+2].text, "TRUE")
		switch toks[i].text {
		case "BINARY_AS_TEXT":
			o.binaryAsText = v
		case "USE_LOGICAL_TYPE":
			o.useLogicalType = v
		}
	}
	return o
}

// read is how one file column is read and converted into its target column.
type read struct {
	column  string
	target  string // the PostgreSQL type the stand-in keeps the Snowflake column in
	integer bool   // read as its physical integer (a logical type without a converted type, USE_LOGICAL_TYPE off)
	text    bool   // bytes read as UTF-8 text (no logical type, BINARY_AS_TEXT on)
}

func (o parquetOptions) readAs(c *schema.Column, column, target string) read {
	r := read{column: column, target: target}
	legacy := c.ConvertedType() == schema.ConvertedTypes.None
	noLogical := c.LogicalType() == nil || c.LogicalType().Equals(schema.NoLogicalType{})
	switch c.PhysicalType() {
	case parquet.Types.Int32, parquet.Types.Int64:
		r.integer = legacy && !noLogical && !o.useLogicalType
	case parquet.Types.ByteArray, parquet.Types.FixedLenByteArray:
		r.text = legacy && noLogical && o.binaryAsText
	}
	return r
}

// loadErr is a value COPY refuses.
type loadErr struct {
	code  int
	state string
	msg   string
}

// value is row i of a in PostgreSQL's input syntax for the target column, read as the options say.
func (r read) value(a arrow.Array, i int) (string, *loadErr) {
	switch {
	case r.integer:
		n := physical(a, i)
		switch {
		case r.target == "time without time zone":
			return "", &loadErr{100037, "22018", "Numeric value '" + strconv.FormatInt(n, 10) + "' cannot be converted to TIME"}
		case strings.HasPrefix(r.target, "timestamp"):
			if n < -62135596800 || n > 253402300799 {
				return "", &loadErr{100035, "22007", "Timestamp '" + strconv.FormatInt(n, 10) + "' is not recognized"}
			}
			return time.Unix(n, 0).UTC().Format("2006-01-02 15:04:05"), nil
		}
		return strconv.FormatInt(n, 10), nil
	case r.text:
		var b []byte
		switch v := a.(type) {
		case *array.Binary:
			b = v.Value(i)
		case *array.LargeBinary:
			b = v.Value(i)
		case *array.FixedSizeBinary:
			b = v.Value(i)
		default:
			return text(a, i), nil
		}
		if !utf8.Valid(b) {
			return "", &loadErr{100069, "22P02", "Invalid UTF8 detected in string '" + hex.EncodeToString(b) + "'"}
		}
		if r.target == "bytea" {
			d, err := hex.DecodeString(string(b))
			if err != nil {
				return "", &loadErr{100115, "22000", "The following string is not a legal hex-encoded value: '" + string(b) + "'"}
			}
			return `\x` + hex.EncodeToString(d), nil
		}
		return string(b), nil
	}
	return text(a, i), nil
}

// physical is the integer a time or timestamp value is stored as in the file (its unit is the file's).
func physical(a arrow.Array, i int) int64 {
	switch v := a.(type) {
	case *array.Time32:
		return int64(v.Value(i))
	case *array.Time64:
		return int64(v.Value(i))
	case *array.Timestamp:
		return int64(v.Value(i))
	case *array.Int32:
		return int64(v.Value(i))
	case *array.Int64:
		return v.Value(i)
	}
	n, _ := strconv.ParseInt(a.ValueStr(i), 10, 64)
	return n
}

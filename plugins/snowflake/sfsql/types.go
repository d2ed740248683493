// Package sfsql is the Snowflake SQL the destination emits: identifiers, the Arrow → Snowflake type mapping,
// and one builder per statement shape. Every statement the plugin sends is built here, so the golden tests of
// this package (checked against grammar rules written down from Snowflake's documentation, see grammar_test.go)
// cover everything that reaches a warehouse.
package sfsql

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// MaxScale is the largest scale of Snowflake's NUMBER: "The maximum scale … is 37"
// (docs.snowflake.com/en/sql-reference/data-types-numeric).
const MaxScale = 37

// Type is a Snowflake column type: the base name as INFORMATION_SCHEMA.COLUMNS reports it (NUMBER, FLOAT, TEXT,
// BINARY, BOOLEAN, DATE, TIME, TIMESTAMP_NTZ, TIMESTAMP_TZ, VARIANT, OBJECT, ARRAY) and, for NUMBER, its
// precision and scale.
type Type struct {
	Base      string
	Precision int
	Scale     int
}

// DDL is the type as written in CREATE TABLE.
func (t Type) DDL() string {
	switch t.Base {
	case "NUMBER":
		return fmt.Sprintf("NUMBER(%d,%d)", t.Precision, t.Scale)
	case "TEXT":
		return "VARCHAR"
	case "TIME":
		return "TIME(9)"
	case "TIMESTAMP_NTZ", "TIMESTAMP_TZ":
		return t.Base + "(9)"
	}
	return t.Base
}

func (t Type) String() string { return t.DDL() }

// Nested says values travel as JSON text and are parsed on the way into the table (PARSE_JSON).
func (t Type) Nested() bool { return t.Base == "VARIANT" || t.Base == "OBJECT" || t.Base == "ARRAY" }

// StageDDL is the type of the column in the staging table the Parquet file is copied into: nested values
// stay JSON text there.
func (t Type) StageDDL() string {
	if t.Nested() {
		return "VARCHAR"
	}
	return t.DDL()
}

// IsJSON says an Arrow type is the JSON extension (jsonb from Postgres, JSON from MySQL).
func IsJSON(dt arrow.DataType) bool {
	e, ok := dt.(arrow.ExtensionType)
	return ok && strings.Contains(strings.ToLower(e.ExtensionName()), "json")
}

// Of maps an Arrow type to its Snowflake column type; README.md has the table. An error names the type.
func Of(dt arrow.DataType) (Type, error) {
	if IsJSON(dt) {
		return Type{Base: "VARIANT"}, nil
	}
	// Any other extension type is its storage: the postgres source's uuid is fixed_size_binary[16] marked
	// arrow.uuid, a BINARY like any fixed_size_binary.
	if e, ok := dt.(arrow.ExtensionType); ok {
		return Of(e.StorageType())
	}
	switch t := dt.(type) {
	case *arrow.NullType, *arrow.StringType, *arrow.LargeStringType, *arrow.StringViewType:
		return Type{Base: "TEXT"}, nil
	case *arrow.BooleanType:
		return Type{Base: "BOOLEAN"}, nil
	case *arrow.Int8Type, *arrow.Int16Type, *arrow.Int32Type, *arrow.Int64Type,
		*arrow.Uint8Type, *arrow.Uint16Type, *arrow.Uint32Type:
		return Type{Base: "NUMBER", Precision: 38, Scale: 0}, nil
	case *arrow.Uint64Type:
		return Type{Base: "NUMBER", Precision: 38, Scale: 0}, nil
	case *arrow.Float16Type, *arrow.Float32Type, *arrow.Float64Type:
		return Type{Base: "FLOAT"}, nil
	case *arrow.Decimal128Type:
		if t.Precision < 1 || t.Precision > 38 || t.Scale < 0 || t.Scale > t.Precision {
			return Type{}, fmt.Errorf("arrow type %s does not fit Snowflake's NUMBER(38, 0..37)", dt)
		}
		// NUMBER(38, s) rather than (p, s): a source column widened later needs no ALTER, and Snowflake stores
		// both alike. A scale past MaxScale (decimal(38,38)) takes MaxScale: its values whose last digit is 0
		// load exactly, and the plugin refuses, value by value, those that need it (dest.convert).
		return Type{Base: "NUMBER", Precision: 38, Scale: min(int(t.Scale), MaxScale)}, nil
	case *arrow.BinaryType, *arrow.LargeBinaryType, *arrow.BinaryViewType, *arrow.FixedSizeBinaryType:
		return Type{Base: "BINARY"}, nil
	case *arrow.Date32Type:
		return Type{Base: "DATE"}, nil
	case *arrow.Time32Type, *arrow.Time64Type:
		return Type{Base: "TIME"}, nil
	case *arrow.TimestampType:
		if t.TimeZone != "" {
			return Type{Base: "TIMESTAMP_TZ"}, nil
		}
		return Type{Base: "TIMESTAMP_NTZ"}, nil
	case *arrow.StructType, *arrow.MapType:
		return Type{Base: "OBJECT"}, nil
	case *arrow.ListType, *arrow.LargeListType, *arrow.FixedSizeListType:
		return Type{Base: "ARRAY"}, nil
	case *arrow.DictionaryType:
		return Of(t.ValueType)
	}
	return Type{}, fmt.Errorf("arrow type %s has no Snowflake mapping", dt)
}

// Widen says how a table column of type have takes values of type want: ok with no change, or with
// ALTER COLUMN … SET DATA TYPE to the returned type (Snowflake raises a NUMBER's precision, never its scale),
// or not at all (ok false).
func Widen(have, want Type) (alter *Type, ok bool) {
	switch {
	case have.Base == want.Base && have.Base != "NUMBER":
		return nil, true
	case have.Base == "NUMBER" && want.Base == "NUMBER":
		if have.Scale != want.Scale {
			return nil, false
		}
		if have.Precision >= want.Precision {
			return nil, true
		}
		w := want
		return &w, true
	case have.Base == "VARIANT" && want.Nested():
		return nil, true
	}
	return nil, false
}

// ParseType reads a type as INFORMATION_SCHEMA.COLUMNS reports it: DATA_TYPE and, for NUMBER, precision and
// scale. VARCHAR/STRING report as TEXT there, and DOUBLE/REAL as FLOAT.
func ParseType(dataType string, precision, scale int) Type {
	b := strings.ToUpper(strings.TrimSpace(dataType))
	if i := strings.IndexByte(b, '('); i >= 0 {
		b = b[:i]
	}
	switch b {
	case "VARCHAR", "STRING", "CHAR", "CHARACTER":
		b = "TEXT"
	case "DOUBLE", "REAL", "FLOAT4", "FLOAT8", "DOUBLE PRECISION":
		b = "FLOAT"
	case "DECIMAL", "NUMERIC", "INT", "INTEGER", "BIGINT", "SMALLINT":
		b = "NUMBER"
	case "VARBINARY":
		b = "BINARY"
	case "DATETIME", "TIMESTAMP":
		b = "TIMESTAMP_NTZ"
	}
	t := Type{Base: b}
	if b == "NUMBER" {
		t.Precision, t.Scale = precision, scale
		if t.Precision == 0 {
			t.Precision = 38
		}
	}
	return t
}

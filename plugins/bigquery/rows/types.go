// Package rows maps Arrow columns to BigQuery columns and encodes change rows as the protobuf rows the
// Storage Write API takes. It holds the plugin's one definition of the type mapping (the README's table is
// written from Column), and an encoder that writes protobuf wire format straight from the Arrow arrays:
// building a dynamicpb message per row was the obvious alternative, and it allocates a map entry per value.
//
// Every encoded row is a proto2 message whose field n+1 is staging column n (see Descriptor). Values go in
// the wire types the Storage Write API documents for each BigQuery type ("Supported protocol buffer data
// types"): INT64 as int64, FLOAT64 as double, BOOL as bool, STRING/JSON as string, BYTES as bytes, DATE as
// int32 days since 1970-01-01, TIMESTAMP as int64 microseconds since the epoch, and NUMERIC, BIGNUMERIC,
// DATETIME and TIME as their canonical strings (the API takes a string or a packed binary form for these; the
// string form cannot be mis-packed and costs a few bytes more).
package rows

import (
	"fmt"
	"strings"

	"cloud.google.com/go/bigquery"
	"github.com/apache/arrow-go/v18/arrow"
)

// MetaPostgresType is the field metadata key the Postgres source sets to the column's type: json and jsonb
// columns arrive as strings and become JSON columns.
const MetaPostgresType = "postgres.type"

const extensionName = "ARROW:extension:name"

// Type names as GoogleSQL spells them; the REST API also answers with the legacy names, which Canonical maps.
const (
	Int64      bigquery.FieldType = "INT64"
	Float64    bigquery.FieldType = "FLOAT64"
	Bool       bigquery.FieldType = "BOOL"
	String     bigquery.FieldType = "STRING"
	Bytes      bigquery.FieldType = "BYTES"
	Numeric    bigquery.FieldType = "NUMERIC"
	BigNumeric bigquery.FieldType = "BIGNUMERIC"
	Date       bigquery.FieldType = "DATE"
	Time       bigquery.FieldType = "TIME"
	DateTime   bigquery.FieldType = "DATETIME"
	Timestamp  bigquery.FieldType = "TIMESTAMP"
	JSON       bigquery.FieldType = "JSON"
	Struct     bigquery.FieldType = "STRUCT"
)

// Canonical maps a type name the REST API may use (INTEGER, FLOAT, BOOLEAN, RECORD) to its GoogleSQL name.
func Canonical(t bigquery.FieldType) bigquery.FieldType {
	switch strings.ToUpper(string(t)) {
	case "INTEGER", "INT64":
		return Int64
	case "FLOAT", "FLOAT64":
		return Float64
	case "BOOLEAN", "BOOL":
		return Bool
	case "RECORD", "STRUCT":
		return Struct
	}
	return bigquery.FieldType(strings.ToUpper(string(t)))
}

// NUMERIC holds 29 digits before the point and 9 after; BIGNUMERIC 38 before and 38 after.
const (
	numericInt, numericScale       = 29, 9
	bigNumericInt, bigNumericScale = 38, 38
)

// Column is the BigQuery column an Arrow field becomes, named name; every column is NULLABLE (or REPEATED for a
// list), since a delete carries only its key. A type BigQuery has no column for becomes STRING or JSON, never
// an error: Arrow's text or JSON form of the value is kept.
func Column(name string, f arrow.Field) *bigquery.FieldSchema {
	fs := &bigquery.FieldSchema{Name: name}
	fs.Type, fs.Repeated, fs.Schema = columnType(f)
	return fs
}

func columnType(f arrow.Field) (bigquery.FieldType, bool, bigquery.Schema) {
	if ext, ok := f.Metadata.GetValue(extensionName); ok && ext == "arrow.uuid" {
		return String, false, nil
	}
	switch t := f.Type.(type) {
	case arrow.ExtensionType:
		return columnType(arrow.Field{Name: f.Name, Type: t.StorageType()})
	case *arrow.DictionaryType:
		return columnType(arrow.Field{Name: f.Name, Type: t.ValueType, Metadata: f.Metadata})
	case *arrow.BooleanType:
		return Bool, false, nil
	case *arrow.Int8Type, *arrow.Int16Type, *arrow.Int32Type, *arrow.Int64Type,
		*arrow.Uint8Type, *arrow.Uint16Type, *arrow.Uint32Type:
		return Int64, false, nil
	case *arrow.Uint64Type:
		return Numeric, false, nil
	case *arrow.Float16Type, *arrow.Float32Type, *arrow.Float64Type:
		return Float64, false, nil
	case arrow.DecimalType:
		p, s := t.GetPrecision(), t.GetScale()
		switch {
		case s < 0:
			return String, false, nil
		case s <= numericScale && p-s <= numericInt:
			return Numeric, false, nil
		case s <= bigNumericScale && p-s <= bigNumericInt:
			return BigNumeric, false, nil
		}
		return String, false, nil
	case *arrow.StringType, *arrow.LargeStringType, *arrow.StringViewType:
		if pt, ok := f.Metadata.GetValue(MetaPostgresType); ok && (pt == "json" || pt == "jsonb") {
			return JSON, false, nil
		}
		return String, false, nil
	case *arrow.BinaryType, *arrow.LargeBinaryType, *arrow.BinaryViewType, *arrow.FixedSizeBinaryType:
		return Bytes, false, nil
	case *arrow.Date32Type, *arrow.Date64Type:
		return Date, false, nil
	case *arrow.Time32Type, *arrow.Time64Type:
		return Time, false, nil
	case *arrow.TimestampType:
		if t.TimeZone == "" {
			return DateTime, false, nil
		}
		return Timestamp, false, nil
	case *arrow.ListType, *arrow.LargeListType, *arrow.FixedSizeListType:
		elem := t.(arrow.ListLikeType).ElemField()
		et, rep, sub := columnType(elem)
		if rep || et == JSON {
			// BigQuery has no array of arrays; an array of JSON would hide the nesting anyway.
			return JSON, false, nil
		}
		return et, true, sub
	case *arrow.StructType:
		var sub bigquery.Schema
		for _, c := range t.Fields() {
			if !protoName(c.Name) {
				// A STRUCT's field names travel as protobuf field names, which allow less than column names.
				return JSON, false, nil
			}
			sub = append(sub, Column(c.Name, c))
		}
		if len(sub) == 0 {
			return JSON, false, nil
		}
		return Struct, false, sub
	case *arrow.MapType:
		return JSON, false, nil
	}
	return String, false, nil
}

// protoName says whether name can be a protobuf field name.
func protoName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Describe renders a column's type as GoogleSQL does (ARRAY<STRUCT<a INT64>>), for messages and DDL.
func Describe(fs *bigquery.FieldSchema) string {
	t := string(Canonical(fs.Type))
	if Canonical(fs.Type) == Struct {
		parts := make([]string, len(fs.Schema))
		for i, c := range fs.Schema {
			parts[i] = c.Name + " " + Describe(c)
		}
		t = "STRUCT<" + strings.Join(parts, ", ") + ">"
	}
	if fs.Repeated {
		t = "ARRAY<" + t + ">"
	}
	return t
}

// SameType says whether two columns hold the same type (names of nested fields compared without regard to
// case, as BigQuery compares them).
func SameType(a, b *bigquery.FieldSchema) bool {
	if Canonical(a.Type) != Canonical(b.Type) || a.Repeated != b.Repeated || len(a.Schema) != len(b.Schema) {
		return false
	}
	for i := range a.Schema {
		if !strings.EqualFold(a.Schema[i].Name, b.Schema[i].Name) || !SameType(a.Schema[i], b.Schema[i]) {
			return false
		}
	}
	return true
}

// CheckName refuses a column name BigQuery does not take (BigQuery, "Specify a schema", Column names): 1 to
// 300 characters, none of the characters flexible column names forbid, and none of the reserved prefixes.
// tables.insert and tables.patch answer such a name with a 400 that no retry changes, so the plugin refuses
// it first and names the column.
func CheckName(name string) error {
	if name == "" || len([]rune(name)) > 300 {
		return fmt.Errorf("column name %q: BigQuery column names have 1 to 300 characters", name)
	}
	if i := strings.IndexAny(name, ForbiddenNameChars); i >= 0 {
		return fmt.Errorf("column name %q: BigQuery column names cannot contain %q (flexible column names forbid %s)", name, name[i], ForbiddenNameChars)
	}
	for _, p := range ReservedPrefixes {
		if strings.HasPrefix(strings.ToUpper(name), p) {
			return fmt.Errorf("column name %q: BigQuery reserves the prefix %s", name, p)
		}
	}
	return nil
}

// ForbiddenNameChars are the characters BigQuery's flexible column names do not support.
const ForbiddenNameChars = "!\"$()*,./;?@[\\]^`{}~"

// ReservedPrefixes are the column name prefixes BigQuery reserves (compared without regard to case).
var ReservedPrefixes = []string{"_PARTITION", "_TABLE_", "_FILE_", "_ROW_TIMESTAMP", "__ROOT__", "_COLIDENTIFIER",
	"_CHANGE_SEQUENCE_NUMBER", "_CHANGE_TYPE", "_CHANGE_TIMESTAMP"}

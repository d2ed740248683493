// Package ducksql names Arrow types and identifiers in DuckDB's SQL, for the destination (the tables it
// creates) and the query engine (the lake columns it reads) alike.
package ducksql

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// maxDecimalWidth is DuckDB's widest DECIMAL; wider Arrow decimals travel as text so no digit is lost.
const maxDecimalWidth = 38

// ColumnType is the DuckDB type of a column holding values of Arrow type dt. README.md has the table.
func Type(dt arrow.DataType) (string, error) {
	switch t := dt.(type) {
	case *arrow.NullType:
		return "VARCHAR", nil
	case *arrow.BooleanType:
		return "BOOLEAN", nil
	case *arrow.Int8Type:
		return "TINYINT", nil
	case *arrow.Int16Type:
		return "SMALLINT", nil
	case *arrow.Int32Type:
		return "INTEGER", nil
	case *arrow.Int64Type:
		return "BIGINT", nil
	case *arrow.Uint8Type:
		return "UTINYINT", nil
	case *arrow.Uint16Type:
		return "USMALLINT", nil
	case *arrow.Uint32Type:
		return "UINTEGER", nil
	case *arrow.Uint64Type:
		return "UBIGINT", nil
	case *arrow.Float16Type, *arrow.Float32Type:
		return "FLOAT", nil
	case *arrow.Float64Type:
		return "DOUBLE", nil
	case arrow.DecimalType:
		if DecimalAsText(t.GetPrecision(), t.GetScale()) {
			return "VARCHAR", nil
		}
		return fmt.Sprintf("DECIMAL(%d,%d)", t.GetPrecision(), t.GetScale()), nil
	case *arrow.StringType, *arrow.LargeStringType, *arrow.StringViewType:
		return "VARCHAR", nil
	case *arrow.BinaryType, *arrow.LargeBinaryType, *arrow.BinaryViewType, *arrow.FixedSizeBinaryType:
		return "BLOB", nil
	case *arrow.Date32Type, *arrow.Date64Type:
		return "DATE", nil
	case *arrow.Time32Type, *arrow.Time64Type:
		return "TIME", nil
	case *arrow.TimestampType:
		switch {
		case t.TimeZone != "":
			return "TIMESTAMPTZ", nil
		case t.Unit == arrow.Nanosecond:
			return "TIMESTAMP_NS", nil
		}
		return "TIMESTAMP", nil
	case *arrow.DurationType, *arrow.MonthIntervalType, *arrow.DayTimeIntervalType, *arrow.MonthDayNanoIntervalType:
		return "INTERVAL", nil
	case *arrow.ListType:
		return listOf(t.Elem())
	case *arrow.LargeListType:
		return listOf(t.Elem())
	case *arrow.FixedSizeListType:
		return listOf(t.Elem())
	case *arrow.ListViewType:
		return listOf(t.Elem())
	case *arrow.LargeListViewType:
		return listOf(t.Elem())
	case *arrow.MapType:
		k, err := Type(t.KeyType())
		if err != nil {
			return "", err
		}
		v, err := Type(t.ItemType())
		if err != nil {
			return "", err
		}
		return "MAP(" + k + ", " + v + ")", nil
	case *arrow.StructType:
		if t.NumFields() == 0 {
			return "", fmt.Errorf("struct type %s has no fields; DuckDB has no empty STRUCT", dt)
		}
		parts := make([]string, t.NumFields())
		for i, f := range t.Fields() {
			ft, err := Type(f.Type)
			if err != nil {
				return "", fmt.Errorf("struct field %s: %w", f.Name, err)
			}
			parts[i] = Ident(f.Name) + " " + ft
		}
		return "STRUCT(" + strings.Join(parts, ", ") + ")", nil
	case *arrow.DictionaryType:
		return Type(t.ValueType)
	case arrow.ExtensionType:
		// JSON, UUID, opaque and user extensions land as their storage (JSON text as VARCHAR).
		return Type(t.StorageType())
	}
	return "", fmt.Errorf("arrow type %s has no DuckDB mapping", dt)
}

func listOf(elem arrow.DataType) (string, error) {
	e, err := Type(elem)
	if err != nil {
		return "", err
	}
	return e + "[]", nil
}

// Ident quotes a DuckDB identifier.
func Ident(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Literal quotes a DuckDB string literal.
func Literal(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

// DecimalAsText says a decimal does not fit DuckDB's DECIMAL(1..38, 0..width) and is kept as text.
func DecimalAsText(precision, scale int32) bool {
	return precision < 1 || precision > maxDecimalWidth || scale < 0 || scale > precision
}

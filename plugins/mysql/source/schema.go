package source

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

// TableDef is a captured table's schema as the checkpoint keeps it: the schema history lives in the
// checkpoint, so a restart decodes the binary log after its position with the columns current at that
// position, whatever DDL ran since (the server's catalog shows only the newest schema). Debezium keeps the
// same history in a separate topic, which can be lost apart from the offsets; here they are one record.
type TableDef struct {
	Columns []ColumnDef `json:"cols,omitempty"`
	Key     []string    `json:"key,omitempty"`
	// Gone: the table was dropped or renamed away; its rows come back only after a CREATE TABLE.
	Gone bool `json:"gone,omitempty"`
	// RenamedFrom is the table's name before the statement that renamed a captured table to this captured name
	// (RENAME TABLE, ALTER TABLE … RENAME): its stream goes on under the new name, and its schema is announced
	// with change.RenamedFromTableMeta (the former stream) so destinations rename their table. The next ALTER of
	// the table clears it, as it clears the columns' RenamedFrom.
	RenamedFrom string `json:"rf,omitempty"`
}

// ColumnDef is one column of a TableDef: what information_schema (at the start) or a parsed DDL (later) says.
type ColumnDef struct {
	Name       string `json:"n"`
	DataType   string `json:"t"`            // information_schema DATA_TYPE, lower case: int, varchar...
	ColumnType string `json:"ct"`           // COLUMN_TYPE: int(10) unsigned, enum('a','b')...
	Precision  int32  `json:"p,omitempty"`  // decimal precision
	Scale      int32  `json:"s,omitempty"`  // decimal scale, fractional seconds of datetime/timestamp/time
	Charset    string `json:"cs,omitempty"` // text columns' character set, "" when unknown (taken as utf8mb4)
	// Existing is the value rows that existed before an ADD COLUMN hold without any change saying so (its
	// DEFAULT, or the implicit default of a NOT NULL column), in text form; nil when they hold NULL.
	Existing *string `json:"x,omitempty"`
	// RenamedFrom is the column's name before the ALTER TABLE that last changed the table, when that statement
	// renamed it (RENAME COLUMN, CHANGE COLUMN): announced as change.RenamedFromMeta so destinations rename
	// instead of adding a column. The next ALTER of the table clears it (its schema change comes after).
	RenamedFrom string `json:"rf,omitempty"`
}

// build makes the table the streamer decodes rows with from its definition; fullRow: the table is in mode:
// full_row (fullrow.go), which needs it keyless.
func (d TableDef) build(name, stream string, fullRow bool) (*Table, error) {
	t := &Table{Name: name, Stream: stream, FullRow: fullRow}
	var problems []string
	for _, cd := range d.Columns {
		col := Column{Name: cd.Name, DataType: cd.DataType, ColumnType: cd.ColumnType, Precision: cd.Precision, Scale: cd.Scale, existing: cd.Existing, renamedFrom: cd.RenamedFrom}
		if err := col.classify(strings.ToLower(cd.Charset)); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		t.Columns = append(t.Columns, col)
	}
	if len(problems) > 0 {
		return nil, fault.ConfigErr(fmt.Errorf("table %s: %s", stream, strings.Join(problems, "; ")),
			"leave the table out of tables, or change the column's type")
	}
	for _, k := range d.Key {
		found := false
		for i, col := range t.Columns {
			if col.Name == k {
				t.Key, found = append(t.Key, i), true
			}
		}
		if !found {
			return nil, fmt.Errorf("table %s: primary key column %s is not among its columns", stream, k)
		}
	}
	if fullRow && len(t.Key) > 0 {
		return nil, fault.ConfigErr(fmt.Errorf("table %s is in mode: full_row but has a primary key (%s)", stream, strings.Join(t.keyNames(), ", ")),
			fmt.Sprintf("remove mode: full_row from table_options.%s: a table with a key is matched by it", name))
	}
	if len(t.Key) == 0 && !fullRow {
		return nil, fault.ConfigErr(fmt.Errorf("table %s has no primary key: its changes cannot be matched to rows", stream),
			fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (...), or set table_options.%s.mode: full_row (changes matched by the whole row), or leave it out of tables", stream, name))
	}
	fields := make([]arrow.Field, len(t.Columns))
	for i, col := range t.Columns {
		keys, vals := []string{MetaType}, []string{col.ColumnType}
		if col.existing != nil {
			keys, vals = append(keys, values.MetaExistingRows), append(vals, *col.existing)
		}
		fields[i] = change.MarkRenamed(arrow.Field{Name: col.Name, Type: col.Kind.Arrow(col), Nullable: true, Metadata: arrow.NewMetadata(keys, vals)}, col.renamedFrom)
	}
	t.Schema = change.TimedSchema(fields, t.keyNames())
	if fullRow {
		t.Schema = change.WithFullRow(t.Schema)
	}
	if d.RenamedFrom != "" {
		t.Schema = change.MarkRenamedTable(t.Schema, strings.TrimSuffix(stream, name)+d.RenamedFrom)
	}
	t.def = d
	return t, nil
}

// sameLayout reports whether two definitions decode rows alike: the same columns in the same order with the
// same types and key. (Existing values and column type spelling do not change how a row decodes.)
func sameLayout(a, b TableDef) bool {
	if a.Gone != b.Gone || len(a.Columns) != len(b.Columns) || strings.Join(a.Key, "\x00") != strings.Join(b.Key, "\x00") {
		return false
	}
	for i := range a.Columns {
		x, y := a.Columns[i], b.Columns[i]
		if x.Name != y.Name || x.DataType != y.DataType || x.Precision != y.Precision || x.Scale != y.Scale {
			return false
		}
	}
	return true
}

package dest

import (
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/scalar"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

// Rows that existed before a column was added hold, at the source, the value it was added with
// (values.MetaExistingRows: PostgreSQL's ADD COLUMN … DEFAULT fills them without logging a change). Iceberg
// format v3 says so in the schema itself: a field's initial-default is what rows of data files written before
// the field existed read (spec, "Default values"). iceberg-go v0.7.0 writes it (UpdateSchema.AddColumn's
// default, refused below v3) and its reader fills it in (compaction rewrites files through it); `skippr
// query` reads the data files with DuckDB, whose read_parquet takes the value as the field's default_value
// from the plan (PlanTables, lakequery.MetaInitialDefault). Nothing is rewritten, and it is part of the schema
// update committed with the rows and the fence, so a replay finds the column and adds nothing.
// Only an added column gets it: a row set to NULL later is NULL in a file that has the field.
//
// Format v2 has no initial-default: a v2 table's live data files are rewritten with the value in the same
// commit (fill.go).

// withInitialDefaults gives each top-level field of as (the Arrow form of sc) that has an initial-default
// the lakequery.MetaInitialDefault metadata: the value as text a SQL CAST to the column's type reads.
func withInitialDefaults(sc *iceberg.Schema, as *arrow.Schema) (*arrow.Schema, error) {
	fields := as.Fields()
	changed := false
	for i, f := range sc.Fields() {
		if f.InitialDefault == nil || i >= len(fields) {
			continue
		}
		text, err := defaultText(f)
		if err != nil {
			return nil, err
		}
		md := fields[i].Metadata
		fields[i].Metadata = arrow.NewMetadata(append(md.Keys(), lakequery.MetaInitialDefault), append(md.Values(), text))
		changed = true
	}
	if !changed {
		return as, nil
	}
	md := as.Metadata()
	return arrow.NewSchema(fields, &md), nil
}

// defaultText is a field's initial-default as text: iceberg-go's literal of it, printed (a timestamp with
// time zone, which iceberg-go prints without one, in UTC).
func defaultText(f iceberg.NestedField) (string, error) {
	var lit iceberg.Literal
	v := f.InitialDefault
	// Read back from the table metadata, a date, time or timestamp is its number (days or microseconds).
	var n int64
	isNum := true
	switch x := v.(type) {
	case int32:
		n = int64(x)
	case int64:
		n = x
	case int:
		n = int64(x)
	case float64:
		n = int64(x)
	default:
		isNum = false
	}
	switch f.Type.(type) {
	case iceberg.DateType:
		if isNum {
			v = iceberg.Date(n)
		}
	case iceberg.TimeType:
		if isNum {
			v = iceberg.Time(n)
		}
	case iceberg.TimestampType, iceberg.TimestampTzType:
		if isNum {
			v = iceberg.Timestamp(n)
		}
	}
	switch v := v.(type) {
	case bool:
		lit = iceberg.NewLiteral(v)
	case int32:
		lit = iceberg.NewLiteral(v)
	case int64:
		lit = iceberg.NewLiteral(v)
	case float32:
		lit = iceberg.NewLiteral(v)
	case float64:
		lit = iceberg.NewLiteral(v)
	case string:
		return v, nil
	case iceberg.Date:
		lit = iceberg.NewLiteral(v)
	case iceberg.Time:
		lit = iceberg.NewLiteral(v)
	case iceberg.Timestamp:
		lit = iceberg.NewLiteral(v)
	case iceberg.Decimal:
		lit = iceberg.NewLiteral(v)
	default:
		return "", fmt.Errorf("column %s: initial default %v (%T) has no text form skippr query reads", f.Name, v, v)
	}
	text := lit.String()
	if t, ok := f.Type.(iceberg.TimestampTzType); ok && t == (iceberg.TimestampTzType{}) {
		text += "+00"
	}
	return text, nil
}

// initialDefaults gives the top-level columns changes add the value their existing rows hold at the source
// (values.MetaExistingRows), converted from its text by iceberg-go's literal conversion (the one its
// expressions use). A v3 table gets it as the column's initial-default, a v2 table in rewritten data files
// (fill.go). A value that does not convert is logged: those rows read NULL.
func (a *tableAttempt) initialDefaults(name string, sc *arrow.Schema, changes []schemaChange) {
	v3 := a.tbl.Metadata().Version() >= 3
	for i, c := range changes {
		if c.kind != addColumn || len(c.path) != 1 {
			continue
		}
		idx := sc.FieldIndices(c.path[0])
		if len(idx) != 1 {
			continue
		}
		v, ok := sc.Field(idx[0]).Metadata.GetValue(values.MetaExistingRows)
		if !ok {
			continue
		}
		lit, err := initialDefault(v, c.typ)
		if err == nil && v3 {
			// What skippr query reads must print (PlanTables): a type it cannot is left out here.
			_, err = defaultText(iceberg.NestedField{Name: c.path[0], Type: c.typ, InitialDefault: lit.Any()})
		}
		if err == nil && !v3 {
			// A v2 table writes the value into the rewritten files (fill.go): it must make a column.
			err = fillable(lit, c.typ)
		}
		if err != nil {
			a.d.log().Warn("an added column's existing rows hold a value at the source that does not convert to the column's type: they read NULL here",
				"table", name, "column", c.path[0], "type", c.typ.String(), "value_at_source", v, "err", err)
			continue
		}
		a.initials = append(a.initials, initialFill{column: c.path[0], lit: lit, before: -1})
		if !v3 {
			a.d.log().Info("added a column; existing rows get the value they hold at the source (format v2: their data files are rewritten in this commit)",
				"table", name, "column", c.path[0], "value", v)
			continue
		}
		changes[i].initial = lit
		a.d.log().Info("added a column; existing rows read the value they hold at the source (initial-default)",
			"table", name, "column", c.path[0], "value", v)
	}
}

// initialDefault converts the text of a value to a literal of typ.
func initialDefault(text string, typ iceberg.Type) (iceberg.Literal, error) {
	lit, err := iceberg.NewLiteral(text).To(typ)
	if err != nil {
		return nil, err
	}
	if !lit.Type().Equals(typ) {
		return nil, fmt.Errorf("%s converts to %s, not %s", text, lit.Type(), typ)
	}
	return lit, nil
}

// initialFill is a column this attempt adds with an initial-default, and how many of its batches came before
// the schema that added it (-1 until changes knows). Those batches are rows written before the ADD COLUMN at
// the source, where they hold the value too; written now, in the final schema, they would hold NULL.
type initialFill struct {
	column string
	lit    iceberg.Literal
	before int
}

// initialsBefore notes, for the columns the last evolve gave an initial-default, that n batches came before.
func (a *tableAttempt) initialsBefore(n int) {
	for i := range a.initials {
		if a.initials[i].before < 0 {
			a.initials[i].before = n
		}
	}
}

// fillInitials gives batch i (rec, conformed from a batch of schema src) the initial-default of each column
// added after it that src lacks.
func (a *tableAttempt) fillInitials(rec arrow.RecordBatch, src *arrow.Schema, i int) (arrow.RecordBatch, error) {
	for _, f := range a.initials {
		if i >= f.before || src.HasField(f.column) {
			continue
		}
		idx := rec.Schema().FieldIndices(f.column)
		if len(idx) != 1 {
			continue
		}
		col, err := literalArray(a.mem, f.lit, rec.Schema().Field(idx[0]).Type, int(rec.NumRows()))
		if err != nil {
			rec.Release()
			return nil, fmt.Errorf("column %s: the value of rows written before it was added: %w", f.column, err)
		}
		cols := slices.Clone(rec.Columns())
		cols[idx[0]] = col
		out := array.NewRecordBatch(rec.Schema(), cols, rec.NumRows())
		col.Release()
		rec.Release()
		rec = out
	}
	return rec, nil
}

// literalArray is n copies of lit as an array of type dt.
func literalArray(mem memory.Allocator, lit iceberg.Literal, dt arrow.DataType, n int) (arrow.Array, error) {
	var sc scalar.Scalar
	var err error
	switch v := lit.Any().(type) {
	case iceberg.Date:
		sc = scalar.NewDate32Scalar(arrow.Date32(v))
	case iceberg.Time:
		sc, err = scalar.MakeScalarParam(arrow.Time64(v), dt)
	case iceberg.Timestamp:
		sc, err = scalar.MakeScalarParam(arrow.Timestamp(v), dt)
	case iceberg.Decimal:
		sc, err = scalar.MakeScalarParam(v.Val, dt)
	case string:
		sc = scalar.NewStringScalar(v)
	default:
		sc, err = scalar.MakeScalarParam(v, dt)
	}
	if err != nil {
		return nil, err
	}
	if !arrow.TypeEqual(sc.DataType(), dt) {
		return nil, fmt.Errorf("value %s is %s, the column %s", lit, sc.DataType(), dt)
	}
	return scalar.MakeArrayFromScalar(sc, n, mem)
}

// fillable checks that lit makes a column of typ's Arrow type, as fillExisting writes it.
func fillable(lit iceberg.Literal, typ iceberg.Type) error {
	dt, err := table.TypeToArrowType(typ, true, false)
	if err != nil {
		return err
	}
	col, err := literalArray(memory.DefaultAllocator, lit, dt, 1)
	if err != nil {
		return err
	}
	col.Release()
	return nil
}

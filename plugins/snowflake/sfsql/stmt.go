package sfsql

import (
	"fmt"
	"regexp"
	"strings"
)

// StateTable holds, per pipeline, the last applied WAL sequence number of the pipeline (STREAM = ”) and of
// each stream.
const StateTable = "_SKIPPR_STATE"

// OpColumn is the staging table's column holding each row's change op.
const OpColumn = "_SKIPPR_OP"

// StagePath is the folder of the table stage the Parquet files are put into.
const StagePath = "skippr"

var simple = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]*$`)

// Name is the Snowflake name of a source table or column: a simple name is upper-cased, as Snowflake stores
// unquoted identifiers, so users query it without quotes (orders.id → ORDERS.ID); any other name is kept as
// it is and always quoted.
func Name(s string) string {
	if simple.MatchString(s) {
		return strings.ToUpper(s)
	}
	return s
}

// Ident quotes an identifier.
func Ident(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Literal quotes a string literal; Snowflake reads a backslash in a literal as an escape.
func Literal(s string) string {
	return `'` + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) + `'`
}

// Table names a table of the destination schema.
type Table struct{ Database, Schema, Name string }

// String is the fully qualified, quoted name.
func (t Table) String() string {
	return Ident(t.Database) + "." + Ident(t.Schema) + "." + Ident(t.Name)
}

// Stage is the table's internal stage folder the plugin puts files into.
func (t Table) Stage() string {
	return "@" + Ident(t.Database) + "." + Ident(t.Schema) + ".%" + Ident(t.Name) + "/" + StagePath + "/"
}

// Column is a column of a table.
type Column struct {
	Name string
	Type Type
	// Staged is the staging table's name for the column when it differs from Name, the target's: rows staged
	// under a column's former name before a later part of the same apply renamed it.
	Staged string
	// DefaultFalse gives a BOOLEAN column DEFAULT FALSE (the soft-delete flag: an ADD COLUMN fills the rows
	// already there with it).
	DefaultFalse bool
}

// staged is the column's name in a staging table.
func (c Column) staged() string {
	if c.Staged != "" {
		return c.Staged
	}
	return c.Name
}

func columnDefs(cols []Column, stage bool) []string {
	defs := make([]string, len(cols))
	for i, c := range cols {
		t := c.Type.DDL()
		n := c.Name
		if stage {
			t, n = c.Type.StageDDL(), c.staged()
		}
		defs[i] = Ident(n) + " " + t
		if c.DefaultFalse && !stage {
			defs[i] += " DEFAULT FALSE"
		}
	}
	return defs
}

func idents(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = Ident(n)
	}
	return strings.Join(q, ", ")
}

// CreateTable creates a stream's table; the primary key is informational in Snowflake (not enforced), and
// records what the MERGE matches on.
func CreateTable(t Table, cols []Column, key []string) string {
	defs := columnDefs(cols, false)
	if len(key) > 0 {
		defs = append(defs, "PRIMARY KEY ("+idents(key)+")")
	}
	return "CREATE TABLE IF NOT EXISTS " + t.String() + " (" + strings.Join(defs, ", ") + ")"
}

// AddColumn adds a column a grown schema brings.
func AddColumn(t Table, c Column) string {
	return "ALTER TABLE " + t.String() + " ADD COLUMN " + columnDefs([]Column{c}, false)[0]
}

// RenameColumn renames a column, as the source did.
func RenameColumn(t Table, from, to string) string {
	return "ALTER TABLE " + t.String() + " RENAME COLUMN " + Ident(from) + " TO " + Ident(to)
}

// RenameTable renames a table, as the source renamed its stream's (ALTER TABLE … RENAME TO: the new name in
// the same database and schema).
func RenameTable(t Table, to string) string {
	return "ALTER TABLE " + t.String() + " RENAME TO " + Table{t.Database, t.Schema, to}.String()
}

// AlterType widens a NUMBER column's precision.
func AlterType(t Table, c Column) string {
	return "ALTER TABLE " + t.String() + " ALTER COLUMN " + Ident(c.Name) + " SET DATA TYPE " + c.Type.DDL()
}

// Columns reads a table's columns: COLUMN_NAME, DATA_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE; binds schema
// and table name.
func Columns(database string) string {
	return `SELECT "COLUMN_NAME", "DATA_TYPE", "NUMERIC_PRECISION", "NUMERIC_SCALE" FROM ` + Ident(database) +
		`."INFORMATION_SCHEMA"."COLUMNS" WHERE "TABLE_SCHEMA" = ? AND "TABLE_NAME" = ? ORDER BY "ORDINAL_POSITION"`
}

// CreateState creates the state table.
func CreateState(database, schema string) string {
	return "CREATE TABLE IF NOT EXISTS " + Table{database, schema, StateTable}.String() +
		` ("PIPELINE" VARCHAR NOT NULL, "STREAM" VARCHAR NOT NULL, "LAST_SEQUENCE" NUMBER(20,0) NOT NULL, PRIMARY KEY ("PIPELINE", "STREAM"))`
}

// ReadState reads a pipeline's state rows; binds the pipeline.
func ReadState(database, schema string) string {
	return `SELECT "STREAM", "LAST_SEQUENCE" FROM ` + Table{database, schema, StateTable}.String() + ` WHERE "PIPELINE" = ?`
}

// UpsertState records rows (pipeline, stream, last sequence) in one statement; binds three values per row,
// then the fence: the pipeline's sequence (STREAM = ”) as this apply read it before its transaction. The
// pipeline's row is updated only if it still holds the fence, so a writer that read it, paused, and woke after
// another committed cannot move it back: that MERGE affects one row fewer than it sends, and the apply rolls
// back (dest.apply). The MERGE takes the state table's lock, which it keeps until COMMIT, so nothing can move
// the row between this check and the commit.
func UpsertState(database, schema string, rows int) string {
	sel := make([]string, rows)
	for i := range sel {
		sel[i] = `SELECT CAST(? AS VARCHAR) AS "PIPELINE", CAST(? AS VARCHAR) AS "STREAM", CAST(? AS NUMBER(20,0)) AS "LAST_SEQUENCE"`
	}
	return "MERGE INTO " + Table{database, schema, StateTable}.String() + " AS t USING (" + strings.Join(sel, " UNION ALL ") + ") AS s" +
		` ON t."PIPELINE" = s."PIPELINE" AND t."STREAM" = s."STREAM"` +
		` WHEN MATCHED AND (s."STREAM" <> '' OR t."LAST_SEQUENCE" = CAST(? AS NUMBER(20,0))) THEN UPDATE SET "LAST_SEQUENCE" = s."LAST_SEQUENCE"` +
		` WHEN NOT MATCHED THEN INSERT ("PIPELINE", "STREAM", "LAST_SEQUENCE") VALUES (s."PIPELINE", s."STREAM", s."LAST_SEQUENCE")`
}

// DeleteState removes a stream's state row, in the apply's transaction, once the stream was renamed; binds
// pipeline and stream.
func DeleteState(database, schema string) string {
	return "DELETE FROM " + Table{database, schema, StateTable}.String() + ` WHERE "PIPELINE" = ? AND "STREAM" = ?`
}

// Put uploads a local file to the table's stage; a retry of the same apply overwrites the same name.
// Parquet is compressed already, so the driver must not gzip it.
func Put(localPath string, t Table) string {
	return "PUT " + Literal("file://"+localPath) + " " + t.Stage() + " AUTO_COMPRESS = FALSE SOURCE_COMPRESSION = NONE OVERWRITE = TRUE"
}

// CreateStaging makes the session's temporary staging table of one load: the data columns (nested ones as
// JSON text), the op, and extra: what the load's rows carry for the metadata columns (Meta).
func CreateStaging(stage Table, cols []Column, extra []Column) string {
	defs := append(columnDefs(cols, true), Ident(OpColumn)+" NUMBER(3,0)")
	defs = append(defs, columnDefs(extra, true)...)
	return "CREATE OR REPLACE TEMPORARY TABLE " + stage.String() + " (" + strings.Join(defs, ", ") + ")"
}

// Copy loads one staged Parquet file into the staging table. FORCE: a replayed apply loads its file again
// (load metadata would skip a file loaded by a transaction that rolled back); PURGE: the file goes once loaded.
// USE_LOGICAL_TYPE = TRUE and BINARY_AS_TEXT = FALSE: Snowflake's Parquet defaults are the opposite (CREATE
// FILE FORMAT), and with them a TIME that has no legacy converted type (arrow-go writes Arrow's times that way)
// and a nanosecond timestamp load as integers, and BINARY loads as UTF-8 text then fails to decode as hex.
func Copy(stage, t Table, file string) string {
	return "COPY INTO " + stage.String() + " FROM " + t.Stage() + " FILES = (" + Literal(file) + ")" +
		" FILE_FORMAT = (TYPE = PARQUET USE_LOGICAL_TYPE = TRUE BINARY_AS_TEXT = FALSE) MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE FORCE = TRUE PURGE = TRUE"
}

// value is a staged column as the target takes it.
func value(c Column) string {
	v := "s." + Ident(c.staged())
	switch c.Type.Base {
	case "VARIANT":
		return "PARSE_JSON(" + v + ")"
	case "OBJECT":
		return "TO_OBJECT(PARSE_JSON(" + v + "))"
	case "ARRAY":
		return "TO_ARRAY(PARSE_JSON(" + v + "))"
	}
	return v
}

// Merge applies the staged rows by key: a delete removes, any other op updates or inserts; meta adds the
// columns soft_delete and metadata_columns write (Meta).
func Merge(t, stage Table, cols []Column, key []string, opDelete int, meta Meta) string {
	on := make([]string, len(key))
	for i, k := range key {
		sk := k
		for _, c := range cols {
			if c.Name == k {
				sk = c.staged()
			}
		}
		on[i] = "t." + Ident(k) + " = s." + Ident(sk)
	}
	var sets, names, vals []string
	for _, c := range cols {
		names = append(names, Ident(c.Name))
		vals = append(vals, value(c))
		isKey := false
		for _, k := range key {
			isKey = isKey || k == c.Name
		}
		if !isKey {
			sets = append(sets, Ident(c.Name)+" = "+value(c))
		}
	}
	var msets []string
	for _, m := range meta.Sets {
		names = append(names, Ident(m.Column))
		vals = append(vals, m.Value)
		msets = append(msets, Ident(m.Column)+" = "+m.Value)
	}
	sets = append(sets, msets...)
	q := "MERGE INTO " + t.String() + " AS t USING " + stage.String() + " AS s ON " + strings.Join(on, " AND ")
	insert := fmt.Sprintf(" THEN INSERT (%s) VALUES (%s)", strings.Join(names, ", "), strings.Join(vals, ", "))
	if meta.SoftDelete {
		// A delete whose row's values the apply never saw (key-only) flips the flag and the metadata of the
		// row the table holds, or leaves nothing; any other row, a delete carrying the row's last values
		// included, writes its values.
		keyOnly := "s." + Ident(KeyOnlyColumn)
		return q + " WHEN MATCHED AND " + keyOnly + " THEN UPDATE SET " + strings.Join(msets, ", ") +
			" WHEN MATCHED THEN UPDATE SET " + strings.Join(sets, ", ") +
			" WHEN NOT MATCHED AND NOT " + keyOnly + insert
	}
	op := "s." + Ident(OpColumn)
	q += fmt.Sprintf(" WHEN MATCHED AND %s = %d THEN DELETE", op, opDelete)
	if len(sets) > 0 {
		q += " WHEN MATCHED THEN UPDATE SET " + strings.Join(sets, ", ")
	}
	return q + fmt.Sprintf(" WHEN NOT MATCHED AND %s <> %d", op, opDelete) + insert
}

// Append inserts the staged rows of a stream without a key, with meta's columns (a history table's too).
func Append(t, stage Table, cols []Column, meta Meta) string {
	var names, vals []string
	for _, c := range cols {
		names = append(names, Ident(c.Name))
		vals = append(vals, value(c))
	}
	for _, m := range meta.Sets {
		names = append(names, Ident(m.Column))
		vals = append(vals, m.Value)
	}
	return "INSERT INTO " + t.String() + " (" + strings.Join(names, ", ") + ") SELECT " + strings.Join(vals, ", ") +
		" FROM " + stage.String() + " AS s"
}

// DeleteAll empties a table for a truncate, inside the apply's transaction (TRUNCATE would be DDL-like).
func DeleteAll(t Table) string { return "DELETE FROM " + t.String() }

// Begin starts the apply's transaction under a name (an unquoted identifier), which SHOW TRANSACTIONS lists.
func Begin(name string) string { return "BEGIN TRANSACTION NAME " + name }

// AbortTransaction aborts a transaction by its id (a number SHOW TRANSACTIONS gave).
func AbortTransaction(id string) string { return "SELECT SYSTEM$ABORT_TRANSACTION(" + id + ")" }

// Use statements of the privilege check.
func UseWarehouse(w string) string        { return "USE WAREHOUSE " + Ident(w) }
func UseDatabase(d string) string         { return "USE DATABASE " + Ident(d) }
func UseSchema(d, s string) string        { return "USE SCHEMA " + Ident(d) + "." + Ident(s) }
func RemoveFile(t Table, f string) string { return "REMOVE " + t.Stage() + f }

// FillTable holds the columns the destination added whose existing rows still wait for the value they hold at
// the source (values.MetaExistingRows), per pipeline. Snowflake commits DDL at once, so the ADD COLUMN cannot
// share the apply's transaction: the row is committed before the ALTER, and the apply that fills the rows
// deletes it in its own transaction, with the fence. A process that dies between the ALTER and that commit
// leaves the row, and the replay of the range fills the rows (dest/fill.go).
const FillTable = "_SKIPPR_FILL"

// CreateFill creates the fill table.
func CreateFill(database, schema string) string {
	return "CREATE TABLE IF NOT EXISTS " + Table{database, schema, FillTable}.String() +
		` ("PIPELINE" VARCHAR NOT NULL, "TABLE_NAME" VARCHAR NOT NULL, "COLUMN_NAME" VARCHAR NOT NULL, "VALUE" VARCHAR NOT NULL, PRIMARY KEY ("PIPELINE", "TABLE_NAME", "COLUMN_NAME"))`
}

// ReadFills reads a pipeline's pending fills: TABLE_NAME, COLUMN_NAME, VALUE; binds the pipeline.
func ReadFills(database, schema string) string {
	return `SELECT "TABLE_NAME", "COLUMN_NAME", "VALUE" FROM ` + Table{database, schema, FillTable}.String() + ` WHERE "PIPELINE" = ?`
}

// InsertFill records a pending fill; binds pipeline, table, column, value.
func InsertFill(database, schema string) string {
	return "INSERT INTO " + Table{database, schema, FillTable}.String() +
		` ("PIPELINE", "TABLE_NAME", "COLUMN_NAME", "VALUE") VALUES (?, ?, ?, ?)`
}

// DeleteFill removes a fill; binds pipeline, table, column.
func DeleteFill(database, schema string) string {
	return "DELETE FROM " + Table{database, schema, FillTable}.String() +
		` WHERE "PIPELINE" = ? AND "TABLE_NAME" = ? AND "COLUMN_NAME" = ?`
}

// TryCast says whether a text value converts to a type; binds the value. TRY_CAST takes a string expression
// and answers NULL where CAST would fail (docs.snowflake.com/en/sql-reference/functions/try_cast).
func TryCast(t Type) string {
	return "SELECT TRY_CAST(? AS " + t.DDL() + ") IS NOT NULL"
}

// Fill gives column c the value, cast from its text, in the rows where it is NULL; binds the value.
func Fill(t Table, c Column) string {
	return "UPDATE " + t.String() + " SET " + Ident(c.Name) + " = CAST(? AS " + c.Type.DDL() + ") WHERE " + Ident(c.Name) + " IS NULL"
}

// Package gsql builds every GoogleSQL statement the plugin sends, and nothing else does: the golden tests pin
// each shape, and check it against the grammar the stand-in (testkit/bigquerytest) accepts, which is written
// down from BigQuery's reference pages. The statements use only:
//
//   - BEGIN TRANSACTION / COMMIT TRANSACTION around one apply's statements (multi-statement transactions);
//   - SELECT IF(…, 0, ERROR(…)) (the state row still holds the fence this process read: another writer fails
//     the transaction);
//   - DELETE … WHERE TRUE (a truncate), MERGE by key from a staging table's newest row per key (QUALIFY
//     ROW_NUMBER() = 1), INSERT … SELECT (a keyless stream);
//   - MERGE of the state rows from UNNEST(@streams), and SELECT of them.
//
// Values are query parameters (@pipeline, @sequence, @fence, @streams); names are backtick-quoted, each part of
// a table path on its own, so a project id with a dash needs nothing special.
package gsql

import (
	"crypto/sha256"
	"fmt"
	"strings"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
)

// Ident quotes a name with backticks; a backtick or backslash in it is escaped, as GoogleSQL's quoted
// identifiers allow.
func Ident(name string) string {
	r := strings.NewReplacer(`\`, `\\`, "`", "\\`")
	return "`" + r.Replace(name) + "`"
}

// Table is a table's path.
type Table struct{ Project, Dataset, Name string }

func (t Table) String() string {
	return Ident(t.Project) + "." + Ident(t.Dataset) + "." + Ident(t.Name)
}

// LegacyStateTable is the one state table all pipelines of a dataset shared before 0.2. Every transaction
// updated it, and BigQuery cancels one of two concurrent transactions that mutate one table, so two pipelines
// in one dataset cancelled each other; a pipeline's rows are copied from it once into its own table.
const LegacyStateTable = "_skippr_state"

// StateTable is the name of the table holding a pipeline's state rows, in the destination's dataset: one per
// pipeline, so pipelines sharing a dataset never mutate the same table (only two writers of one pipeline
// conflict, which is the point). Pipeline names are letters, digits, '_' and '-', which table names take;
// anything else is replaced by '_' with a hash of the name appended, so two names never share a table.
func StateTable(pipeline string) string {
	var b strings.Builder
	changed := false
	for _, r := range pipeline {
		switch {
		case r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
			changed = true
		}
	}
	name := b.String()
	if changed || len(name) > 900 {
		sum := sha256.Sum256([]byte(pipeline))
		name = fmt.Sprintf("%.900s_%x", name, sum[:6])
	}
	return LegacyStateTable + "_" + name
}

// OrdColumn is the staging table's ordinal column (rows.OrdColumn): the higher, the newer.
const OrdColumn = "_skippr_ord"

// WholePipeline is the stream value of the state row recording the pipeline's last applied sequence number.
const WholePipeline = ""

// Merge moves a staging table's rows into target by key: a staged delete removes the target's row, any other
// op replaces it or inserts it. cols are the target's column names, staged as c0…; key lists indexes of cols.
func Merge(target, stage Table, cols []string, key []int, stageCol func(int) string) string {
	var b strings.Builder
	// A staging table holds the entries of a range as they arrived, so a key can have several rows: the
	// newest (highest ordinal) is the key's last change, and a MERGE must see one source row per target row.
	part := make([]string, len(key))
	for n, k := range key {
		part[n] = stageCol(k)
	}
	fmt.Fprintf(&b, "MERGE %s AS T USING (SELECT * FROM %s WHERE TRUE QUALIFY ROW_NUMBER() OVER (PARTITION BY %s ORDER BY %s DESC) = 1) AS S ON ",
		target, stage, strings.Join(part, ", "), OrdColumn)
	isKey := map[int]bool{}
	for n, k := range key {
		if n > 0 {
			b.WriteString(" AND ")
		}
		fmt.Fprintf(&b, "T.%s = S.%s", Ident(cols[k]), stageCol(k))
		isKey[k] = true
	}
	op := "S." + change.OpColumn
	fmt.Fprintf(&b, " WHEN MATCHED AND %s = %d THEN DELETE", op, change.OpDelete)
	var sets []string
	for i, c := range cols {
		if !isKey[i] {
			sets = append(sets, Ident(c)+" = S."+stageCol(i))
		}
	}
	if len(sets) > 0 {
		b.WriteString(" WHEN MATCHED THEN UPDATE SET " + strings.Join(sets, ", "))
	}
	names, vals := make([]string, len(cols)), make([]string, len(cols))
	for i, c := range cols {
		names[i], vals[i] = Ident(c), "S."+stageCol(i)
	}
	fmt.Fprintf(&b, " WHEN NOT MATCHED AND %s <> %d THEN INSERT (%s) VALUES (%s)", op, change.OpDelete,
		strings.Join(names, ", "), strings.Join(vals, ", "))
	return b.String()
}

// Append copies a keyless stream's staged rows into target, each ordinal once: the staging table is written
// through the default stream, which is at-least-once, so a retried append may have left a row twice.
func Append(target, stage Table, cols []string, stageCol func(int) string) string {
	names, vals := make([]string, len(cols)), make([]string, len(cols))
	for i, c := range cols {
		names[i], vals[i] = Ident(c), stageCol(i)
	}
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM (SELECT * FROM %s WHERE TRUE QUALIFY ROW_NUMBER() OVER (PARTITION BY %s ORDER BY %s DESC) = 1) AS S",
		target, strings.Join(names, ", "), strings.Join(vals, ", "), stage, OrdColumn, OrdColumn)
}

// RenameColumn renames a column of target, as the source did (DDL, "ALTER TABLE RENAME COLUMN statement").
func RenameColumn(target Table, from, to string) string {
	return fmt.Sprintf("ALTER TABLE %s RENAME COLUMN %s TO %s", target, Ident(from), Ident(to))
}

// RenameTable renames target to a table of the same dataset (DDL, ALTER TABLE RENAME TO: the new name is a
// table name, not a path). A transaction takes no DDL on a permanent table, so it runs on its own.
func RenameTable(target Table, to string) string {
	return fmt.Sprintf("ALTER TABLE %s RENAME TO %s", target, Ident(to))
}

// DeleteState deletes the state row of the stream in parameter @<param>: a stream the source renamed, in the
// transaction that commits the rename's range.
func DeleteState(state Table, param string) string {
	return fmt.Sprintf("DELETE FROM %s WHERE pipeline = @pipeline AND stream = @%s", state, param)
}

// Truncate empties target (BigQuery's DELETE needs a WHERE clause).
func Truncate(target Table) string { return fmt.Sprintf("DELETE FROM %s WHERE TRUE", target) }

// AssertFence fails the transaction unless the highest sequence number among the pipeline's state rows is
// @fence (0: no row): every transaction writes its streams' rows (and the last of a range the pipeline's row)
// at the range's sequence number, so a second writer of the same pipeline that committed anything since this
// process read or wrote the state stops this one. It is a SELECT with ERROR() rather than an ASSERT, because a
// transaction takes queries and DML only; IF evaluates ERROR only when the fence differs.
func AssertFence(state Table) string {
	return fmt.Sprintf("SELECT IF((SELECT COALESCE(MAX(last_sequence), 0) FROM %s WHERE pipeline = @pipeline) = @fence, 0,"+
		" ERROR('%s'))", state, FenceMoved)
}

// FenceMoved is the message of AssertFence's error: another writer moved the state, and a retry, which reads
// it again, either skips what that writer applied or applies the rest.
const FenceMoved = "skippr: the state rows of this pipeline changed since they were read (another writer?)"

// SetState records @sequence as the last applied sequence number of the pipeline (stream ”) and of each
// stream in @streams.
func SetState(state Table) string {
	return fmt.Sprintf("MERGE %s AS T USING (SELECT @pipeline AS pipeline, stream, @sequence AS last_sequence FROM UNNEST(@streams) AS stream) AS S"+
		" ON T.pipeline = S.pipeline AND T.stream = S.stream"+
		" WHEN MATCHED THEN UPDATE SET last_sequence = S.last_sequence"+
		" WHEN NOT MATCHED THEN INSERT (pipeline, stream, last_sequence) VALUES (S.pipeline, S.stream, S.last_sequence)", state)
}

// ReadState selects a pipeline's state rows.
func ReadState(state Table) string {
	return fmt.Sprintf("SELECT stream, last_sequence FROM %s WHERE pipeline = @pipeline", state)
}

// Transaction joins statements into one multi-statement transaction: BigQuery runs the script as one job and
// rolls the transaction back when any statement fails.
func Transaction(stmts []string) string {
	var b strings.Builder
	b.WriteString("BEGIN TRANSACTION;\n")
	for _, s := range stmts {
		b.WriteString(s)
		b.WriteString(";\n")
	}
	b.WriteString("COMMIT TRANSACTION;")
	return b.String()
}

// FillTable is the name of the table holding a pipeline's pending fills: columns the plugin added whose
// existing rows still wait for the value they hold at the source (values.MetaExistingRows). One per pipeline,
// as StateTable, so pipelines sharing a dataset never mutate the same table. A column is added by a table
// patch, which commits at once and cannot be part of the apply's transaction, so the fill is recorded before
// the patch and done, and its row deleted, in the transaction with the state rows (dest/fill.go).
func FillTable(pipeline string) string {
	return "_skippr_fill" + strings.TrimPrefix(StateTable(pipeline), LegacyStateTable)
}

// ReadFills selects a pipeline's pending fills: tbl, col, value.
func ReadFills(fills Table) string {
	return fmt.Sprintf("SELECT tbl, col, value FROM %s WHERE pipeline = @pipeline", fills)
}

// RecordFill records (or replaces) the fill of column @col of table @tbl with the value in the one-element
// array @value.
func RecordFill(fills Table) string {
	return fmt.Sprintf("MERGE %s AS T USING (SELECT @pipeline AS pipeline, @tbl AS tbl, @col AS col, value FROM UNNEST(@value) AS value) AS S"+
		" ON T.pipeline = S.pipeline AND T.tbl = S.tbl AND T.col = S.col"+
		" WHEN MATCHED THEN UPDATE SET value = S.value"+
		" WHEN NOT MATCHED THEN INSERT (pipeline, tbl, col, value) VALUES (S.pipeline, S.tbl, S.col, S.value)", fills)
}

// DropFill deletes a fill; the table and column are the parameters @<param>_tbl and @<param>_col.
func DropFill(fills Table, param string) string {
	return fmt.Sprintf("DELETE FROM %s WHERE pipeline = @pipeline AND tbl = @%s_tbl AND col = @%s_col", fills, param, param)
}

// CanCast says whether the text @value converts to type typ: SAFE_CAST answers NULL where CAST would fail
// ("Conversion functions", SAFE_CAST).
func CanCast(typ string) string {
	return fmt.Sprintf("SELECT SAFE_CAST(@value AS %s) IS NOT NULL AS ok", typ)
}

// Fill gives column col of target the text value @<param>_value, cast to typ, in the rows where it is NULL.
func Fill(target Table, col, typ, param string) string {
	return fmt.Sprintf("UPDATE %s SET %s = CAST(@%s_value AS %s) WHERE %s IS NULL", target, Ident(col), param, typ, Ident(col))
}

package gsql

import (
	"fmt"
	"strings"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
)

// The staging columns a stream with soft_delete, metadata_columns or history stages after the op and the
// ordinal (rows.StageSchema with meta): each staged row's own metadata, since one staging table gathers the
// rows of every entry of a range and the MERGE picks each key's newest.
const (
	PosColumn       = "_skippr_pos"       // INT64: the WAL entry (sequence number) of the row's change
	CommittedColumn = "_skippr_committed" // TIMESTAMP: the change's source commit time, NULL when unknown
	OpNameColumn    = "_skippr_opname"    // STRING: insert, update, delete or snapshot (rowmeta.OpName)
	DelColumn       = "_skippr_del"       // BOOL: the change is a delete
	ValsColumn      = "_skippr_vals"      // BOOL: the row carries the key's values (not a key-only delete)
	SeqColumn       = "_skippr_seq"       // INT64: the change's place among the stream's changes of its entry
)

// The history table's own columns, after the data columns (the Postgres and DuckDB destinations' names).
const (
	HistOp       = "_skippr_op"
	HistPosition = "_skippr_position"
	HistSeq      = "_skippr_seq"
)

// HistoryTable is the name of table's history table.
func HistoryTable(table string) string { return table + "_history" }

// NowVar is _skippr_synced_at's value: a script variable TransactionAt declares before BEGIN TRANSACTION as
// CURRENT_TIMESTAMP(), so every row of the transaction holds one time. (CURRENT_TIMESTAMP() itself "is set at
// the start of the query statement that contains this function": the statements of one transaction would
// differ.) The _skippr_ prefix keeps it apart from every column: a source's _skippr_ columns are reserved.
const NowVar = "_skippr_now"

// TransactionAt is Transaction with NowVar declared first ("DECLARE … must be at the start of a script").
func TransactionAt(stmts []string) string {
	return "DECLARE " + NowVar + " TIMESTAMP DEFAULT CURRENT_TIMESTAMP();\n" + Transaction(stmts)
}

// metaSets are "column = value" of the metadata columns opt adds but _skippr_deleted, from the staged row S.
func metaSets(opt rowmeta.Options) []string {
	var out []string
	for _, c := range opt.Columns() {
		if v := metaValue(c.Name); v != "" {
			out = append(out, Ident(c.Name)+" = "+v)
		}
	}
	return out
}

// metaValue is the value of metadata column name for the staged row S ("" for _skippr_deleted, which
// depends on the statement).
func metaValue(name string) string {
	switch name {
	case rowmeta.SyncedAt:
		return NowVar
	case rowmeta.SourceCommittedAt:
		return "S." + CommittedColumn
	case rowmeta.Op:
		return "S." + OpNameColumn
	case rowmeta.Position:
		return "S." + PosColumn
	}
	return ""
}

// MergeMeta is Merge for a stream with metadata columns or soft_delete (opt.Any()), from a staging table
// staged with meta. Without soft_delete it is Merge's statement with the metadata set on update and insert.
// With soft_delete it is the first of two statements: it upserts the newest row per key that carries values
// (staged with ValsColumn true: an insert, update or snapshot read, or a delete whose values were folded in
// the same entry), setting _skippr_deleted to whether that row is a delete; MergeKeyOnlyDeletes then flags
// the keys whose newest change is a key-only delete. Together they give the key its last values and its
// newest change's flag and metadata, whatever the cut of the changes into entries and ranges.
func MergeMeta(target, stage Table, cols []string, key []int, stageCol func(int) string, opt rowmeta.Options) string {
	var b strings.Builder
	filter := "TRUE"
	if opt.SoftDelete {
		filter = ValsColumn
	}
	part := make([]string, len(key))
	for n, k := range key {
		part[n] = stageCol(k)
	}
	fmt.Fprintf(&b, "MERGE %s AS T USING (SELECT * FROM %s WHERE %s QUALIFY ROW_NUMBER() OVER (PARTITION BY %s ORDER BY %s DESC) = 1) AS S ON ",
		target, stage, filter, strings.Join(part, ", "), OrdColumn)
	writeOn(&b, cols, key, stageCol)
	isKey := map[int]bool{}
	for _, k := range key {
		isKey[k] = true
	}
	op := "S." + change.OpColumn
	if !opt.SoftDelete {
		fmt.Fprintf(&b, " WHEN MATCHED AND %s = %d THEN DELETE", op, change.OpDelete)
	}
	var sets []string
	for i, c := range cols {
		if !isKey[i] {
			sets = append(sets, Ident(c)+" = S."+stageCol(i))
		}
	}
	if opt.SoftDelete {
		sets = append(sets, Ident(rowmeta.Deleted)+" = S."+DelColumn)
	}
	sets = append(sets, metaSets(opt)...)
	b.WriteString(" WHEN MATCHED THEN UPDATE SET " + strings.Join(sets, ", "))
	var names, vals []string
	for i, c := range cols {
		names, vals = append(names, Ident(c)), append(vals, "S."+stageCol(i))
	}
	for _, c := range opt.Columns() {
		v := metaValue(c.Name)
		if c.Name == rowmeta.Deleted {
			v = "S." + DelColumn
		}
		names, vals = append(names, Ident(c.Name)), append(vals, v)
	}
	if opt.SoftDelete {
		fmt.Fprintf(&b, " WHEN NOT MATCHED THEN INSERT (%s) VALUES (%s)", strings.Join(names, ", "), strings.Join(vals, ", "))
	} else {
		fmt.Fprintf(&b, " WHEN NOT MATCHED AND %s <> %d THEN INSERT (%s) VALUES (%s)", op, change.OpDelete,
			strings.Join(names, ", "), strings.Join(vals, ", "))
	}
	return b.String()
}

// MergeKeyOnlyDeletes is soft_delete's second statement, for a staging table holding key-only deletes: a key
// whose newest staged change is one (ValsColumn false) keeps its values and gets _skippr_deleted = TRUE and the
// delete's metadata; a key the table does not hold stays absent (no values were ever seen).
func MergeKeyOnlyDeletes(target, stage Table, cols []string, key []int, stageCol func(int) string, opt rowmeta.Options) string {
	var b strings.Builder
	part := make([]string, len(key))
	for n, k := range key {
		part[n] = stageCol(k)
	}
	fmt.Fprintf(&b, "MERGE %s AS T USING (SELECT * FROM %s WHERE TRUE QUALIFY ROW_NUMBER() OVER (PARTITION BY %s ORDER BY %s DESC) = 1) AS S ON ",
		target, stage, strings.Join(part, ", "), OrdColumn)
	writeOn(&b, cols, key, stageCol)
	sets := append([]string{Ident(rowmeta.Deleted) + " = TRUE"}, metaSets(opt)...)
	fmt.Fprintf(&b, " WHEN MATCHED AND S.%s = FALSE THEN UPDATE SET %s", ValsColumn, strings.Join(sets, ", "))
	return b.String()
}

func writeOn(b *strings.Builder, cols []string, key []int, stageCol func(int) string) {
	for n, k := range key {
		if n > 0 {
			b.WriteString(" AND ")
		}
		fmt.Fprintf(b, "T.%s = S.%s", Ident(cols[k]), stageCol(k))
	}
}

// AppendMeta is Append for a keyless stream with metadata columns or soft_delete: each row with its
// metadata (_skippr_deleted FALSE: a keyless stream has no deletes).
func AppendMeta(target, stage Table, cols []string, stageCol func(int) string, opt rowmeta.Options) string {
	var names, vals []string
	for i, c := range cols {
		names, vals = append(names, Ident(c)), append(vals, stageCol(i))
	}
	for _, c := range opt.Columns() {
		v := strings.TrimPrefix(metaValue(c.Name), "S.")
		if c.Name == rowmeta.Deleted {
			v = DelColumn
		}
		names, vals = append(names, Ident(c.Name)), append(vals, v)
	}
	return insertOnce(target, stage, names, vals)
}

// AppendHistory appends every staged change to a history table: the data columns, then the op, the source
// commit time, the position and the seq. The staging table is read once per ordinal, so a retried append
// to it adds nothing twice, and (position, seq) is unique.
func AppendHistory(history, stage Table, cols []string, stageCol func(int) string) string {
	var names, vals []string
	for i, c := range cols {
		names, vals = append(names, Ident(c)), append(vals, stageCol(i))
	}
	names = append(names, Ident(HistOp), Ident(rowmeta.SourceCommittedAt), Ident(HistPosition), Ident(HistSeq))
	vals = append(vals, OpNameColumn, CommittedColumn, PosColumn, SeqColumn)
	return insertOnce(history, stage, names, vals)
}

func insertOnce(target, stage Table, names, vals []string) string {
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM (SELECT * FROM %s WHERE TRUE QUALIFY ROW_NUMBER() OVER (PARTITION BY %s ORDER BY %s DESC) = 1) AS S",
		target, strings.Join(names, ", "), strings.Join(vals, ", "), stage, OrdColumn, OrdColumn)
}

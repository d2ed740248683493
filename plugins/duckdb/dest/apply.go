package dest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/duckdb/duckdb-go/v2"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

// stageTable is the temporary table rows are appended to before they are merged; temporary tables belong to
// the connection, which the destination never shares.
const (
	stageTable = "_skippr_stage"
	stageRow   = "_skippr_row" // the staging table's row number
)

// TableName is the destination table of a stream: its last dot-separated part (public.users → users).
func TableName(stream string) string {
	if i := strings.LastIndexByte(stream, '.'); i >= 0 {
		return stream[i+1:]
	}
	return stream
}

// applier is one Apply: one connection, one transaction.
type applier struct {
	s    Settings
	conn *sql.Conn
	log  *slog.Logger
	// open holds the pipeline's open re-snapshots: stream → the table of keys received since the begin.
	open map[string]string
	// tables holds what this apply knows of each destination table's columns (lower-cased name → type),
	// since DuckDB resolves column names without regard to case.
	tables map[string]map[string]string
	// writing is the table being written ("" between tables), written those the range has written: what an
	// out-of-memory error names.
	writing string
	written []string
	// entry is the WAL entry whose rows are being written: its number is _skippr_position.
	entry uint64
	// histSeq numbers each stream's changes of entry histEntry in its history table (history.go).
	histEntry uint64
	histSeq   map[string]int64
}

// row is one change row of a batch.
type row struct {
	op  change.Op
	rec arrow.RecordBatch
	i   int
	// committed is the change's source commit time (zero: unknown), kept apart from rec, which may be the
	// batch of the values a soft delete keeps rather than the delete's own.
	committed time.Time
}

func (a *applier) exec(ctx context.Context, q string, args ...any) error {
	_, err := a.conn.ExecContext(ctx, q, args...)
	return err
}

// apply runs one transaction: the entries of the request after the pipeline's fence, then the new fence. The
// changes are folded per entry (the last change of a key wins) and written as each entry ends, so a coalesced
// range costs one entry's memory and still commits, or not, as one.
func (a *applier) apply(ctx context.Context, req *serve.Range) (res serve.ApplyResult, err error) {
	defer func() {
		if err != nil && isOutOfMemory(err) {
			err = a.outOfMemory(err)
		}
	}()
	// Plain BEGIN/COMMIT statements rather than a database/sql Tx: the appender needs the raw connection
	// inside the transaction, which database/sql does not hand out while a Tx holds it.
	if err := a.exec(ctx, "BEGIN TRANSACTION"); err != nil {
		return res, fmt.Errorf("database %s: begin: %w", a.s.Path, err)
	}
	committed := false
	defer func() {
		if !committed {
			// A failed statement may have aborted the transaction already; the rollback's error adds nothing.
			_ = a.exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if err := ensureState(ctx, a.conn, a.s); err != nil {
		return res, err
	}
	state, err := readState(ctx, a.conn, a.s, req.Pipeline)
	if err != nil {
		return res, err
	}
	fence := state.Sequence
	if req.Covers(fence) {
		return serve.ApplyResult{Skipped: true}, nil
	}
	if err := a.loadResnapshots(ctx, req.Pipeline); err != nil {
		return res, fmt.Errorf("database %s: %w", a.s.Path, err)
	}
	var (
		// The plans of one entry (per key the last change, streams in first-seen order so that statements
		// are deterministic), written when it ends.
		plans  = change.NewPlans(change.FoldOptions{})
		tables = map[string]string{} // lower-cased table → the stream writing it, across the whole range
	)
	defer func() { plans.Release() }()
	a.tables = map[string]map[string]string{}
	a.histSeq = nil // numbered afresh: a retried apply writes its entries again from seq 0
	flush := func() error {
		for _, sp := range plans.List() {
			t := strings.ToLower(TableName(sp.Stream))
			if other, ok := tables[t]; ok && other != sp.Stream {
				return fmt.Errorf("streams %s and %s both map to table %s", other, sp.Stream, TableName(sp.Stream))
			}
			tables[t] = sp.Stream
		}
		for _, sp := range plans.List() {
			if err := a.writeStream(ctx, sp); err != nil {
				return fmt.Errorf("stream %s: %w", sp.Stream, err)
			}
		}
		plans.Release()
		return nil
	}
	for st, err := range req.Entries(fence) {
		if err != nil {
			return res, fmt.Errorf("apply %d: %w", req.Sequence, err)
		}
		it := st.Item
		a.entry = it.Sequence
		if st.End {
			if err := flush(); err != nil {
				return res, err
			}
			continue
		}
		state.Streams[it.Stream] = req.Sequence
		switch {
		case it.Schema != nil:
			plans.Get(it.Stream).AddSchema(it.Schema.Schema)
		case it.Truncate:
			plans.Get(it.Stream).Fold.Truncate()
		case it.Resnapshot != serve.ResnapshotNone:
			// The rows before the mark are written first: only those after a begin count as received.
			if err := flush(); err != nil {
				return res, err
			}
			if err := a.resnapshotMark(ctx, req.Pipeline, req.Sequence, it); err != nil {
				return res, fmt.Errorf("apply %d: %w", req.Sequence, err)
			}
		case it.Record != nil:
			if err := plans.Get(it.Stream).Add(it.Record); err != nil {
				return res, fmt.Errorf("stream %s: %w", it.Stream, err)
			}
			res.Rows += it.Record.NumRows()
		default:
			return res, fmt.Errorf("stream %s: item holds neither a batch nor a schema", it.Stream)
		}
	}
	streams, err := json.Marshal(state.Streams)
	if err != nil {
		return res, err
	}
	if err := a.exec(ctx, "INSERT OR REPLACE INTO "+stateName(a.s)+" (pipeline, sequence, streams) VALUES (?, ?, ?)",
		req.Pipeline, req.Sequence, string(streams)); err != nil {
		return res, fmt.Errorf("database %s: record sequence %d: %w", a.s.Path, req.Sequence, err)
	}
	if err := a.exec(ctx, "COMMIT"); err != nil {
		return res, fmt.Errorf("database %s: commit sequence %d: %w", a.s.Path, req.Sequence, err)
	}
	committed = true
	return res, nil
}

// writeStream writes one entry's plan of a stream into its table (writeStreamRows), noting the table for an
// out-of-memory error.
func (a *applier) writeStream(ctx context.Context, sp *change.Plan) error {
	a.writing = a.tableName(sp.Stream)
	if !slices.Contains(a.written, a.writing) {
		a.written = append(a.written, a.writing)
	}
	if err := a.writeStreamRows(ctx, sp); err != nil {
		return err
	}
	a.writing = ""
	return nil
}

// writeStreamRows empties the table if the stream was truncated, brings it up to the stream's schemas, then
// merges the surviving rows, one staging load and one statement per batch schema.
func (a *applier) writeStreamRows(ctx context.Context, sp *change.Plan) error {
	if sp.Fold.Truncated() {
		// In the apply's transaction: a reader sees the truncate and the rows after it together.
		cols, err := a.columns(ctx, sp.Stream)
		if err != nil {
			return err
		}
		if cols != nil {
			if err := a.exec(ctx, "DELETE FROM "+a.tableName(sp.Stream)); err != nil {
				return fmt.Errorf("truncate %s: %w", a.tableName(sp.Stream), err)
			}
		}
	}
	// All DDL of the table comes before its rows, so the rows meet the grown table.
	for _, s := range sp.Schemas {
		if err := a.ensureTable(ctx, sp.Stream, s); err != nil {
			return err
		}
	}
	if a.s.History && len(sp.Batches) > 0 {
		if err := a.writeHistory(ctx, sp); err != nil {
			return err
		}
	}
	// flip: with soft_delete, key-only deletes, which only mark the row deleted (rowmeta).
	type group struct {
		schema *arrow.Schema
		flip   bool
		rows   []row
	}
	var groups []*group
	add := func(r row, flip bool) {
		s := r.rec.Schema()
		for _, g := range groups {
			if g.flip == flip && change.SameSchema(g.schema, s) {
				g.rows = append(g.rows, r)
				return
			}
		}
		groups = append(groups, &group{schema: s, flip: flip, rows: []row{r}})
	}
	soft := a.s.Meta.SoftDelete
	times := make([]*array.Timestamp, len(sp.Batches))
	for i, b := range sp.Batches {
		var err error
		if times[i], err = change.Committed(b); err != nil {
			return fmt.Errorf("%s: %w", sp.Stream, err)
		}
	}
	for _, l := range sp.Fold.Last() {
		r := row{op: l.Op, rec: sp.Batches[l.Batch], i: l.Row}
		r.committed, _ = change.CommittedAt(times[l.Batch], l.Row)
		switch {
		case soft && l.Op == change.OpDelete && l.HasValues && sp.Keyed[l.Batch]:
			// Its insert or update was folded into this entry: keep those values, flagged deleted.
			r.rec, r.i = sp.Batches[l.ValBatch], l.ValRow
			add(r, false)
		case soft && l.Op == change.OpDelete:
			add(r, true)
		default:
			add(r, false)
		}
	}
	for _, g := range groups {
		if err := a.stage(ctx, g.schema, g.rows); err != nil {
			return err
		}
		if err := a.merge(ctx, sp.Stream, g.schema, g.flip); err != nil {
			return err
		}
	}
	return nil
}

func (a *applier) tableName(stream string) string {
	return ducksql.Ident(a.s.Schema) + "." + ducksql.Ident(TableName(stream))
}

// columns reads a table's columns (nil when it does not exist), keyed by lower-cased name.
func (a *applier) columns(ctx context.Context, stream string) (map[string]string, error) {
	return a.columnsOf(ctx, TableName(stream))
}

// columnsOf reads the columns of table (unquoted, in the settings' schema) as columns does.
func (a *applier) columnsOf(ctx context.Context, table string) (map[string]string, error) {
	rows, err := a.conn.QueryContext(ctx, `SELECT column_name, data_type FROM duckdb_columns()
		WHERE database_name = current_database() AND lower(schema_name) = lower(?) AND lower(table_name) = lower(?)
		ORDER BY column_index`,
		a.s.Schema, table)
	if err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", ducksql.Ident(a.s.Schema)+"."+ducksql.Ident(table), err)
	}
	defer rows.Close()
	var cols map[string]string
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, err
		}
		if cols == nil {
			cols = map[string]string{}
		}
		cols[strings.ToLower(name)] = typ
	}
	return cols, rows.Err()
}

// ensureTable creates the stream's table from s, or adds the columns of s it lacks. A column whose type
// differs keeps its type: values are cast on the way in, and a cast that fails fails the apply.
func (a *applier) ensureTable(ctx context.Context, stream string, s *arrow.Schema) error {
	name := a.tableName(stream)
	cols, ok := a.tables[stream]
	if !ok {
		var err error
		if cols, err = a.columns(ctx, stream); err != nil {
			return err
		}
	}
	if err := a.s.Meta.CheckSchema(stream, s); err != nil {
		return err
	}
	fields := change.DataFields(s)
	if cols == nil {
		if len(fields) == 0 {
			return fmt.Errorf("schema of %s has no data columns", stream)
		}
		cols = map[string]string{}
		defs := make([]string, 0, len(fields)+1)
		for _, f := range fields {
			t, err := ducksql.Type(f.Type)
			if err != nil {
				return fmt.Errorf("column %s: %w", f.Name, err)
			}
			defs = append(defs, ducksql.Ident(f.Name)+" "+t)
			cols[strings.ToLower(f.Name)] = t
		}
		defs = append(defs, a.metaDefs(cols)...)
		if key := change.PrimaryKey(s); len(key) > 0 {
			defs = append(defs, "PRIMARY KEY ("+quoteAll(key)+")")
		}
		if err := a.exec(ctx, "CREATE TABLE "+name+" ("+strings.Join(defs, ", ")+")"); err != nil {
			return fmt.Errorf("create table %s: %w", name, err)
		}
		a.tables[stream] = cols
		return nil
	}
	// Columns the source renamed (change.RenamedFromMeta) are renamed before missing ones are added, so the
	// rows written before keep their values under the new name; a replay finds the new name and does nothing.
	has := func(c string) bool { _, ok := cols[strings.ToLower(c)]; return ok }
	for _, r := range change.Renames(fields, has) {
		if err := a.exec(ctx, "ALTER TABLE "+name+" RENAME COLUMN "+ducksql.Ident(r.From)+" TO "+ducksql.Ident(r.To)); err != nil {
			return fmt.Errorf("rename column %s of %s to %s: %w", r.From, name, r.To, err)
		}
		cols[strings.ToLower(r.To)] = cols[strings.ToLower(r.From)]
		delete(cols, strings.ToLower(r.From))
	}
	for _, f := range fields {
		if _, ok := cols[strings.ToLower(f.Name)]; ok {
			continue
		}
		t, err := ducksql.Type(f.Type)
		if err != nil {
			return fmt.Errorf("column %s: %w", f.Name, err)
		}
		if err := a.exec(ctx, "ALTER TABLE "+name+" ADD COLUMN "+ducksql.Ident(f.Name)+" "+t); err != nil {
			return fmt.Errorf("add column %s %s to %s: %w", f.Name, t, name, err)
		}
		cols[strings.ToLower(f.Name)] = t
	}
	if err := a.ensureMeta(ctx, name, cols); err != nil {
		return err
	}
	a.tables[stream] = cols
	return nil
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = ducksql.Ident(n)
	}
	return strings.Join(q, ", ")
}

// stage replaces the staging table with one of s's data columns plus the op, and appends rows to it.
func (a *applier) stage(ctx context.Context, s *arrow.Schema, rows []row) error {
	var defs []string
	var idx []int
	for i, f := range s.Fields() {
		if change.Reserved(f.Name) {
			continue
		}
		t, err := ducksql.Type(f.Type)
		if err != nil {
			return fmt.Errorf("column %s: %w", f.Name, err)
		}
		defs = append(defs, ducksql.Ident(f.Name)+" "+t)
		idx = append(idx, i)
	}
	// The row number finds a staged row again: rowids inside a transaction are not row numbers.
	defs = append(defs, ducksql.Ident(change.OpColumn)+" TINYINT", ducksql.Ident(change.CommittedColumn)+" TIMESTAMPTZ", ducksql.Ident(stageRow)+" BIGINT")
	if err := a.exec(ctx, "CREATE OR REPLACE TEMP TABLE "+stageTable+" ("+strings.Join(defs, ", ")+")"); err != nil {
		return fmt.Errorf("create staging table: %w", err)
	}
	fix := map[[2]string][]string{} // {column, value expression} -> staged row numbers
	if err := a.conn.Raw(func(dc any) error {
		c, ok := dc.(driver.Conn)
		if !ok {
			return fmt.Errorf("staging: connection is a %T, not a DuckDB connection", dc)
		}
		app, err := duckdb.NewAppender(c, "temp", "main", stageTable)
		if err != nil {
			return fmt.Errorf("staging: appender: %w", err)
		}
		vals := make([]driver.Value, len(idx)+3)
		for n, r := range rows {
			if err := ctx.Err(); err != nil {
				app.Close()
				return err
			}
			for j, ci := range idx {
				if expr := appenderless(r.rec.Column(ci), r.i); expr != "" {
					// Staged as NULL and set below.
					k := [2]string{s.Field(ci).Name, expr}
					fix[k] = append(fix[k], strconv.Itoa(n))
					vals[j] = nil
					continue
				}
				v, err := Value(r.rec.Column(ci), r.i)
				if err != nil {
					app.Close()
					return fmt.Errorf("staging: column %s: %w", s.Field(ci).Name, err)
				}
				vals[j] = v
			}
			vals[len(idx)] = int8(r.op)
			vals[len(idx)+1] = nil
			if !r.committed.IsZero() {
				vals[len(idx)+1] = r.committed
			}
			vals[len(idx)+2] = int64(n)
			if err := app.AppendRow(vals...); err != nil {
				app.Close()
				return fmt.Errorf("staging: row %d: %w", r.i, err)
			}
		}
		if err := app.Close(); err != nil {
			return fmt.Errorf("staging: flush %d rows: %w", len(rows), err)
		}
		return nil
	}); err != nil {
		return err
	}
	for k, ns := range fix {
		q := fmt.Sprintf("UPDATE temp.main.%s SET %s = %s WHERE %s IN (%s)", stageTable, ducksql.Ident(k[0]), k[1], ducksql.Ident(stageRow), strings.Join(ns, ", "))
		if err := a.exec(ctx, q); err != nil {
			return fmt.Errorf("staging: column %s: %s: %w", k[0], k[1], err)
		}
	}
	return nil
}

// merge moves the staged rows into the stream's table: by key (delete, update or insert) when s has a key,
// else appended. With soft_delete a delete marks the row instead (rowmeta): flip rows (key-only deletes) only
// mark it, the others write their values with the mark. The metadata columns are set from the staged op.
func (a *applier) merge(ctx context.Context, stream string, s *arrow.Schema, flip bool) error {
	name := a.tableName(stream)
	var cols []string
	for _, f := range change.DataFields(s) {
		cols = append(cols, f.Name)
	}
	key := change.PrimaryKey(s)
	vals := make([]string, len(cols))
	for i, c := range cols {
		vals[i] = "s." + ducksql.Ident(c)
	}
	op := "s." + ducksql.Ident(change.OpColumn)
	metaCols, metaVals := a.metaColumns(op, "s."+ducksql.Ident(change.CommittedColumn))
	insCols := quoteAll(append(cols, metaCols...))
	insVals := strings.Join(append(vals, metaVals...), ", ")
	var q string
	if len(key) == 0 {
		q = "INSERT INTO " + name + " (" + insCols + ") SELECT " + insVals + " FROM temp.main." + stageTable + " AS s"
	} else {
		on := make([]string, len(key))
		for i, k := range key {
			on[i] = "t." + ducksql.Ident(k) + " = s." + ducksql.Ident(k)
		}
		var sets []string
		if !flip {
			for _, c := range cols {
				if !slices.ContainsFunc(key, func(k string) bool { return strings.EqualFold(k, c) }) {
					sets = append(sets, ducksql.Ident(c)+" = s."+ducksql.Ident(c))
				}
			}
		}
		for i, c := range metaCols {
			sets = append(sets, ducksql.Ident(c)+" = "+metaVals[i])
		}
		q = "MERGE INTO " + name + " AS t USING temp.main." + stageTable + " AS s ON (" + strings.Join(on, " AND ") + ")"
		switch {
		case flip:
			q += " WHEN MATCHED THEN UPDATE SET " + strings.Join(sets, ", ")
		case a.s.Meta.SoftDelete:
			q += " WHEN MATCHED THEN UPDATE SET " + strings.Join(sets, ", ") + " WHEN NOT MATCHED THEN INSERT (" + insCols + ") VALUES (" + insVals + ")"
		default:
			q += fmt.Sprintf(" WHEN MATCHED AND %s = %d THEN DELETE", op, change.OpDelete)
			if len(sets) > 0 {
				q += " WHEN MATCHED THEN UPDATE SET " + strings.Join(sets, ", ")
			}
			q += fmt.Sprintf(" WHEN NOT MATCHED AND %s <> %d THEN INSERT (%s) VALUES (%s)", op, change.OpDelete, insCols, insVals)
		}
	}
	if err := a.exec(ctx, q); err != nil {
		return fmt.Errorf("write into %s: %w", name, err)
	}
	return a.noteKeys(ctx, stream, key)
}

// isOutOfMemory says err is DuckDB's "Out of Memory Error": its buffer manager found no room under
// memory_limit, nor (for data it may spill) in its temporary directory. The appender reports it as text.
func isOutOfMemory(err error) bool {
	var de *duckdb.Error
	if errors.As(err, &de) && de.Type == duckdb.ErrorTypeOutOfMemory {
		return true
	}
	return strings.Contains(err.Error(), "Out of Memory Error")
}

// outOfMemory makes DuckDB's out-of-memory error a config fault. Not transient: memory_limit bounds DuckDB's
// own buffers, not what the host has free, so a retry of the same range under the same limit fails the same
// way and the engine would loop on it; a person must raise the limit (or make room where DuckDB spills). Not
// data: no value is at fault. DuckDB spills table data beyond the limit to its temporary directory (the
// plugin leaves temp_directory at DuckDB's default for a file, <path>.tmp), but a primary key's index must fit.
func (a *applier) outOfMemory(err error) error {
	limit := "memory_limit " + a.s.MemoryLimit
	if a.s.MemoryLimit == "" {
		limit = "memory_limit unset (DuckDB's default, 80% of RAM)"
	}
	where := "table " + a.writing
	if a.writing == "" {
		where = "committing tables " + strings.Join(a.written, ", ")
	}
	tmp := a.s.Path + ".tmp"
	return fault.ConfigErr(
		fmt.Errorf("database %s: %s: DuckDB ran out of memory under %s (it spills table data beyond the limit to %s, but a table's primary-key index must fit in memory): %w",
			a.s.Path, where, limit, tmp, err),
		fmt.Sprintf("raise the connection's memory_limit (or remove it to use DuckDB's default, 80%% of RAM) so that the primary-key indexes of the tables fit, and keep free disk space for %s; the restarted pipeline applies the same range again", tmp))
}

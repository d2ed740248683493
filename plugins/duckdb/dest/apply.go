package dest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/util"
	"github.com/duckdb/duckdb-go/v2"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

// stageTable is the temporary table rows are appended to before they are merged; temporary tables belong to
// the connection, which the destination never shares.
const (
	stageTable = "_skippr_stage"
	stageRow   = "_skippr_row" // the staging table's row number
	// keepTable holds, for the staged keys, the values of the table's columns the staged rows do not carry
	// (merge).
	keepTable = "_skippr_keep"
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
	// pipeline is the apply's pipeline, whose per-stream state a renamed stream takes along (renameTable);
	// renamedAway the streams this apply renamed, which its state row no longer lists.
	pipeline    string
	renamedAway map[string]bool
	// state is the pipeline's state row as this apply last committed (or read) it; done the last entry
	// written into the transaction; inTx says a transaction is open.
	state serve.Applied
	done  uint64
	inTx  bool
	// txBytes counts what the open transaction holds in DuckDB's memory until it commits, as estimated: the
	// Arrow bytes of the entries written into it, and statementCost for each staging table it replaced
	// (Settings.PartBytes); txDeletes counts the rows they deleted from tables, an update's old row included
	// (Settings.PartDeletes).
	txBytes, txDeletes int64
	// dirty holds the streams whose tables the open transaction has written rows of (or deleted rows from);
	// flushed the streams the range has written; owner, per lower-cased table, the stream writing it.
	dirty   map[string]bool
	flushed map[string]bool
	owner   map[string]string
	// filled holds, per stream, the columns the entry being written added with a value for the existing rows
	// (lower-cased name → the value as a DuckDB expression); see addFilled.
	filled map[string]map[string]string
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

// apply runs the entries of the request after the pipeline's fence, then records the new fence, in one
// transaction unless an entry changes the shape of a table the transaction has written rows of already (see
// writeEntry). The changes are folded per entry (the last change of a key wins) and written as each entry ends,
// so a coalesced range costs one entry's memory.
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
	a.inTx = true
	defer func() {
		if a.inTx {
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
	a.state = state
	a.pipeline = req.Pipeline
	a.renamedAway = map[string]bool{}
	fence := state.Sequence
	if req.Covers(fence) {
		return serve.ApplyResult{Skipped: true}, nil
	}
	if err := a.loadResnapshots(ctx, req.Pipeline); err != nil {
		return res, fmt.Errorf("database %s: %w", a.s.Path, err)
	}
	a.tables = map[string]map[string]string{}
	a.dirty = map[string]bool{}
	a.flushed = map[string]bool{}
	a.owner = map[string]string{}
	a.filled = map[string]map[string]string{}
	// The entry being read, as segments: rows, then the re-snapshot mark that follows them.
	segs := []*segment{newSegment()}
	defer func() { releaseSegments(segs) }()
	var entryStreams []string
	var entryBytes int64
	a.histSeq = nil // numbered afresh: a retried apply writes its entries again from seq 0
	for st, err := range req.Entries(fence) {
		if err != nil {
			return res, fmt.Errorf("apply %d: %w", req.Sequence, err)
		}
		it := st.Item
		a.entry = it.Sequence
		if st.End {
			if err := a.writeEntry(ctx, req.Pipeline, req.Sequence, it.Sequence, segs); err != nil {
				return res, err
			}
			for _, s := range entryStreams {
				a.flushed[s] = true
			}
			entryStreams = entryStreams[:0]
			a.txBytes += entryBytes
			entryBytes = 0
			// An open transaction keeps its changes' undo and version data until it commits, and under
			// memory_limit DuckDB ran out of room for it (BENCHMARKS.md): a part's worth is committed with
			// its own fence, so the transaction holds at most a part whatever the range.
			if it.Sequence < req.Sequence {
				why := ""
				switch {
				case a.txBytes >= a.s.PartBytes():
					why = "memory"
				case a.txDeletes >= a.s.PartDeletes():
					why = "deletes"
				}
				if why != "" {
					if err := a.commitPart(ctx, req.Pipeline, req.Sequence, why); err != nil {
						return res, err
					}
				}
			}
			releaseSegments(segs)
			segs = []*segment{newSegment()}
			continue
		}
		if !slices.Contains(entryStreams, it.Stream) {
			entryStreams = append(entryStreams, it.Stream)
		}
		plans := segs[len(segs)-1].plans
		switch {
		case it.Schema != nil:
			if from := change.RenamedFromTable(it.Schema.Schema); from != "" {
				// The former stream's rows so far go to the renamed table (followRenamedTables); a later
				// stream of the old name (RENAME TABLE a TO b, c TO a) is another table's, in a segment of its own.
				if sp := plans.Lookup(from); sp != nil && (len(sp.Batches) > 0 || sp.Fold.Truncated()) {
					segs = append(segs, newSegment())
					plans = segs[len(segs)-1].plans
				}
			}
			plans.Get(it.Stream).AddSchema(it.Schema.Schema)
		case it.Truncate:
			plans.Get(it.Stream).Fold.Truncate()
		case it.Resnapshot != serve.ResnapshotNone:
			// The rows before the mark are written before it: only those after a begin count as received.
			mark := serve.Item{Sequence: it.Sequence, Stream: it.Stream, Resnapshot: it.Resnapshot}
			segs[len(segs)-1].mark = &mark
			segs = append(segs, newSegment())
		case it.Record != nil:
			if err := plans.Get(it.Stream).Add(it.Record); err != nil {
				return res, fmt.Errorf("stream %s: %w", it.Stream, err)
			}
			res.Rows += it.Record.NumRows()
			entryBytes += util.TotalRecordSize(it.Record)
		default:
			return res, fmt.Errorf("stream %s: item holds neither a batch nor a schema", it.Stream)
		}
	}
	if err := a.commit(ctx, req.Pipeline, req.Sequence); err != nil {
		return res, err
	}
	return res, nil
}

// segment is part of one WAL entry: the plans of its rows and, unless it is the entry's last, the re-snapshot
// mark that follows them.
type segment struct {
	plans *change.Plans
	mark  *serve.Item
}

func newSegment() *segment {
	return &segment{plans: change.NewPlans(change.FoldOptions{FullRow: true})}
}

func releaseSegments(segs []*segment) {
	for _, g := range segs {
		g.plans.Release()
	}
}

// commit records seq as the pipeline's fence, and as the last sequence of every stream the range has written
// so far, and commits the transaction.
func (a *applier) commit(ctx context.Context, pipeline string, seq uint64) error {
	for s := range a.flushed {
		a.state.Streams[s] = seq
	}
	for s := range a.renamedAway {
		delete(a.state.Streams, s)
	}
	streams, err := json.Marshal(a.state.Streams)
	if err != nil {
		return err
	}
	if err := a.exec(ctx, "INSERT OR REPLACE INTO "+stateName(a.s)+" (pipeline, sequence, streams) VALUES (?, ?, ?)",
		pipeline, seq, string(streams)); err != nil {
		return fmt.Errorf("database %s: record sequence %d: %w", a.s.Path, seq, err)
	}
	if err := a.exec(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("database %s: commit sequence %d: %w", a.s.Path, seq, err)
	}
	a.inTx = false
	a.state.Sequence = seq
	return nil
}

// writeEntry writes one entry of the range (number seq; last is the range's last): the DDL of all its
// streams first, so that no statement of the entry alters a table after rows of it were written, then its
// segments' rows and marks in order. An entry's rows of an older shape meet the grown table, as rows of a
// later entry do (the destination only adds columns).
//
// DuckDB 1.5 refuses to commit a transaction that alters a table after changing its rows ("Attempting to
// modify table … but another transaction has altered this table"), and would refuse it on every retry. So when
// the entry must alter a table an earlier entry of this transaction wrote, the transaction is committed first
// with the earlier entries' fence, and the entry starts a new one. Each commit carries its own fence, so after
// a crash between the two the engine's replay of the range skips the committed entries (Range.Entries) and
// applies the rest once.
func (a *applier) writeEntry(ctx context.Context, pipeline string, last, seq uint64, segs []*segment) error {
	renamed := followRenamedTables(segs)
	for _, g := range segs {
		for _, sp := range g.plans.List() {
			t := strings.ToLower(TableName(sp.Stream))
			if other, ok := a.owner[t]; ok && other != sp.Stream {
				return fmt.Errorf("streams %s and %s both map to table %s", other, sp.Stream, TableName(sp.Stream))
			}
			a.owner[t] = sp.Stream
		}
	}
	split := false
	for _, g := range segs {
		for _, sp := range g.plans.List() {
			if slices.ContainsFunc(renamed, func(r tableRename) bool { return r.to == sp.Stream && a.dirty[r.from] }) {
				split = true // the table written under its former name is renamed (renameTable)
			}
			if !a.dirty[sp.Stream] || len(sp.Schemas) == 0 {
				continue
			}
			alters, err := a.alters(ctx, sp.Stream, sp.Schemas)
			if err != nil {
				return err
			}
			split = split || alters
		}
	}
	if split && a.state.Sequence < a.done {
		// a.dirty is empty after a commit, and within one entry every alter precedes every write: after
		// this commit no alter of the entry follows a write in its transaction.
		if err := a.commitPart(ctx, pipeline, last, "schema change"); err != nil {
			return err
		}
	}
	for _, r := range renamed {
		if err := a.renameTable(ctx, r.from, r.to); err != nil {
			return err
		}
	}
	for _, g := range segs {
		for _, sp := range g.plans.List() {
			for _, s := range sp.Schemas {
				if err := a.ensureTable(ctx, sp.Stream, s); err != nil {
					return fmt.Errorf("stream %s: %w", sp.Stream, err)
				}
			}
		}
	}
	if err := a.fillExisting(ctx); err != nil {
		return err
	}
	for _, g := range segs {
		for _, sp := range g.plans.List() {
			if err := a.writeStream(ctx, sp); err != nil {
				return fmt.Errorf("stream %s: %w", sp.Stream, err)
			}
		}
		if g.mark != nil {
			if err := a.resnapshotMark(ctx, pipeline, last, *g.mark); err != nil {
				return fmt.Errorf("apply %d: %w", last, err)
			}
		}
	}
	a.done = seq
	clear(a.filled) // only rows of the entry that added a column predate it
	return nil
}

// commitPart commits the entries written so far with their own fence (a.done) and begins a new transaction
// for the rest of the range (number last): a replay after a crash between the two skips the committed entries
// (Range.Entries) and applies the rest once.
func (a *applier) commitPart(ctx context.Context, pipeline string, last uint64, why string) error {
	if err := a.commit(ctx, pipeline, a.done); err != nil {
		return err
	}
	a.log.Debug("range committed in parts", "why", why, "range_end", last, "committed", a.done, "bytes", a.txBytes, "deletes", a.txDeletes)
	if err := a.exec(ctx, "BEGIN TRANSACTION"); err != nil {
		return fmt.Errorf("database %s: begin: %w", a.s.Path, err)
	}
	a.inTx = true
	a.dirty = map[string]bool{}
	a.txBytes, a.txDeletes = 0, 0
	return nil
}

// alters says whether bringing the stream's existing table up to schemas takes a statement (see tableDDL).
func (a *applier) alters(ctx context.Context, stream string, schemas []*arrow.Schema) (bool, error) {
	cols, err := a.knownColumns(ctx, stream)
	if err != nil || cols == nil {
		return false, err // no table: created, not altered
	}
	for _, s := range schemas {
		stmts, next, err := a.tableDDL(stream, cols, s)
		if err != nil {
			return false, err
		}
		if len(stmts) > 0 {
			return true, nil
		}
		cols = next
	}
	return false, nil
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

// writeStreamRows empties the table if the stream was truncated, then merges the surviving rows, one staging load and one statement per batch schema.
func (a *applier) writeStreamRows(ctx context.Context, sp *change.Plan) error {
	a.dirty[sp.Stream] = true
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
	// The table is up to the entry's schemas already (writeEntry).
	if a.s.Meta(sp.Stream).History && len(sp.Batches) > 0 {
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
	soft := a.s.Meta(sp.Stream).SoftDelete
	times := make([]*array.Timestamp, len(sp.Batches))
	for i, b := range sp.Batches {
		var err error
		if times[i], err = change.Committed(b); err != nil {
			return fmt.Errorf("%s: %w", sp.Stream, err)
		}
	}
	var fullDeletes []row // deletes of a stream matched by full row (fullrow.go), before the inserts
	for _, l := range sp.Fold.Last() {
		r := row{op: l.Op, rec: sp.Batches[l.Batch], i: l.Row}
		r.committed, _ = change.CommittedAt(times[l.Batch], l.Row)
		switch {
		case l.Op == change.OpDelete && change.FullRow(r.rec.Schema()):
			fullDeletes = append(fullDeletes, r)
			a.txDeletes++ // a keyed delete counts what it deleted (merge)
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
	if err := a.deleteFullRows(ctx, sp.Stream, fullDeletes); err != nil {
		return err
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

// columnNames reads the column names of schema.table (unquoted; DuckDB's names match without regard to case),
// in table order.
func columnNames(ctx context.Context, conn *sql.Conn, schema, table string) ([]string, error) {
	rows, err := conn.QueryContext(ctx, `SELECT column_name FROM duckdb_columns()
		WHERE database_name = current_database() AND lower(schema_name) = lower(?) AND lower(table_name) = lower(?)
		ORDER BY column_index`, schema, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		names = append(names, c)
	}
	return names, rows.Err()
}

// ensureTable creates the stream's table from s, or adds the columns of s it lacks. A column whose type
// differs keeps its type: values are cast on the way in, and a cast that fails fails the apply.
func (a *applier) ensureTable(ctx context.Context, stream string, s *arrow.Schema) error {
	if err := a.renameTable(ctx, change.RenamedFromTable(s), stream); err != nil {
		return err
	}
	cols, err := a.knownColumns(ctx, stream)
	if err != nil {
		return err
	}
	stmts, cols, err := a.tableDDL(stream, cols, s)
	if err != nil {
		return err
	}
	for _, st := range stmts {
		if st.fill != nil {
			if err := a.addFilled(ctx, stream, st); err != nil {
				return err
			}
			continue
		}
		if err := a.exec(ctx, st.q); err != nil {
			return fmt.Errorf("%s: %w", st.what, err)
		}
	}
	a.tables[stream] = cols
	return nil
}

// addFilled adds a column whose existing rows hold, at the source, a value no change carries
// (values.MetaExistingRows), and notes the value: writeEntry sets it in the rows already there once the entry's
// DDL is done (not by a DEFAULT dropped at once: DuckDB 1.5.6 then failed the commit of a transaction that also
// added a plain column and merged rows). A value that does not cast to the column's type is logged and the
// column left empty: failing would fail the same range at every retry. Rows of the same entry written in the
// older shape (an insert before the ADD COLUMN at the source) get the value too (merge).
func (a *applier) addFilled(ctx context.Context, stream string, st ddl) error {
	if err := a.exec(ctx, st.q); err != nil {
		return fmt.Errorf("%s: %w", st.what, err)
	}
	f := st.fill
	var ok bool
	if err := a.conn.QueryRowContext(ctx, "SELECT TRY_CAST(? AS "+f.typ+") IS NOT NULL", f.value).Scan(&ok); err != nil {
		return fmt.Errorf("%s: %w", st.what, err)
	}
	if !ok {
		a.log.Warn("added a column; its existing rows hold a value at the source that does not cast to the column's type, so they hold NULL here",
			"table", a.tableName(stream), "column", f.col, "type", f.typ, "value", f.value)
		return nil
	}
	if a.filled[stream] == nil {
		a.filled[stream] = map[string]string{}
	}
	a.filled[stream][strings.ToLower(f.col)] = "CAST(" + ducksql.Literal(f.value) + " AS " + f.typ + ")"
	a.log.Info("added a column; existing rows hold the value they hold at the source", "table", a.tableName(stream), "column", f.col, "value", f.value)
	return nil
}

// fillExisting sets the columns the entry added with a value for existing rows (a.filled) in the rows already
// in their tables: before the entry's rows, after all its DDL (an UPDATE before an ALTER of the same table
// fails the commit; the table counts as written from here on).
func (a *applier) fillExisting(ctx context.Context) error {
	for _, stream := range slices.Sorted(maps.Keys(a.filled)) {
		var sets []string
		for _, c := range slices.Sorted(maps.Keys(a.filled[stream])) {
			sets = append(sets, ducksql.Ident(c)+" = "+a.filled[stream][c])
		}
		if err := a.exec(ctx, "UPDATE "+a.tableName(stream)+" SET "+strings.Join(sets, ", ")); err != nil {
			return fmt.Errorf("stream %s: give the existing rows of %s the values of the columns added: %w", stream, a.tableName(stream), err)
		}
		a.dirty[stream] = true
	}
	return nil
}

// knownColumns returns the stream's table's columns as this apply knows them, reading them on first use (nil:
// no table). The map is the apply's own: tableDDL does not change it.
func (a *applier) knownColumns(ctx context.Context, stream string) (map[string]string, error) {
	if cols, ok := a.tables[stream]; ok {
		return cols, nil
	}
	cols, err := a.columns(ctx, stream)
	if err != nil {
		return nil, err
	}
	a.tables[stream] = cols
	return cols, nil
}

// ddl is one statement that brings a table to a schema, and what it does, for its error. fill: an ADD COLUMN
// whose existing rows get a value (addFilled).
type ddl struct {
	q, what string
	fill    *fill
}

// fill is a column added with the value its existing rows hold at the source (text, the column's type).
type fill struct{ col, typ, value string }

// tableDDL returns the statements that bring the stream's table, whose columns are cols (nil: no table), up to
// s, and the columns it has after them (a new map). Every statement that changes a table's shape is made here,
// so that alters can tell ahead of time whether an entry alters a table (writeEntry).
func (a *applier) tableDDL(stream string, cols map[string]string, s *arrow.Schema) ([]ddl, map[string]string, error) {
	name := a.tableName(stream)
	if err := a.s.Meta(stream).CheckSchema(stream, s); err != nil {
		return nil, nil, err
	}
	fields := change.DataFields(s)
	if cols == nil {
		if len(fields) == 0 {
			return nil, nil, fmt.Errorf("schema of %s has no data columns", stream)
		}
		cols = map[string]string{}
		defs := make([]string, 0, len(fields)+1)
		for _, f := range fields {
			t, err := ducksql.Type(f.Type)
			if err != nil {
				return nil, nil, fmt.Errorf("column %s: %w", f.Name, err)
			}
			defs = append(defs, ducksql.Ident(f.Name)+" "+t)
			cols[strings.ToLower(f.Name)] = t
		}
		defs = append(defs, a.metaDefs(stream, cols)...)
		// No PRIMARY KEY: DuckDB keeps a key's index (ART) in its buffer manager and cannot spill it, and it grows
		// with every row, so a big table outgrew any fixed memory_limit (a 5M-row range failed under DuckDB's
		// 64 MiB with it and applied without; BENCHMARKS.md). The write by key keeps keys unique without it: a
		// folded entry holds one row per key, and each key's row is deleted before it is appended (merge).
		return []ddl{{q: "CREATE TABLE " + name + " (" + strings.Join(defs, ", ") + ")", what: "create table " + name}}, cols, nil
	}
	cols = maps.Clone(cols)
	var stmts []ddl
	// Columns the source renamed (change.RenamedFromMeta) are renamed before missing ones are added, so the
	// rows written before keep their values under the new name; a replay finds the new name and does nothing.
	has := func(c string) bool { _, ok := cols[strings.ToLower(c)]; return ok }
	for _, r := range change.Renames(fields, has) {
		stmts = append(stmts, ddl{q: "ALTER TABLE " + name + " RENAME COLUMN " + ducksql.Ident(r.From) + " TO " + ducksql.Ident(r.To),
			what: fmt.Sprintf("rename column %s of %s to %s", r.From, name, r.To)})
		cols[strings.ToLower(r.To)] = cols[strings.ToLower(r.From)]
		delete(cols, strings.ToLower(r.From))
	}
	for _, f := range fields {
		if _, ok := cols[strings.ToLower(f.Name)]; ok {
			continue
		}
		t, err := ducksql.Type(f.Type)
		if err != nil {
			return nil, nil, fmt.Errorf("column %s: %w", f.Name, err)
		}
		st := ddl{q: "ALTER TABLE " + name + " ADD COLUMN " + ducksql.Ident(f.Name) + " " + t,
			what: fmt.Sprintf("add column %s %s to %s", f.Name, t, name)}
		if v, ok := f.Metadata.GetValue(values.MetaExistingRows); ok {
			st.fill = &fill{col: f.Name, typ: t, value: v}
		}
		stmts = append(stmts, st)
		cols[strings.ToLower(f.Name)] = t
	}
	stmts = append(stmts, a.metaDDL(stream, name, cols)...)
	return stmts, cols, nil
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
	a.txBytes += statementCost(len(defs))
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

// merge moves the staged rows into the stream's table: by key (the staged keys' rows deleted, the surviving
// rows appended) when s has a key, else appended. With soft_delete a delete marks the row instead (rowmeta):
// flip rows (key-only deletes) only mark it, the others write their values with the mark. The metadata columns
// are set from the staged op.
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
	metaCols, metaVals := a.metaColumns(stream, op, "s."+ducksql.Ident(change.CommittedColumn))
	// A row of this entry without a column the entry added with a value for existing rows predates the ADD
	// COLUMN at the source: it holds that value there.
	var fillCols, fillVals []string
	for _, c := range slices.Sorted(maps.Keys(a.filled[stream])) {
		if !slices.ContainsFunc(cols, func(x string) bool { return strings.EqualFold(x, c) }) {
			fillCols, fillVals = append(fillCols, c), append(fillVals, a.filled[stream][c])
		}
	}
	insCols := quoteAll(slices.Concat(cols, metaCols, fillCols))
	insVals := strings.Join(slices.Concat(vals, metaVals, fillVals), ", ")
	insert := "INSERT INTO " + name + " (" + insCols + ") SELECT " + insVals + " FROM temp.main." + stageTable + " AS s"
	switch {
	case len(key) == 0:
		// A table without a key only appends.
	case flip:
		// Key-only deletes under soft_delete keep the row's values and set only its metadata.
		sets := make([]string, len(metaCols))
		for i, c := range metaCols {
			sets[i] = ducksql.Ident(c) + " = " + metaVals[i]
		}
		q := "MERGE INTO " + name + " AS t USING temp.main." + stageTable + " AS s ON (" + keyMatch(key, "t", "s") +
			") WHEN MATCHED THEN UPDATE SET " + strings.Join(sets, ", ")
		if err := a.exec(ctx, q); err != nil {
			return fmt.Errorf("write into %s: %w", name, err)
		}
		return a.noteKeys(ctx, stream, key)
	default:
		// Every staged key's row goes, and the rows that survive (all of them under soft_delete, which
		// keeps a deleted row's values flagged) are appended: an update replaces the whole row, as the
		// change protocol has it. Not MERGE's UPDATE: DuckDB keeps an in-place update's version data per
		// column of every vector it touches until commit, and spread over a big table that outgrew any
		// memory_limit (1,500 updates spread over 12M rows held ≈ 150 MiB and took 12 s, where the
		// delete and the append held under 1 MiB and took 0.3 s; BENCHMARKS.md). A MERGE that inserts also
		// holds fresh segments of every column until commit (statementCost).
		on := keyMatch(key, "t", "s")
		keep, err := a.keepColumns(ctx, stream, slices.Concat(cols, metaCols, fillCols))
		if err != nil {
			return err
		}
		if len(keep) > 0 {
			// The table's columns the staged rows do not carry (rows of an older shape; a column dropped
			// at the source) keep the values the replaced row held, as an UPDATE of the carried columns would.
			q := "CREATE OR REPLACE TEMP TABLE " + keepTable + " AS SELECT " + quoteAll(slices.Concat(key, keep)) + " FROM " + name +
				" AS t WHERE EXISTS (SELECT 1 FROM temp.main." + stageTable + " AS s WHERE " + on + ")"
			if err := a.exec(ctx, q); err != nil {
				return fmt.Errorf("write into %s: keep the values of %s: %w", name, strings.Join(keep, ", "), err)
			}
			a.txBytes += statementCost(len(key) + len(keep))
			kvals := make([]string, len(keep))
			for i, c := range keep {
				kvals[i] = "k." + ducksql.Ident(c)
			}
			insert = "INSERT INTO " + name + " (" + insCols + ", " + quoteAll(keep) + ") SELECT " + insVals + ", " + strings.Join(kvals, ", ") +
				" FROM temp.main." + stageTable + " AS s LEFT JOIN temp.main." + keepTable + " AS k ON " + keyMatch(key, "k", "s")
		}
		res, err := a.conn.ExecContext(ctx, "DELETE FROM "+name+" AS t USING temp.main."+stageTable+" AS s WHERE "+on)
		if err != nil {
			return fmt.Errorf("write into %s: delete the changed rows: %w", name, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("write into %s: delete the changed rows: %w", name, err)
		}
		a.txDeletes += n
		if !a.s.Meta(stream).SoftDelete {
			insert += fmt.Sprintf(" WHERE %s <> %d", op, change.OpDelete)
		}
	}
	if err := a.exec(ctx, insert); err != nil {
		return fmt.Errorf("write into %s: %w", name, err)
	}
	return a.noteKeys(ctx, stream, key)
}

// keyMatch is the condition that rows of aliases l and r have the same key.
func keyMatch(key []string, l, r string) string {
	on := make([]string, len(key))
	for i, k := range key {
		on[i] = l + "." + ducksql.Ident(k) + " = " + r + "." + ducksql.Ident(k)
	}
	return strings.Join(on, " AND ")
}

// keepColumns lists the stream's table's columns that are not among written (case aside), by name.
func (a *applier) keepColumns(ctx context.Context, stream string, written []string) ([]string, error) {
	cols, err := a.knownColumns(ctx, stream)
	if err != nil || len(cols) <= len(written) {
		return nil, err
	}
	// The known columns' names are lower case; DuckDB matches names without regard to case, quoted or not.
	var keep []string
	for n := range cols {
		if !slices.ContainsFunc(written, func(w string) bool { return strings.EqualFold(w, n) }) {
			keep = append(keep, n)
		}
	}
	slices.Sort(keep)
	return keep, nil
}

// statementCost is what DuckDB holds until the transaction commits for one staging table it replaced, with a
// table of columns columns, whatever its rows: a fresh segment per column, in memory it cannot spill. Measured
// with DuckDB 1.5 alone, in one transaction: ≈ 135 KiB for a 6-column staging table of 25 rows (a MERGE that
// inserts holds as much again: ≈ 150 KiB into a 5-column table, ≈ 560 KiB into a 25-column one, which is why
// merge does not insert with MERGE); a commit releases it. An 808-entry range of a few rows an entry held over
// 96 MiB, so a range of many small entries, not only a range of large ones, is committed in parts
// (Settings.PartBytes).
func statementCost(columns int) int64 { return int64(columns+1) * 32 << 10 }

// isOutOfMemory says err is DuckDB's "Out of Memory Error": its buffer manager found no room under
// memory_limit, nor (for data it may spill) in its temporary directory. The appender reports it as text, and
// without the "Out of Memory Error" prefix when its flush cannot get a block (TestOutOfMemoryIsConfigFault).
func isOutOfMemory(err error) bool {
	var de *duckdb.Error
	if errors.As(err, &de) && de.Type == duckdb.ErrorTypeOutOfMemory {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "Out of Memory Error") || strings.Contains(msg, "could not allocate block of size") ||
		strings.Contains(msg, "failed to pin block of size")
}

// outOfMemory makes DuckDB's out-of-memory error a config fault. Not transient: memory_limit bounds DuckDB's
// own buffers, not what the host has free, so a retry of the same range under the same limit fails the same
// way and the engine would loop on it; a person must raise the limit (or make room where DuckDB spills). Not
// data: no value is at fault. DuckDB spills table data beyond the limit to its temporary directory (the
// plugin leaves temp_directory at DuckDB's default for a file, <path>.tmp), but not what grows with the table
// (README, Memory): the version data of rows deleted (an update deletes the old row: merge), and any index (the
// plugin creates none; a table an older build created may have a PRIMARY KEY).
func (a *applier) outOfMemory(err error) error {
	limit := fmt.Sprintf("its memory_limit of %d MiB (three eighths of the connection's memory_limit %s)", a.s.DuckDBLimit()>>20, a.s.MemoryLimit)
	where := "table " + a.writing
	if a.writing == "" {
		where = "committing tables " + strings.Join(a.written, ", ")
	}
	tmp := a.s.Path + ".tmp"
	raise := "raise the connection's memory_limit"
	if rows, err := a.databaseRows(); err == nil {
		raise = fmt.Sprintf("set the connection's memory_limit to %dMiB or more (the database holds %s rows)", suggestedLimit(a.s.limitBytes(), rows)>>20, countText(rows))
	}
	return fault.ConfigErr(
		fmt.Errorf("database %s: %s: DuckDB ran out of memory under %s (it spills table data beyond the limit to %s, but not the version data of deletes and updates spread through a large table, nor an index such as the PRIMARY KEY an older build of this plugin created): %w",
			a.s.Path, where, limit, tmp, err),
		fmt.Sprintf("%s (default %s; tables with updates and deletes spread through them need roughly %d MiB per million rows), and keep free disk space for %s; the restarted pipeline applies the same range again",
			raise, DefaultMemoryLimit, limitPerMillionRows>>20, tmp))
}

// limitPerMillionRows is the memory_limit a million rows of tables with updates and deletes spread through them
// need (README, Memory: measured ≈ 20 MiB; 16 KiB of delete ids per 2,048-row vector in DuckDB's three eighths
// is ≈ 21 MiB).
const limitPerMillionRows = 21 << 20

// suggestedLimit is the memory_limit to name in the fix for a database of rows rows whose current limit ran
// out: what its rows need, and at least twice the current limit (the need is an estimate), in 64 MiB steps.
func suggestedLimit(current, rows int64) int64 {
	need := max(rows*limitPerMillionRows/1_000_000, 2*current)
	const step = 64 << 20
	return (need + step - 1) / step * step
}

// countText is a row count as the fix prints it: exact when small, in millions when not.
func countText(rows int64) string {
	if rows < 1_000_000 {
		return strconv.FormatInt(rows, 10)
	}
	return strconv.FormatFloat(float64(rows)/1e6, 'f', 1, 64) + "M"
}

// databaseRows is the rows of every table in the database (DuckDB's estimate, from its catalog): DuckDB's
// share holds the delete bookkeeping of all of them, not only the table that ran out. Called after the
// failed transaction is rolled back, on a context of its own: the apply's may be done.
func (a *applier) databaseRows() (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rows int64
	err := a.conn.QueryRowContext(ctx, `SELECT coalesce(sum(estimated_size), 0) FROM duckdb_tables() WHERE database_name = current_database()`).Scan(&rows)
	return rows, err
}

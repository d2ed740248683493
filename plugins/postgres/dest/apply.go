package dest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/postgres/config"
	"github.com/skippr-dev/skippr/plugins/postgres/typemap"
)

// applier is one Apply: one connection, one transaction.
type applier struct {
	cfg    config.Settings
	conn   *pgx.Conn
	tx     pgx.Tx
	staged map[string]bool // staging tables filled in this transaction
	hints  map[string]bool // type names the database knows (to_regtype)
	tables map[string]*tableState
	nul    *values.Handler // on_unrepresentable for NUL characters in text (stage)
	// pipeline is the apply's pipeline, whose per-stream state a renamed stream takes along (renameTable);
	// renamedAway the streams this apply renamed, which its state row no longer lists.
	pipeline    string
	renamedAway map[string]bool
	// entry is the WAL entry whose rows are being written: its number is _skippr_position.
	entry uint64
	// histSeq numbers each stream's changes of entry histEntry in its history table (history.go).
	histEntry uint64
	histSeq   map[string]int64
}

// tableState is what this apply knows of a destination table.
type tableState struct {
	name    string // quoted, schema-qualified
	columns map[string]string
	key     []string
	// meta is what soft_delete, metadata_columns and history are for the table's stream: the connection's
	// settings with the stream's table_options over them (rowmeta.Settings.For).
	meta rowmeta.Options
}

// row is the last change of a key within an apply.
type row struct {
	op  change.Op
	rec arrow.RecordBatch
	i   int
	// committed is the change's source commit time (zero: unknown), kept apart from rec, which may be the
	// batch of the values a soft delete keeps rather than the delete's own.
	committed time.Time
	// seq is the change's place in its entry, for the history table (history.go).
	seq int64
}

// apply runs one transaction: the entries of the request after the pipeline's fence, then the new fence. The
// changes are folded per entry (the last change of a key wins) and written as each entry ends, so a long
// range costs one entry's memory; the range still commits, or not, as one.
func (a *applier) apply(ctx context.Context, req *serve.Range) (serve.ApplyResult, error) {
	cfg := a.cfg
	tx, err := a.conn.Begin(ctx)
	if err != nil {
		return serve.ApplyResult{}, cfg.Explain(err)
	}
	defer tx.Rollback(context.Background())
	a.tx = tx
	a.pipeline = req.Pipeline
	a.renamedAway = map[string]bool{}
	a.tables = map[string]*tableState{}
	a.histSeq = nil // numbered afresh: a retried apply writes its entries again from seq 0
	schema := pgx.Identifier{cfg.TargetSchema}.Sanitize()
	state := stateTable(cfg)
	// CREATE ... IF NOT EXISTS checks the privilege to create before it looks: create only what is missing,
	// so a role with rights on an existing schema needs none on the database.
	var haveSchema, haveState bool
	if err := tx.QueryRow(ctx, `SELECT to_regnamespace($1) IS NOT NULL, to_regclass($2) IS NOT NULL`, schema, state).Scan(&haveSchema, &haveState); err != nil {
		return serve.ApplyResult{}, cfg.Explain(err)
	}
	if !haveSchema {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+schema); err != nil {
			return serve.ApplyResult{}, fmt.Errorf("create schema %s: %w", cfg.TargetSchema, cfg.Explain(err))
		}
	}
	if !haveState {
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+state+` (pipeline text PRIMARY KEY, sequence bigint NOT NULL, streams jsonb NOT NULL DEFAULT '{}')`); err != nil {
			return serve.ApplyResult{}, fmt.Errorf("create %s: %w", state, cfg.Explain(err))
		}
	}
	// The row lock serialises applies of one pipeline; the check below then sees the latest commit.
	if _, err := tx.Exec(ctx, `INSERT INTO `+state+` (pipeline, sequence) VALUES ($1, 0) ON CONFLICT DO NOTHING`, req.Pipeline); err != nil {
		return serve.ApplyResult{}, fmt.Errorf("apply %d: %w", req.Sequence, cfg.Explain(err))
	}
	var last int64
	if err := tx.QueryRow(ctx, `SELECT sequence FROM `+state+` WHERE pipeline = $1 FOR UPDATE`, req.Pipeline).Scan(&last); err != nil {
		return serve.ApplyResult{}, fmt.Errorf("apply %d: %w", req.Sequence, cfg.Explain(err))
	}
	if req.Covers(uint64(last)) {
		return serve.ApplyResult{Skipped: true}, nil
	}

	var (
		// The plans of one entry (per key the last change, streams in first-seen order so that statements
		// are deterministic), written when it ends.
		plans   = change.NewPlans(change.FoldOptions{FullRow: true})
		touched = map[string]uint64{}
		rows    int64
		entry   uint64       // the entry whose items the plans hold
		marks   []serve.Item // resnapshot marks, applied after the rows (resnapshot.go)
	)
	defer func() { plans.Release() }()
	flush := func() error {
		a.entry = entry
		for _, sp := range plans.List() {
			if err := a.writeStream(ctx, sp); err != nil {
				return fmt.Errorf("apply %d: stream %s: %w", entry, sp.Stream, err)
			}
		}
		plans.Release()
		return nil
	}
	for st, err := range req.Entries(uint64(last)) {
		if err != nil {
			return serve.ApplyResult{}, fmt.Errorf("apply %d: %w", req.Sequence, err)
		}
		it := st.Item
		entry = it.Sequence
		if st.End {
			if err := flush(); err != nil {
				return serve.ApplyResult{}, err
			}
			continue
		}
		touched[it.Stream] = req.Sequence
		if it.Schema != nil {
			// Rows before a schema change are written before it: a column added with a value for existing
			// rows must find them in the table (they share an entry when a group commit gathered both).
			// A rename in the new schema is made with those rows (the plan takes the new names), so they go
			// into the renamed column whether or not the table has been renamed already (a replay).
			if sp := plans.Lookup(it.Stream); sp != nil && len(sp.Batches) > 0 {
				sp.FollowRenames(it.Schema.Schema)
				if err := flush(); err != nil {
					return serve.ApplyResult{}, err
				}
			}
			// The rows of a renamed table's former stream go into its table before the table takes the new
			// name (renameTable), as they would have in an entry of their own.
			if from := change.RenamedFromTable(it.Schema.Schema); from != "" {
				if sp := plans.Lookup(from); sp != nil && (len(sp.Batches) > 0 || sp.Fold.Truncated()) {
					if err := flush(); err != nil {
						return serve.ApplyResult{}, err
					}
				}
			}
			plans.Get(it.Stream).AddSchema(it.Schema.Schema)
			continue
		}
		if it.Truncate {
			plans.Get(it.Stream).Fold.Truncate()
			continue
		}
		if it.Resnapshot != serve.ResnapshotNone {
			marks = append(marks, it)
			continue
		}
		if it.Record == nil {
			continue
		}
		if err := plans.Get(it.Stream).Add(it.Record); err != nil {
			return serve.ApplyResult{}, fmt.Errorf("apply %d: stream %s: %w", it.Sequence, it.Stream, err)
		}
		rows += it.Record.NumRows()
	}
	if err := a.resnapshotMarks(ctx, req.Pipeline, marks); err != nil {
		return serve.ApplyResult{}, fmt.Errorf("apply %d: %w", req.Sequence, err)
	}
	for s := range a.renamedAway {
		delete(touched, s)
	}
	streams, _ := json.Marshal(touched)
	if _, err := tx.Exec(ctx, `UPDATE `+state+` SET sequence = $2, streams = streams || $3::jsonb WHERE pipeline = $1`,
		req.Pipeline, int64(req.Sequence), string(streams)); err != nil {
		return serve.ApplyResult{}, fmt.Errorf("apply %d: record the sequence number: %w", req.Sequence, cfg.Explain(err))
	}
	if err := tx.Commit(ctx); err != nil {
		return serve.ApplyResult{}, fmt.Errorf("apply %d: commit: %w", req.Sequence, cfg.Explain(err))
	}
	return serve.ApplyResult{Rows: rows}, nil
}

// writeStream empties the table if the stream was truncated, brings it up to the stream's schemas, then
// deletes and upserts the surviving rows: all in the apply's transaction, so a reader sees the truncate and
// the rows after it together.
func (a *applier) writeStream(ctx context.Context, sp *change.Plan) error {
	if sp.Fold.Truncated() {
		// DELETE rather than TRUNCATE: it takes no exclusive lock, so readers of the table are not blocked
		// while the apply runs.
		name := pgx.Identifier{a.cfg.TargetSchema, TableName(sp.Stream)}.Sanitize()
		var exists bool
		if err := a.tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil {
			return a.cfg.Explain(err)
		}
		if exists {
			if _, err := a.tx.Exec(ctx, "DELETE FROM "+name); err != nil {
				return fmt.Errorf("truncate %s: %w", name, a.cfg.Explain(err))
			}
		}
	}
	for _, s := range sp.Schemas {
		if err := a.ensureTable(ctx, sp.Stream, s); err != nil {
			return err
		}
	}
	ts := a.tables[sp.Stream]
	if ts == nil {
		return nil // only schema changes of a stream without rows yet: the table exists now
	}
	if ts.meta.History {
		if err := a.writeHistory(ctx, sp, ts); err != nil {
			return err
		}
	}
	// Group surviving rows: deletes by key schema, upserts by batch schema (one COPY and merge each); with
	// metadata columns also by op, which they hold as a constant of the statement.
	type group struct {
		schema *arrow.Schema
		op     change.Op
		rows   []row
	}
	meta := ts.meta
	var (
		upserts, deletes []*group
		find             = func(gs *[]*group, s *arrow.Schema, op change.Op) *group {
			if !meta.Any() {
				op = change.OpInsert // one statement for every op
			}
			for _, g := range *gs {
				if g.op == op && (g.schema == s || (g.schema.Equal(s) && protocol.SchemaID(g.schema) == protocol.SchemaID(s))) {
					return g
				}
			}
			g := &group{schema: s, op: op}
			*gs = append(*gs, g)
			return g
		}
	)
	times := make([]*array.Timestamp, len(sp.Batches))
	for i, b := range sp.Batches {
		var err error
		if times[i], err = change.Committed(b); err != nil {
			return fmt.Errorf("%s: %w", sp.Stream, err)
		}
	}
	var inserts, fullDeletes []row // rows of a stream without a key: appended as they come; full row deletes (fullrow.go)
	for _, l := range sp.Fold.Last() {
		r := row{op: l.Op, rec: sp.Batches[l.Batch], i: l.Row}
		r.committed, _ = change.CommittedAt(times[l.Batch], l.Row)
		switch {
		case r.op == change.OpDelete && change.FullRow(r.rec.Schema()):
			fullDeletes = append(fullDeletes, r)
		case !sp.Keyed[l.Batch]:
			inserts = append(inserts, r)
		case r.op == change.OpDelete && meta.SoftDelete && l.HasValues:
			// Its insert or update was folded into this entry: keep those values, flagged deleted.
			r.rec, r.i = sp.Batches[l.ValBatch], l.ValRow
			g := find(&upserts, r.rec.Schema(), r.op)
			g.rows = append(g.rows, r)
		case r.op == change.OpDelete:
			g := find(&deletes, r.rec.Schema(), r.op)
			g.rows = append(g.rows, r)
		default:
			g := find(&upserts, r.rec.Schema(), r.op)
			g.rows = append(g.rows, r)
		}
	}
	for _, g := range deletes {
		if err := a.delete(ctx, ts, g.schema, g.rows); err != nil {
			return err
		}
	}
	if err := a.deleteFullRows(ctx, ts, fullDeletes); err != nil {
		return err
	}
	for _, g := range upserts {
		if err := a.upsert(ctx, ts, g.schema, g.op, g.rows, true); err != nil {
			return err
		}
	}
	if len(inserts) > 0 {
		var ins []*group
		for _, r := range inserts {
			g := find(&ins, r.rec.Schema(), r.op)
			g.rows = append(g.rows, r)
		}
		for _, g := range ins {
			if err := a.upsert(ctx, ts, g.schema, g.op, g.rows, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// knownType says whether the destination database has a type of that name.
func (a *applier) knownType(ctx context.Context, name string) bool {
	if ok, seen := a.hints[name]; seen {
		return ok
	}
	var ok bool
	// A savepoint keeps a malformed name from aborting the transaction.
	sp, err := a.tx.Begin(ctx)
	if err == nil {
		err = sp.QueryRow(ctx, `SELECT to_regtype($1) IS NOT NULL`, name).Scan(&ok)
		if err != nil {
			sp.Rollback(ctx)
			ok = false
		} else {
			sp.Commit(ctx)
		}
	}
	a.hints[name] = ok
	return ok
}

// columnType is a field's destination type: the source's PostgreSQL type when it travels as text and the
// database has it, else the Arrow mapping.
func (a *applier) columnType(ctx context.Context, f arrow.Field) (string, error) {
	hint := ""
	if h, ok := f.Metadata.GetValue(typemap.MetaType); ok && h != "" && typemap.HintApplies(f) && a.knownType(ctx, h) {
		hint = h
	}
	return typemap.ColumnType(f, hint)
}

// ensureTable creates the stream's table, or adds the columns it lacks and changes column types that differ.
func (a *applier) ensureTable(ctx context.Context, stream string, s *arrow.Schema) error {
	name := pgx.Identifier{a.cfg.TargetSchema, TableName(stream)}.Sanitize()
	ts := a.tables[stream]
	if ts == nil {
		if err := a.renameTable(ctx, change.RenamedFromTable(s), stream); err != nil {
			return err
		}
		meta, err := a.cfg.Settings.For(stream)
		if err != nil {
			return err
		}
		ts = &tableState{name: name, columns: map[string]string{}, meta: meta}
		rows, err := a.tx.Query(ctx, `
			SELECT a.attname, format_type(a.atttypid, a.atttypmod)
			FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, name)
		if err != nil {
			return a.cfg.Explain(err)
		}
		for rows.Next() {
			var c, t string
			if err := rows.Scan(&c, &t); err != nil {
				rows.Close()
				return err
			}
			ts.columns[c] = t
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return a.cfg.Explain(err)
		}
		a.tables[stream] = ts
	}
	if err := ts.meta.CheckSchema(stream, s); err != nil {
		return err
	}
	fields := a.withMeta(change.DataFields(s))
	key := change.PrimaryKey(s)
	if len(ts.columns) == 0 {
		defs := make([]string, 0, len(fields)+1)
		for _, f := range fields {
			t, err := a.columnType(ctx, f)
			if err != nil {
				return err
			}
			defs = append(defs, pgx.Identifier{f.Name}.Sanitize()+" "+t)
			ts.columns[f.Name] = t
		}
		defs = append(defs, a.metaDefs(ts)...)
		if len(key) > 0 {
			defs = append(defs, "PRIMARY KEY ("+quoteAll(key)+")")
		}
		if _, err := a.tx.Exec(ctx, "CREATE TABLE "+name+" ("+strings.Join(defs, ", ")+")"); err != nil {
			return fmt.Errorf("create table %s: %w", name, a.cfg.Explain(err))
		}
		ts.key = key
		return nil
	}
	if ts.key == nil {
		ts.key = key
	}
	if err := a.ensureMeta(ctx, ts); err != nil {
		return err
	}
	if err := a.renameColumns(ctx, ts, fields); err != nil {
		return err
	}
	for _, f := range fields {
		t, err := a.columnType(ctx, f)
		if err != nil {
			return err
		}
		col := pgx.Identifier{f.Name}.Sanitize()
		have, ok := ts.columns[f.Name]
		switch {
		case !ok:
			// Rows that existed before the column was added hold, at the source, the value it was added
			// with; PostgreSQL gives them the same with a default it drops again at once (existing rows keep
			// it, later rows carry their own values).
			def := ""
			existing, fill := f.Metadata.GetValue(values.MetaExistingRows)
			if fill {
				def = " DEFAULT " + quoteLiteral(existing) + "::" + t
			}
			if _, err := a.tx.Exec(ctx, "ALTER TABLE "+name+" ADD COLUMN IF NOT EXISTS "+col+" "+t+def); err != nil {
				return fmt.Errorf("add column %s to %s: %w", f.Name, name, a.cfg.Explain(err))
			}
			if fill {
				if _, err := a.tx.Exec(ctx, "ALTER TABLE "+name+" ALTER COLUMN "+col+" DROP DEFAULT"); err != nil {
					return fmt.Errorf("add column %s to %s: %w", f.Name, name, a.cfg.Explain(err))
				}
				slog.Info("added a column; existing rows hold the value they hold at the source", "table", name, "column", f.Name, "value", existing)
			}
		case !sameType(have, t):
			if _, err := a.tx.Exec(ctx, "ALTER TABLE "+name+" ALTER COLUMN "+col+" TYPE "+t+" USING "+col+"::"+t); err != nil {
				return fmt.Errorf("change column %s of %s from %s to %s: %w", f.Name, name, have, t, a.cfg.Explain(err))
			}
		default:
			continue
		}
		ts.columns[f.Name] = t
	}
	return nil
}

// renameColumns renames the columns the source renamed (change.RenamedFromMeta) before missing ones are
// added, so rows written before the rename keep their values under the new name. The table's own columns
// decide: a replay finds the new name there already and renames nothing. PostgreSQL renames the column in
// the primary key and indexes too.
func (a *applier) renameColumns(ctx context.Context, ts *tableState, fields []arrow.Field) error {
	has := func(c string) bool { _, ok := ts.columns[c]; return ok }
	for _, r := range change.Renames(fields, has) {
		if _, err := a.tx.Exec(ctx, "ALTER TABLE "+ts.name+" RENAME COLUMN "+pgx.Identifier{r.From}.Sanitize()+" TO "+pgx.Identifier{r.To}.Sanitize()); err != nil {
			return fmt.Errorf("rename column %s of %s to %s: %w", r.From, ts.name, r.To, a.cfg.Explain(err))
		}
		ts.columns[r.To] = ts.columns[r.From]
		delete(ts.columns, r.From)
		for i, k := range ts.key {
			if k == r.From {
				ts.key[i] = r.To
			}
		}
		slog.Info("renamed a column as the source did", "table", ts.name, "from", r.From, "to", r.To)
	}
	return nil
}

// quoteLiteral is a string constant in the escape syntax, whatever standard_conforming_strings says.
func quoteLiteral(s string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// sameType compares format_type output with a type we wrote; the short names we write are the
// canonical ones, except for these spellings.
func sameType(have, want string) bool {
	if have == want {
		return true
	}
	alias := map[string]string{
		"timestamptz": "timestamp with time zone", "timestamp": "timestamp without time zone",
		"time": "time without time zone", "varchar": "character varying", "bool": "boolean",
		"int": "integer", "int4": "integer", "int8": "bigint", "int2": "smallint", "float8": "double precision", "float4": "real",
	}
	norm := func(s string) string {
		base, arr := strings.CutSuffix(s, "[]")
		if a, ok := alias[base]; ok {
			base = a
		}
		if arr {
			return base + "[]"
		}
		return base
	}
	return norm(have) == norm(want)
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = pgx.Identifier{n}.Sanitize()
	}
	return strings.Join(q, ", ")
}

// stage fills a temporary table (kept for the session, emptied at commit) with the given columns of rows.
func (a *applier) stage(ctx context.Context, ts *tableState, s *arrow.Schema, cols []string, rows []row) (string, error) {
	h := sha256.Sum256([]byte(ts.name + "\x00" + strings.Join(cols, "\x00") + "\x00" + typesOf(ts, cols)))
	stage := "skippr_stage_" + hex.EncodeToString(h[:8])
	qcols := quoteAll(cols)
	if _, err := a.tx.Exec(ctx, "CREATE TEMP TABLE IF NOT EXISTS "+stage+" ON COMMIT DELETE ROWS AS SELECT "+qcols+" FROM "+ts.name+" WITH NO DATA"); err != nil {
		return "", fmt.Errorf("create staging table for %s: %w", ts.name, a.cfg.Explain(err))
	}
	if a.staged[stage] {
		if _, err := a.tx.Exec(ctx, "TRUNCATE "+stage); err != nil {
			return "", a.cfg.Explain(err)
		}
	}
	a.staged[stage] = true
	encs := make([]map[arrow.RecordBatch]typemap.Encoder, len(cols))
	// Under null_and_record, upsert puts _skippr_meta last (withMeta), and it takes the replacements of the
	// row's other columns: it may not be in the batch (the source records nothing).
	meta := a.cfg.Policy == values.NullAndRecord && len(cols) > 0 && cols[len(cols)-1] == change.MetaColumn
	// The commit-time metadata column (rowmeta) is not in the batch: it takes the row's committed; the history
	// table's op and seq (history.go) take the row's op name and seq.
	committed, hop, hseq := slices.Index(cols, rowmeta.SourceCommittedAt), slices.Index(cols, histOp), slices.Index(cols, histSeq)
	idx := make([]int, len(cols))
	for j, c := range cols {
		fi := s.FieldIndices(c)
		switch {
		case j == committed || j == hop || j == hseq:
			idx[j] = -1
		case len(fi) == 1:
			idx[j] = fi[0]
		case meta && j == len(cols)-1:
			idx[j] = -1
		default:
			return "", fmt.Errorf("column %s is not in the batch", c)
		}
		encs[j] = map[arrow.RecordBatch]typemap.Encoder{}
	}
	var (
		buf     bytes.Buffer
		tmp     []byte
		changed values.Row
	)
	for _, r := range rows {
		changed.Reset()
		for j := range cols {
			if j > 0 {
				buf.WriteByte('\t')
			}
			if meta && j == len(cols)-1 {
				writeMeta(&buf, r, idx[j], &changed)
				continue
			}
			if j == hop {
				buf.WriteString(rowmeta.OpName(r.op))
				continue
			}
			if j == hseq {
				buf.WriteString(strconv.FormatInt(r.seq, 10))
				continue
			}
			if j == committed {
				if r.committed.IsZero() {
					buf.WriteString(`\N`)
				} else {
					buf.WriteString(r.committed.UTC().Format("2006-01-02 15:04:05.999999Z07:00"))
				}
				continue
			}
			arr := r.rec.Column(idx[j])
			if arr.IsNull(r.i) {
				buf.WriteString(`\N`)
				continue
			}
			enc, ok := encs[j][r.rec]
			if !ok {
				var err error
				enc, err = typemap.NewEncoder(s.Field(idx[j]), arr)
				if err != nil {
					return "", err
				}
				encs[j][r.rec] = enc
			}
			tmp = enc(tmp[:0], r.i)
			if bytes.IndexByte(tmp, 0) >= 0 {
				if err := a.nulValue(ts, cols[j], r, tmp, &changed); err != nil {
					return "", err
				}
				buf.WriteString(`\N`)
				continue
			}
			writeCopyText(&buf, tmp)
		}
		buf.WriteByte('\n')
	}
	if _, err := a.conn.PgConn().CopyFrom(ctx, &buf, "COPY "+stage+" ("+qcols+") FROM STDIN"); err != nil {
		return "", fmt.Errorf("copy into the staging table of %s: %w", ts.name, a.cfg.Explain(err))
	}
	return stage, nil
}

// nulValue decides about a value holding a NUL character: PostgreSQL's text types cannot store one (COPY fails
// with `invalid byte sequence for encoding "UTF8": 0x00`, the same at every retry), while MySQL's VARCHAR and
// Arrow's utf8 can. Only a text form holds a raw NUL: bytea's is hex. The destination's on_unrepresentable
// decides as the sources' does for values Arrow cannot hold: fail (a data fault naming table, column and key),
// or null_and_record (nil: the caller writes NULL, and the value is recorded in the row's _skippr_meta). A key
// column fails under either, since a row without its key cannot be applied.
func (a *applier) nulValue(ts *tableState, col string, r row, text []byte, changed *values.Row) error {
	key := make([]string, 0, len(ts.key))
	for _, k := range ts.key {
		if fi := r.rec.Schema().FieldIndices(k); len(fi) == 1 {
			// A NUL in a message breaks the log lines and terminals that show it: written as \0.
			key = append(key, k+"="+strings.ReplaceAll(r.rec.Column(fi[0]).ValueStr(r.i), "\x00", `\0`))
		}
	}
	where := "row " + strings.Join(key, ", ")
	if len(key) == 0 {
		where = "a row of a stream without a key"
	}
	isKey := slices.Contains(ts.key, col)
	if a.cfg.Policy == values.NullAndRecord && !isKey {
		u := &values.Unrepresentable{Value: string(text), Reason: "PostgreSQL text cannot store a NUL character (0x00)"}
		return a.nul.Handle(values.Where{Table: ts.name, Column: col, Key: func() string { return strings.Join(key, ", ") }}, u, changed)
	}
	fix := "set on_unrepresentable: null_and_record in this destination's settings to write NULL and record the value in the table's _skippr_meta column, or remove the NUL characters at the source (MySQL: UPDATE … SET col = REPLACE(col, CHAR(0), '')), or send the stream to a destination that keeps them (Iceberg, DuckDB)"
	if isKey {
		fix = "a key value cannot be replaced by NULL: remove the NUL characters at the source (MySQL: UPDATE … SET col = REPLACE(col, CHAR(0), '')), or send the stream to a destination that keeps them (Iceberg, DuckDB)"
	}
	return fault.DataErr(fmt.Errorf("table %s column %s, %s: the value holds a NUL character (0x00), which PostgreSQL text cannot store", ts.name, col, where), fix)
}

// withMeta adds _skippr_meta to a table's fields under null_and_record, where NUL replacements are recorded,
// when the stream does not carry it already.
func (a *applier) withMeta(fields []arrow.Field) []arrow.Field {
	if a.cfg.Policy != values.NullAndRecord || slices.ContainsFunc(fields, func(f arrow.Field) bool { return f.Name == change.MetaColumn }) {
		return fields
	}
	return values.NullAndRecord.Fields(fields)
}

// writeMeta writes row r's _skippr_meta (column i of its batch, -1: none) with the replacements of this
// destination appended to those the source recorded.
func writeMeta(buf *bytes.Buffer, r row, i int, changed *values.Row) {
	var from string
	if i >= 0 {
		if col, ok := r.rec.Column(i).(*array.String); ok && col.IsValid(r.i) {
			from = col.Value(r.i)
		}
	}
	switch {
	case !changed.Changed() && from == "":
		buf.WriteString(`\N`)
		return
	case changed.Changed() && from != "":
		var have, add values.Meta
		if json.Unmarshal([]byte(from), &have) == nil && json.Unmarshal([]byte(changed.JSON()), &add) == nil {
			have.Changes = append(have.Changes, add.Changes...)
			b, _ := json.Marshal(have)
			from = string(b)
		} else {
			from = changed.JSON()
		}
	case changed.Changed():
		from = changed.JSON()
	}
	writeCopyText(buf, []byte(from))
}

func typesOf(ts *tableState, cols []string) string {
	t := make([]string, len(cols))
	for i, c := range cols {
		t[i] = ts.columns[c]
	}
	return strings.Join(t, "\x00")
}

// writeCopyText escapes a value for COPY's text format.
func writeCopyText(buf *bytes.Buffer, v []byte) {
	for _, c := range v {
		switch c {
		case '\\':
			buf.WriteString(`\\`)
		case '\t':
			buf.WriteString(`\t`)
		case '\n':
			buf.WriteString(`\n`)
		case '\r':
			buf.WriteString(`\r`)
		default:
			buf.WriteByte(c)
		}
	}
}

// upsert writes rows (all of one batch schema) with one merge; without a key (merge false) it inserts. With
// metadata columns (rowmeta) op is every row's newest change, and the statement sets them as constants.
func (a *applier) upsert(ctx context.Context, ts *tableState, s *arrow.Schema, op change.Op, rows []row, merge bool) error {
	var cols []string
	for _, f := range change.DataFields(s) {
		if a.cfg.Policy != values.NullAndRecord || f.Name != change.MetaColumn {
			cols = append(cols, f.Name)
		}
	}
	if ts.meta.SourceCommittedAt {
		cols = append(cols, rowmeta.SourceCommittedAt) // stage fills it with the row's commit time
	}
	if a.cfg.Policy == values.NullAndRecord {
		cols = append(cols, change.MetaColumn) // last: stage fills it with the row's replacements
	}
	stage, err := a.stage(ctx, ts, s, cols, rows)
	if err != nil {
		return err
	}
	qcols := quoteAll(cols)
	metaCols, metaVals := a.metaValues(ts.meta, op)
	sql := "INSERT INTO " + ts.name + " (" + qcols + metaCols + ") SELECT " + qcols + metaVals + " FROM " + stage
	if merge {
		key := change.PrimaryKey(s)
		var sets []string
		for _, c := range cols {
			if !slices.Contains(key, c) {
				q := pgx.Identifier{c}.Sanitize()
				sets = append(sets, q+" = EXCLUDED."+q)
			}
		}
		for _, c := range constMeta(ts.meta) {
			q := pgx.Identifier{c.Name}.Sanitize()
			sets = append(sets, q+" = EXCLUDED."+q)
		}
		sql += " ON CONFLICT (" + quoteAll(key) + ")"
		if len(sets) == 0 {
			// Not DO NOTHING: the row must get a new version (xmin) even so, which is how a re-snapshot knows
			// it arrived (resnapshot.go).
			q := pgx.Identifier{key[0]}.Sanitize()
			sql += " DO UPDATE SET " + q + " = EXCLUDED." + q
		} else {
			sql += " DO UPDATE SET " + strings.Join(sets, ", ")
		}
	}
	if _, err := a.tx.Exec(ctx, sql); err != nil {
		return fmt.Errorf("write %d rows into %s: %w", len(rows), ts.name, a.cfg.Explain(err))
	}
	return nil
}

// delete removes rows by key, or with soft_delete marks them deleted and keeps their values.
func (a *applier) delete(ctx context.Context, ts *tableState, s *arrow.Schema, rows []row) error {
	key := change.PrimaryKey(s)
	staged := key
	if ts.meta.SoftDelete && ts.meta.SourceCommittedAt {
		staged = append(slices.Clone(key), rowmeta.SourceCommittedAt)
	}
	stage, err := a.stage(ctx, ts, s, staged, rows)
	if err != nil {
		return err
	}
	conds := make([]string, len(key))
	for i, k := range key {
		q := pgx.Identifier{k}.Sanitize()
		conds[i] = "t." + q + " = s." + q
	}
	sql := "DELETE FROM " + ts.name + " t USING " + stage + " s WHERE " + strings.Join(conds, " AND ")
	if ts.meta.SoftDelete {
		sql = "UPDATE " + ts.name + " t SET " + a.metaSets(ts.meta, change.OpDelete, "s."+pgx.Identifier{rowmeta.SourceCommittedAt}.Sanitize()) + " FROM " + stage + " s WHERE " + strings.Join(conds, " AND ")
	}
	if _, err := a.tx.Exec(ctx, sql); err != nil {
		return fmt.Errorf("delete %d rows from %s: %w", len(rows), ts.name, a.cfg.Explain(err))
	}
	return nil
}

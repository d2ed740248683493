package dest

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/util"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/snowflake/sfsql"
)

// TableName is the destination table of a stream: its last dot-separated part (public.users → USERS).
func TableName(stream string) string {
	if i := strings.LastIndexByte(stream, '.'); i >= 0 {
		stream = stream[i+1:]
	}
	return sfsql.Name(stream)
}

// streamPlan is a stream's folded batches of one chunk of an apply, with the table they go to and their staged files.
type streamPlan struct {
	*change.Plan // nil once the loads are prepared
	// Stream is the plan's stream, kept when the plan is released.
	Stream    string
	table     sfsql.Table
	loads     []*load
	truncated bool // the stream was truncated before the loads' rows
	// opts are the stream's soft_delete, metadata_columns and history (Settings.For); with History, hist are
	// the loads of every change into histTable (history.go).
	opts      rowmeta.Options
	hist      []*load
	histTable sfsql.Table
}

// track is what an apply keeps of a stream's batches beside its plan: the WAL entry of each batch of the
// current chunk, and where each batch's changes start among the stream's changes of that entry (a history
// row's _SKIPPR_SEQ), counted across chunks.
type track struct {
	pos   []uint64 // by batch number of the chunk's plan
	seq0  []int64
	entry uint64 // the entry next counts in
	next  int64
}

// load is one Parquet file of a stream: the surviving rows of the batches of one schema.
type load struct {
	schema *arrow.Schema
	cols   []sfsql.Column
	file   string // local path; its base name is the staged file's name
	stage  sfsql.Table
	rows   int64
	into   sfsql.Table // the table whose stage the file is put to and which the load goes into
	extras []extra     // staged beyond the data and the op
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

func (x *conn) table(name string) sfsql.Table {
	return sfsql.Table{Database: sfsql.Name(x.s.Database), Schema: sfsql.Name(x.s.Schema), Name: name}
}

func (x *conn) apply(ctx context.Context, req *serve.Range) (res serve.ApplyResult, err error) {
	if err := x.ensureState(ctx); err != nil {
		return res, err
	}
	if !x.d.orphansChecked[req.Pipeline] {
		if err := x.abortOrphans(ctx, req.Pipeline); err != nil {
			return res, err
		}
		if x.d.orphansChecked == nil {
			x.d.orphansChecked = map[string]bool{}
		}
		x.d.orphansChecked[req.Pipeline] = true
	}
	defer func() {
		if err != nil && x.d.orphansChecked != nil {
			// A transaction this apply could not roll back (the connection broke) may hold locks: look again
			// before the next apply.
			x.d.orphansChecked[req.Pipeline] = false
		}
		if err != nil {
			delete(x.d.fillsRead, req.Pipeline)
		}
		if err != nil {
			// The columns this process remembers may be what failed (a column dropped or renamed outside
			// skippr): the next apply reads them again, and adds back what is missing.
			x.d.tables = nil
		}
	}()
	if !x.d.fillsRead[req.Pipeline] {
		list, err := x.readFills(ctx, req.Pipeline)
		if err != nil {
			return res, err
		}
		if x.d.fills == nil {
			x.d.fills, x.d.fillsRead, x.d.intents = map[string][]fill{}, map[string]bool{}, map[string]map[string]string{}
		}
		list, intents := splitRenames(list)
		x.d.fills[req.Pipeline], x.d.intents[req.Pipeline], x.d.fillsRead[req.Pipeline] = list, intents, true
	}
	rn, err := x.loadRenames(ctx, maps.Clone(x.d.intents[req.Pipeline]))
	if err != nil {
		return res, err
	}
	state, err := x.readState(ctx, req.Pipeline)
	if err != nil {
		return res, err
	}
	fence := state.Sequence
	if x.d.fenceRead != nil {
		x.d.fenceRead(req.Pipeline, fence)
	}
	if req.Covers(fence) {
		return serve.ApplyResult{Skipped: true}, nil
	}
	// Outside the transaction (each DDL statement commits in Snowflake): tables and columns, files, staging tables.
	dir, err := os.MkdirTemp(x.d.TempDir, "skippr-snowflake-*")
	if err != nil {
		return res, fmt.Errorf("temporary directory for Parquet files: %w", err)
	}
	defer os.RemoveAll(dir)
	var (
		// The range is folded in chunks of at most budget bytes of batches: each chunk is written to Parquet
		// files, staged and released before the next is read, so memory holds one chunk whatever the range.
		// The chunks are merged in order in the transaction, which applies the changes in log order as one
		// fold would (a key changed in two chunks is merged twice, the newer last).
		budget = x.d.foldBudget()
		folded = change.NewPlans(change.FoldOptions{})
		held   int64
		chunks [][]*streamPlan
		seen   = map[string]string{} // table → the stream writing it, across the range
		order  []string              // streams touched, in first-seen order
		nstage int
		tracks = map[string]*track{}
	)
	defer func() { folded.Release() }()
	flush := func() error {
		var plans []*streamPlan
		for _, p := range folded.List() {
			opts, err := x.s.For(p.Stream)
			if err != nil {
				return err
			}
			sp := &streamPlan{Plan: p, Stream: p.Stream, table: x.table(TableName(p.Stream)), opts: opts}
			tables := []sfsql.Table{sp.table}
			if opts.History {
				sp.histTable = rn.history(x, sp.table)
				tables = append(tables, sp.histTable)
			}
			for _, t := range tables {
				if other, ok := seen[t.Name]; ok && other != sp.Stream {
					return fault.ConfigErr(fmt.Errorf("streams %s and %s both map to table %s", other, sp.Stream, t),
						"replicate only one of the two tables into this database and schema, or send them to separate destinations")
				}
				seen[t.Name] = sp.Stream
			}
			if !slices.Contains(order, sp.Stream) {
				order = append(order, sp.Stream)
			}
			plans = append(plans, sp)
		}
		for _, sp := range plans {
			for _, s := range sp.Schemas {
				// A source column named as one the plugin adds would be overwritten: refused, naming it.
				if err := sp.opts.CheckSchema(sp.Stream, s); err != nil {
					return err
				}
				if err := x.ensureTable(ctx, req.Pipeline, sp.table, s, metaColumns(sp.opts), false); err != nil {
					return fmt.Errorf("stream %s: %w", sp.Stream, err)
				}
				if sp.opts.History {
					if err := x.ensureTable(ctx, req.Pipeline, sp.histTable, s, historyColumns(), true); err != nil {
						return fmt.Errorf("stream %s: %w", sp.Stream, err)
					}
				}
			}
			// Rows of earlier chunks staged under a column's former name: their merges write the renamed column.
			// The rename above committed at once (DDL), before any of the merges, which run in the transaction
			// after the last chunk; so does a replay, whose earlier chunks find the column renamed already.
			for _, s := range sp.Schemas {
				followRenames(chunks, sp.table, s)
			}
			if err := x.prepareLoads(ctx, req, sp, tracks[sp.Stream], dir, &nstage); err != nil {
				return fmt.Errorf("stream %s: %w", sp.Stream, err)
			}
			sp.truncated = sp.Fold.Truncated()
			sp.Plan = nil // what the transaction needs is in the loads; the batches go back below
		}
		folded.Release()
		for _, tr := range tracks {
			tr.pos, tr.seq0 = tr.pos[:0], tr.seq0[:0]
		}
		held = 0
		if len(plans) > 0 {
			chunks = append(chunks, plans)
		}
		return nil
	}
	// Entries skips what is held already: the part of the range that committed in an earlier apply.
	for st, err := range req.Entries(fence) {
		if err != nil {
			return res, fmt.Errorf("apply %d: %w", req.Sequence, err)
		}
		if st.End {
			continue // the fold runs over the whole range (chunk by chunk): the entries need no boundary
		}
		it := st.Item
		if !rn.seen[it.Stream] {
			// A renamed stream's first item: its table may be the former stream's (tablerename.go). What the
			// apply holds of the former stream is staged first, so that it can follow the table.
			rn.seen[it.Stream] = true
			if from := it.RenamedFromTable(); from != "" && from != it.Stream {
				if folded.Lookup(from) != nil {
					if err := flush(); err != nil {
						return res, err
					}
				}
				moved, err := x.renameTable(ctx, req.Pipeline, rn, from, it.Stream)
				if err != nil {
					return res, fmt.Errorf("stream %s renamed from %s: %w", it.Stream, from, err)
				}
				if moved {
					old, nw := x.table(TableName(from)), x.table(TableName(it.Stream))
					if err := x.restage(ctx, chunks, old, nw, it.Stream); err != nil {
						return res, fmt.Errorf("stream %s renamed from %s: %w", it.Stream, from, err)
					}
					// The tables the former stream's earlier chunks wrote are the renamed stream's now.
					maps.DeleteFunc(seen, func(_, s string) bool { return s == from })
					// History rows number on from the former stream's in the entry: one table, one count.
					if tr := tracks[from]; tr != nil && tracks[it.Stream] == nil {
						tracks[it.Stream] = &track{entry: tr.entry, next: tr.next}
					}
				}
			}
		}
		if to, ok := rn.redirect[TableName(it.Stream)]; ok && to != it.Stream {
			it.Stream = to // a replay: the former stream's items before the rename, whose table was renamed
		} else if rn.gone[it.Stream] {
			delete(rn.gone, it.Stream) // the source made the renamed stream's table again
		}
		state.Streams[it.Stream] = req.Sequence
		switch {
		case it.Schema != nil:
			folded.Get(it.Stream).AddSchema(it.Schema.Schema)
		case it.Truncate:
			folded.Get(it.Stream).Fold.Truncate()
		case it.Record != nil:
			if err := folded.Get(it.Stream).Add(it.Record); err != nil {
				return res, fmt.Errorf("stream %s: %w", it.Stream, err)
			}
			tr := tracks[it.Stream]
			if tr == nil {
				tr = &track{}
				tracks[it.Stream] = tr
			}
			if tr.entry != it.Sequence {
				tr.entry, tr.next = it.Sequence, 0
			}
			tr.pos = append(tr.pos, it.Sequence)
			tr.seq0 = append(tr.seq0, tr.next)
			tr.next += it.Record.NumRows()
			res.Rows += it.Record.NumRows()
			// The fold's index and the picks written from it cost about as much as narrow batches
			// themselves: counted per row, so the budget bounds the chunk's whole working set.
			held += int64(util.TotalRecordSize(it.Record)) + it.Record.NumRows()*foldRowCost
			if held >= budget {
				if err := flush(); err != nil {
					return res, err
				}
			}
		default:
			return res, fmt.Errorf("stream %s: item holds neither a batch nor a schema", it.Stream)
		}
	}
	if err := flush(); err != nil {
		return res, err
	}
	fl := &fills{x: x, pipeline: req.Pipeline, pending: slices.Clone(x.d.fills[req.Pipeline])}

	// _SKIPPR_SYNCED_AT: the apply's one time for every row it writes, taken as its transaction begins (the
	// plugin's clock, UTC; Snowflake's CURRENT_TIMESTAMP would differ from statement to statement).
	synced := sfsql.TimestampLiteral(time.Now())
	// Plain statements on the session rather than a database/sql Tx: the transaction carries a name, by which
	// a later process finds it if this one dies inside it (abortOrphans).
	if err := x.exec(ctx, sfsql.Begin(TxName(req.Pipeline))); err != nil {
		return res, explain(x.s, "begin", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = x.exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	txexec := func(q string, args ...any) error { return x.exec(ctx, q, args...) }
	copyIn := func(l *load) error {
		if err := txexec(sfsql.Copy(l.stage, l.into, filepath.Base(l.file))); err != nil {
			return explain(x.s, fmt.Sprintf("copy %s into %s (the staging table of %s)", filepath.Base(l.file), l.stage, l.into), err)
		}
		return nil
	}
	for _, plans := range chunks {
		for _, sp := range plans {
			if sp.truncated {
				if err := txexec(sfsql.DeleteAll(sp.table)); err != nil {
					return res, explain(x.s, "truncate "+sp.table.String(), err)
				}
			}
			meta := mirrorMeta(sp.opts, synced)
			key := make([]string, 0)
			for _, l := range sp.loads {
				if err := fl.before(ctx, sp.table, l.cols); err != nil {
					return res, err
				}
				if err := copyIn(l); err != nil {
					return res, err
				}
				key = key[:0]
				for _, k := range change.PrimaryKey(l.schema) {
					key = append(key, l.target(sfsql.Name(k)))
				}
				q := sfsql.Append(sp.table, l.stage, l.cols, meta)
				if len(key) > 0 {
					q = sfsql.Merge(sp.table, l.stage, l.cols, key, int(change.OpDelete), meta)
				}
				if err := txexec(q); err != nil {
					return res, explain(x.s, "merge into "+sp.table.String(), err)
				}
			}
			for _, l := range sp.hist {
				if err := copyIn(l); err != nil {
					return res, err
				}
				if err := txexec(sfsql.Append(sp.histTable, l.stage, l.cols, historyMeta())); err != nil {
					return res, explain(x.s, "append to "+sp.histTable.String(), err)
				}
			}
		}
	}
	if err := fl.rest(ctx); err != nil {
		return res, err
	}
	// The renames this range did or followed are committed over: their intents and the former streams' state
	// rows go with the fence.
	db, sc := sfsql.Name(x.s.Database), sfsql.Name(x.s.Schema)
	for _, old := range slices.Sorted(maps.Keys(rn.intents)) {
		if rn.done[old] {
			if err := txexec(sfsql.DeleteFill(db, sc), req.Pipeline, old, ""); err != nil {
				return res, explain(x.s, "delete the rename intent of "+old, err)
			}
		}
	}
	for _, stream := range slices.Sorted(maps.Keys(rn.gone)) {
		if err := txexec(sfsql.DeleteState(db, sc), req.Pipeline, stream); err != nil {
			return res, explain(x.s, "delete the state row of renamed stream "+stream, err)
		}
		order = slices.DeleteFunc(order, func(s string) bool { return s == stream })
	}
	var args []any
	args = append(args, req.Pipeline, "", strconv.FormatUint(req.Sequence, 10))
	for _, stream := range order {
		args = append(args, req.Pipeline, stream, strconv.FormatUint(req.Sequence, 10))
	}
	nstate := len(args) / 3
	args = append(args, strconv.FormatUint(fence, 10))
	x.d.stats.Statements++
	merged, err := x.conn.ExecContext(ctx, sfsql.UpsertState(sfsql.Name(x.s.Database), sfsql.Name(x.s.Schema), nstate), args...)
	if err != nil {
		return res, explain(x.s, fmt.Sprintf("record sequence %d", req.Sequence), err)
	}
	// The pipeline's row moves only from the fence read before the transaction (sfsql.UpsertState): one row
	// fewer means another writer committed since, and this apply must not overwrite its state.
	if n, err := merged.RowsAffected(); err != nil || n != int64(nstate) {
		return res, fmt.Errorf("pipeline %s: the state row of %s no longer holds sequence %d, read before this apply of %d–%d: another process applied the pipeline meanwhile; rolled back (%d of %d state rows merged, %v), the next attempt reads the state again",
			req.Pipeline, sfsql.StateTable, fence, req.FirstSequence, req.Sequence, n, nstate, err)
	}
	if x.d.beforeCommit != nil {
		x.d.beforeCommit(req.Pipeline)
	}
	if err := x.exec(ctx, "COMMIT"); err != nil {
		return res, explain(x.s, fmt.Sprintf("commit sequence %d", req.Sequence), err)
	}
	committed = true
	x.d.fills[req.Pipeline] = fl.pending
	maps.DeleteFunc(rn.intents, func(old, _ string) bool { return rn.done[old] })
	x.d.intents[req.Pipeline] = rn.intents
	return res, nil
}

// TxName is the name of the pipeline's apply transactions: SKIPPR_ and a hash of the pipeline's name.
func TxName(pipeline string) string {
	h := sha256.Sum256([]byte(pipeline))
	return "SKIPPR_" + strings.ToUpper(hex.EncodeToString(h[:8]))
}

// abortOrphans aborts the pipeline's transactions left open by a process that died inside one (SIGKILL,
// power loss): Snowflake keeps such a transaction, and the locks its MERGE took, until the session expires
// hours later, so every following apply would wait on them. The WAL's lease lets one process apply a
// pipeline at a time, so a transaction of the pipeline's name in another session is an orphan.
func (x *conn) abortOrphans(ctx context.Context, pipeline string) error {
	var self string
	rows, err := x.query(ctx, "SELECT CURRENT_SESSION()")
	if err != nil {
		return explain(x.s, "read the session id", err)
	}
	for rows.Next() {
		_ = rows.Scan(&self)
	}
	rows.Close()
	rows, err = x.query(ctx, "SHOW TRANSACTIONS")
	if err != nil {
		return explain(x.s, "list open transactions", err)
	}
	cols, err := rows.Columns()
	if err != nil {
		rows.Close()
		return err
	}
	var orphans []string
	name := TxName(pipeline)
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			rows.Close()
			return fmt.Errorf("list open transactions: %w", err)
		}
		row := map[string]string{}
		for i, c := range cols {
			row[strings.ToLower(c)] = vals[i].String
		}
		if strings.EqualFold(row["name"], name) && row["session"] != self {
			orphans = append(orphans, row["id"])
		}
	}
	rows.Close()
	for _, id := range orphans {
		if _, err := strconv.ParseUint(id, 10, 64); err != nil {
			return fmt.Errorf("SHOW TRANSACTIONS: transaction id %q is not a number", id)
		}
		if err := x.exec(ctx, sfsql.AbortTransaction(id)); err != nil {
			return explain(x.s, "abort orphaned transaction "+id, err)
		}
		x.d.log().Warn("aborted the transaction of an earlier process that died inside it", "pipeline", pipeline, "transaction", id)
	}
	return nil
}

// prepareLoads writes the stream's surviving rows as Parquet files (one per batch schema), PUTs each to the
// table stage and makes its staging table; with history, the same for every change of the chunk, into the
// history table. tr holds the WAL entry of each of the plan's batches.
func (x *conn) prepareLoads(ctx context.Context, req *serve.Range, sp *streamPlan, tr *track, dir string, nstage *int) error {
	committed := make([]*array.Timestamp, len(sp.Batches))
	for i, rec := range sp.Batches {
		c, err := change.Committed(rec)
		if err != nil {
			return err
		}
		committed[i] = c
	}
	meta := func(batch, row int) (uint64, time.Time) {
		at, _ := change.CommittedAt(committed[batch], row)
		return tr.pos[batch], at
	}
	type group struct {
		schema *arrow.Schema
		picks  map[int][]pick // by batch number
		order  []int
	}
	var groups []*group
	add := func(batch int, p pick) {
		rec := sp.Batches[batch]
		var g *group
		for _, c := range groups {
			if change.SameSchema(c.schema, rec.Schema()) {
				g = c
			}
		}
		if g == nil {
			g = &group{schema: rec.Schema(), picks: map[int][]pick{}}
			groups = append(groups, g)
		}
		if _, ok := g.picks[batch]; !ok {
			g.order = append(g.order, batch)
		}
		g.picks[batch] = append(g.picks[batch], p)
	}
	for _, l := range sp.Fold.Last() {
		p := pick{row: l.Row, op: l.Op}
		p.pos, p.committed = meta(l.Batch, l.Row)
		vb := l.Batch
		if l.Op == change.OpDelete && sp.opts.SoftDelete {
			// The row's last values, when the range held them, go with the flag; else only the flag.
			if l.HasValues {
				vb, p.row = l.ValBatch, l.ValRow
			} else {
				p.keyOnly = true
			}
		}
		add(vb, p)
	}
	write := func(g *group, into sfsql.Table, extras []extra) (*load, error) {
		cols, err := stageColumns(g.schema)
		if err != nil {
			return nil, err
		}
		*nstage++
		// The stage number keeps the names of an apply's files apart across its chunks (PUT overwrites).
		name := unsafeName.ReplaceAllString(fmt.Sprintf("%s__%s__%d__%d.parquet", req.Pipeline, sp.Stream, req.Sequence, *nstage), "_")
		l := &load{schema: g.schema, cols: cols, file: filepath.Join(dir, name), into: into, extras: extras}
		l.stage = x.table(fmt.Sprintf("_SKIPPR_STAGE_%d", *nstage))
		var parts []part
		for _, bi := range g.order {
			parts = append(parts, part{rec: sp.Batches[bi], picks: g.picks[bi]})
		}
		n, size, err := writeParquet(ctx, l.file, g.schema, cols, parts, extras)
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
		if x.d.staged != nil {
			x.d.staged()
		}
		l.rows = n
		x.d.stats.Puts++
		x.d.stats.BytesPut += size
		x.d.stats.RowsPut += n
		if err := x.exec(ctx, sfsql.Put(l.file, into)); err != nil {
			return nil, explain(x.s, "put "+name+" to "+into.Stage(), err)
		}
		if err := x.exec(ctx, sfsql.CreateStaging(l.stage, cols, extraColumns(extras))); err != nil {
			return nil, explain(x.s, "create staging table "+l.stage.String(), err)
		}
		return l, nil
	}
	for _, g := range groups {
		l, err := write(g, sp.table, mirrorExtras(sp.opts))
		if err != nil {
			return err
		}
		sp.loads = append(sp.loads, l)
	}
	if !sp.opts.History {
		return nil
	}
	// Every change, not the fold's survivors: one load per run of batches of one schema.
	groups = nil
	var cur *group
	for bi, rec := range sp.Batches {
		ops, err := change.OpValues(rec)
		if err != nil {
			return err
		}
		if cur == nil || !change.SameSchema(cur.schema, rec.Schema()) {
			cur = &group{schema: rec.Schema(), picks: map[int][]pick{}}
			groups = append(groups, cur)
		}
		cur.order = append(cur.order, bi)
		for i, op := range ops {
			p := pick{row: i, op: op, seq: tr.seq0[bi] + int64(i)}
			p.pos, p.committed = meta(bi, i)
			cur.picks[bi] = append(cur.picks[bi], p)
		}
	}
	for _, g := range groups {
		l, err := write(g, sp.histTable, historyExtras)
		if err != nil {
			return err
		}
		sp.hist = append(sp.hist, l)
	}
	return nil
}

// followRenames points the merges of the earlier chunks' loads into table t at the columns a later schema s
// renamed (change.RelabelRenamed across chunks; within a chunk change.Plan relabels the batches itself).
func followRenames(chunks [][]*streamPlan, t sfsql.Table, s *arrow.Schema) {
	for _, plans := range chunks {
		for _, sp := range plans {
			if sp.table != t {
				continue
			}
			for _, l := range append(slices.Clip(sp.loads), sp.hist...) {
				has := func(n string) bool {
					return slices.ContainsFunc(l.cols, func(c sfsql.Column) bool { return c.Name == sfsql.Name(n) })
				}
				for _, r := range change.Renames(change.DataFields(s), has) {
					for i, c := range l.cols {
						if c.Name == sfsql.Name(r.From) {
							if c.Staged == "" {
								l.cols[i].Staged = c.Name
							}
							l.cols[i].Name = sfsql.Name(r.To)
						}
					}
				}
			}
		}
	}
}

// target is the target column of a load's column staged as n: n, or its new name after a rename.
func (l *load) target(n string) string {
	for _, c := range l.cols {
		if c.Staged == n {
			return c.Name
		}
	}
	return n
}

// stageColumns are the Snowflake columns of a batch schema's data fields.
func stageColumns(s *arrow.Schema) ([]sfsql.Column, error) {
	var cols []sfsql.Column
	seen := map[string]string{}
	for _, f := range change.DataFields(s) {
		t, err := sfsql.Of(f.Type)
		if err != nil {
			return nil, fault.DataErr(fmt.Errorf("column %s: %w", f.Name, err),
				"cast the column to a type the snowflake plugin maps (see its README) in the source, or leave the column out")
		}
		n := sfsql.Name(f.Name)
		if other, ok := seen[n]; ok {
			return nil, fault.DataErr(fmt.Errorf("columns %s and %s both become Snowflake column %s", other, f.Name, n),
				"rename one of the two source columns")
		}
		seen[n] = f.Name
		cols = append(cols, sfsql.Column{Name: n, Type: t})
	}
	return cols, nil
}

// columns reads a table's columns; nil when it does not exist.
func (x *conn) columns(ctx context.Context, t sfsql.Table) (map[string]sfsql.Type, error) {
	if cols, ok := x.d.tables[t.String()]; ok {
		return cols, nil
	}
	rows, err := x.query(ctx, sfsql.Columns(t.Database), t.Schema, t.Name)
	if err != nil {
		return nil, explain(x.s, "read columns of "+t.String(), err)
	}
	defer rows.Close()
	var cols map[string]sfsql.Type
	for rows.Next() {
		var name, typ string
		var prec, scale sql.NullInt64
		if err := rows.Scan(&name, &typ, &prec, &scale); err != nil {
			return nil, fmt.Errorf("read columns of %s: %w", t, err)
		}
		if cols == nil {
			cols = map[string]sfsql.Type{}
		}
		cols[name] = sfsql.ParseType(typ, int(prec.Int64), int(scale.Int64))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", t, err)
	}
	if cols != nil {
		x.remember(t, cols)
	}
	return cols, nil
}

func (x *conn) remember(t sfsql.Table, cols map[string]sfsql.Type) {
	if x.d.tables == nil {
		x.d.tables = map[string]map[string]sfsql.Type{}
	}
	x.d.tables[t.String()] = cols
}

// ensureTable creates the table from s and own (the columns the plugin adds after the data columns: the
// metadata columns, or a history table's), adds the columns of s and own it lacks and widens a NUMBER's
// precision; a column whose type cannot take the new one stops the apply with both types named. A history
// table is keyed by (position, seq), not by the stream's key. A column added to a mirrored table with a value
// for the rows already there (values.MetaExistingRows) has the fill recorded first (fill.go); a history
// table's rows are past changes and keep NULL.
func (x *conn) ensureTable(ctx context.Context, pipeline string, t sfsql.Table, s *arrow.Schema, own []sfsql.Column, history bool) error {
	want, err := stageColumns(s)
	if err != nil {
		return err
	}
	have, err := x.columns(ctx, t)
	if err != nil {
		return err
	}
	if have == nil {
		if len(want) == 0 {
			return fault.DataErr(fmt.Errorf("schema of %s has no data columns", t), "replicate a table that has columns")
		}
		var key []string
		for _, k := range change.PrimaryKey(s) {
			key = append(key, sfsql.Name(k))
		}
		if history {
			key = historyKey
		}
		if err := x.exec(ctx, sfsql.CreateTable(t, append(slices.Clip(want), own...), key)); err != nil {
			return explain(x.s, "create table "+t.String(), err)
		}
		// Read back rather than assume: a table created concurrently by someone else keeps its own columns.
		delete(x.d.tables, t.String())
		if have, err = x.columns(ctx, t); err != nil {
			return err
		}
		if have == nil {
			return fmt.Errorf("table %s was created but INFORMATION_SCHEMA lists no columns", t)
		}
	}
	// Renames first (change.Renames), so rows written before the source renamed a column keep their values
	// under the new name; the table's own columns decide, so a replay renames nothing. Snowflake matches
	// names as sfsql.Name folds them.
	has := func(n string) bool { _, ok := have[sfsql.Name(n)]; return ok }
	existing := existingValues(s)
	for _, r := range change.Renames(change.DataFields(s), has) {
		from, to := sfsql.Name(r.From), sfsql.Name(r.To)
		if err := x.exec(ctx, sfsql.RenameColumn(t, from, to)); err != nil {
			delete(x.d.tables, t.String())
			return explain(x.s, fmt.Sprintf("rename column %s of %s to %s", from, t, to), err)
		}
		have[to] = have[from]
		delete(have, from)
		x.d.log().Info("renamed a column as the source did", "table", t.String(), "from", from, "to", to)
	}
	for _, c := range want {
		h, ok := have[c.Name]
		if !ok {
			if v, fill := existing[c.Name]; fill && !history {
				if _, err := x.recordFill(ctx, pipeline, t, c, v); err != nil {
					return err
				}
			}
			if err := x.exec(ctx, sfsql.AddColumn(t, c)); err != nil {
				delete(x.d.tables, t.String())
				return explain(x.s, fmt.Sprintf("add column %s %s to %s", c.Name, c.Type, t), err)
			}
			have[c.Name] = c.Type
			x.d.log().Info("added column", "table", t.String(), "column", c.Name, "type", c.Type.DDL())
			continue
		}
		alter, ok := sfsql.Widen(h, c.Type)
		if !ok {
			return fault.DataErr(fmt.Errorf("column %s of %s is %s, but the stream now sends %s, which Snowflake cannot change it to", c.Name, t, h, c.Type),
				fmt.Sprintf("convert the column yourself (add a column of type %s, copy and rename) and restart, or cast the source column back", c.Type))
		}
		if alter != nil {
			col := sfsql.Column{Name: c.Name, Type: *alter}
			if err := x.exec(ctx, sfsql.AlterType(t, col)); err != nil {
				delete(x.d.tables, t.String())
				return explain(x.s, fmt.Sprintf("widen column %s of %s to %s", c.Name, t, alter), err)
			}
			have[c.Name] = *alter
		}
	}
	// The columns the plugin adds: a setting turned on for a table that exists (the rows there hold NULL, or
	// FALSE for _SKIPPR_DELETED, its default). A source column of the same name was refused before
	// (rowmeta.Options.CheckSchema).
	for _, c := range own {
		if _, ok := have[c.Name]; ok {
			continue
		}
		if err := x.exec(ctx, sfsql.AddColumn(t, c)); err != nil {
			delete(x.d.tables, t.String())
			return explain(x.s, fmt.Sprintf("add column %s %s to %s", c.Name, c.Type, t), err)
		}
		have[c.Name] = c.Type
		x.d.log().Info("added column", "table", t.String(), "column", c.Name, "type", c.Type.DDL())
	}
	return nil
}

package dest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"cloud.google.com/go/bigquery"
	"cloud.google.com/go/bigquery/storage/managedwriter"
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/bigquery/gsql"
	"github.com/skippr-dev/skippr/plugins/bigquery/rows"
)

// StageExpiry is how long a staging table lives when the apply that made it dies before dropping it.
const StageExpiry = 24 * time.Hour

// maxAppendBytes bounds one AppendRows request: the Storage Write API refuses requests over 10 MB.
const maxAppendBytes = 8 << 20

// TableName is the destination table of a stream: its last dot-separated part (public.users → users).
func TableName(stream string) string {
	if i := strings.LastIndexByte(stream, '.'); i >= 0 {
		return stream[i+1:]
	}
	return stream
}

// Stats counts an apply's calls to BigQuery, for the figures in BENCHMARKS.md.
type Stats struct {
	Statements   int   // statements in the transaction
	RoundTrips   int   // REST and gRPC requests
	StagedRows   int64 // rows written to staging tables
	StagedBytes  int64 // protobuf bytes of those rows
	StagingTable int
	Transactions int // query jobs that committed a transaction
}

// Apply commits a range of WAL sequence numbers atomically with the state rows. Each entry of a range is
// folded and appended to the staging tables as soon as its last item arrived, and its records released, so
// memory holds one entry, not the range; the one transaction runs at the end.
func (x *session) Apply(ctx context.Context, r *serve.Range) (serve.ApplyResult, error) {
	res, _, err := x.apply(ctx, r)
	return res, err
}

// apply is Apply, counting its calls to BigQuery.
func (x *session) apply(ctx context.Context, req *serve.Range) (serve.ApplyResult, Stats, error) {
	var st Stats
	x.mu.Lock()
	defer x.mu.Unlock()
	c := x.c
	a := &applier{c: c, req: req, st: &st, log: x.d.log(), byName: map[string]*streamState{}, afterRename: x.d.afterRename,
		beforeCreate: x.d.beforeCreate, entry: change.NewPlans(change.FoldOptions{})}
	res, err := a.run(ctx)
	a.entry.Release()
	if err != nil {
		// What this process believed (state rows, table schemas) may be wrong now: read it again next time.
		delete(c.states, req.Pipeline)
		delete(c.fillsRead, req.Pipeline)
		c.tables = map[string]bigquery.Schema{}
	}
	a.closeSegments()
	a.dropStages()
	return res, st, err
}

type applier struct {
	c      *conn
	req    *serve.Range
	st     *Stats
	log    interface{ Warn(string, ...any) }
	stages []*bigquery.Table

	streams []*streamState // in order of first sight
	byName  map[string]*streamState
	tables  map[string]string // table name → stream
	entry   *change.Plans     // the entry being read, per stream: its rows folded, its records retained until staged
	seq     uint64            // the sequence number of the entry being read: _skippr_position of its rows
	renames *renames          // renamed streams (tablerename.go)
	// histSeq: per history table, the changes of the entry staged so far: a renamed stream's history numbers
	// on from the former stream's in the same entry (_skippr_seq), one table, one count.
	histSeq map[string]int64
	// afterRename (tests) runs after a table was renamed; an error stops the apply there, as a crash would.
	afterRename func(to string) error
	// beforeCreate (tests) runs after a table was looked up and found missing, just before it is created.
	beforeCreate func(table string)
}

// maxTablesPerTransaction: "A transaction can mutate data in at most 100 tables" (BigQuery, "Multi-statement
// transactions", Limitations); each transaction also mutates the pipeline's state table.
const maxTablesPerTransaction = 99

// streamState is what the range so far holds for one stream: its staging tables, in the order their MERGEs
// run, and whether a truncate precedes them.
type streamState struct {
	stream    string
	table     string
	opts      rowmeta.Options // the stream's soft_delete, metadata_columns and history (Settings.For)
	hist      string          // the history table of table (opts.History)
	renamed   bool            // the stream's table was renamed to a later stream's in this apply (tablerename.go)
	touched   bool
	truncated bool
	segs      []*segment
	voided    []*segment // staged before a truncate of a later entry: closed, never committed
	// hsegs stage every change for the history table (opts.History), in order; a truncate voids none.
	hsegs []*segment
}

func (a *applier) stream(name string) (*streamState, error) {
	if ss := a.byName[name]; ss != nil {
		return ss, nil
	}
	// BigQuery table names are case-sensitive (unless the dataset is made case-insensitive), so Orders and
	// orders are two tables; only the same name from two schemas collides.
	t := TableName(name)
	if a.tables == nil {
		a.tables = map[string]string{}
	}
	if other, ok := a.tables[t]; ok {
		return nil, fault.ConfigErr(fmt.Errorf("streams %s and %s both map to table %s", other, name, t),
			"replicate only one of them into this dataset, or each into its own connection with its own dataset")
	}
	a.tables[t] = name
	opts, err := a.c.s.For(name)
	if err != nil {
		return nil, err
	}
	hist := a.renames.history(t)
	if opts.History {
		h := hist
		if other, ok := a.tables[h]; ok {
			return nil, fault.ConfigErr(fmt.Errorf("the history table %s of stream %s is the table of stream %s", h, name, other),
				fmt.Sprintf("turn history off for %s (table_options), or replicate %s into another dataset", name, other))
		}
		a.tables[h] = name
	}
	ss := &streamState{stream: name, table: t, opts: opts, hist: hist}
	a.byName[name] = ss
	a.streams = append(a.streams, ss)
	return ss, nil
}

func (a *applier) run(ctx context.Context) (serve.ApplyResult, error) {
	var res serve.ApplyResult
	c, req := a.c, a.req
	if err := c.ensureState(ctx, req.Pipeline); err != nil {
		return res, err
	}
	if err := c.loadFills(ctx, req.Pipeline); err != nil {
		return res, err
	}
	if err := a.loadRenames(ctx); err != nil {
		return res, err
	}
	state, ok := c.states[req.Pipeline]
	if !ok {
		if _, err := c.readState(ctx, req.Pipeline); err != nil {
			return res, err
		}
		a.st.RoundTrips += 3 // jobs.insert, getQueryResults, jobs.get
		state = c.states[req.Pipeline]
	}
	if req.Covers(state.pipeline) {
		return serve.ApplyResult{Skipped: true}, nil
	}
	for st, err := range req.Entries(state.pipeline) {
		if err != nil {
			return res, err
		}
		if st.End {
			if err := a.endEntry(ctx); err != nil {
				return res, err
			}
			continue
		}
		it := st.Item
		if err := a.followRename(ctx, &it); err != nil {
			return res, err
		}
		if it.Sequence <= state.fence(it.Stream) {
			continue // a split range committed this stream's part before it stopped
		}
		a.seq = it.Sequence
		ss, err := a.stream(it.Stream)
		if err != nil {
			return res, err
		}
		switch {
		case it.Schema != nil:
			if err := a.ensureTables(ctx, ss, it.Schema.Schema); err != nil {
				return res, fmt.Errorf("stream %s: %w", it.Stream, err)
			}
			// Rows read before a rename, not staged yet (this entry) or staged under the former name (earlier
			// entries; their MERGEs run at the end, after the rename committed): they go into the renamed column.
			if p := a.entry.Lookup(ss.stream); p != nil {
				p.FollowRenames(it.Schema.Schema)
			}
			for _, sg := range append(ss.segs, ss.hsegs...) {
				sg.followRenames(it.Schema.Schema)
			}
		case it.Truncate:
			a.entry.Get(ss.stream).Fold.Truncate()
			ss.touched = true
		case it.Record != nil:
			if err := a.ensureTables(ctx, ss, it.Record.Schema()); err != nil {
				return res, fmt.Errorf("stream %s: %w", it.Stream, err)
			}
			if err := a.entry.Get(ss.stream).Add(it.Record); err != nil {
				return res, fmt.Errorf("stream %s: %w", it.Stream, err)
			}
			res.Rows += it.Record.NumRows()
			ss.touched = true
		default:
			return res, fmt.Errorf("stream %s: item holds neither a batch, a schema nor a truncate", it.Stream)
		}
	}
	crashPoint(c.s.TestCrashDir, req)
	groups := a.groups()
	pending := slices.Clone(c.fills[req.Pipeline])
	if err := a.knowTables(ctx, pending); err != nil {
		return res, err
	}
	for i, g := range groups {
		if err := a.commitGroup(ctx, state, g, i == len(groups)-1, &pending); err != nil {
			if len(groups) > 1 {
				err = fmt.Errorf("transaction %d of %d: %w", i+1, len(groups), err)
			}
			return res, fmt.Errorf("apply sequence %d–%d: %w", req.FirstSequence, req.Sequence, err)
		}
	}
	return res, nil
}

// groups splits the range's streams into the transactions it commits in: at most maxTablesPerTransaction
// tables with statements each, in order of first sight. A range within the limit is one transaction, atomic
// over all its tables. A larger one (an initial snapshot of a database with hundreds of tables) commits group
// by group: each transaction records its streams' state rows at the range's sequence number and only the last
// records the pipeline's, so a crash between them leaves the engine resending the range and each stream
// skipping what its own row says it holds — exactly once per stream, though a reader can see the range's
// first groups before its last.
func (a *applier) groups() [][]*streamState {
	var (
		out  [][]*streamState
		cur  []*streamState
		muts int
	)
	for _, ss := range a.streams {
		// A stream's table and its history table commit in one transaction, with the stream's state row.
		n := 0
		if ss.truncated || len(ss.segs) > 0 {
			n++
		}
		if len(ss.hsegs) > 0 {
			n++
		}
		if n > 0 && muts+n > maxTablesPerTransaction {
			out = append(out, cur)
			cur, muts = nil, 0
		}
		muts += n
		cur = append(cur, ss)
	}
	return append(out, cur)
}

// commitGroup runs one transaction: assert the state rows are what this process last saw, the statements of
// the group's streams, and their state rows (and the pipeline's, when last).
// pending holds the recorded fills not done yet (fill.go): each is done before the first MERGE writing its
// column, or after its table's statements, or in the last transaction.
func (a *applier) commitGroup(ctx context.Context, state *state, group []*streamState, last bool, pending *[]fill) error {
	c, req := a.c, a.req
	stateTable := c.table(gsql.StateTable(req.Pipeline))
	stmts := []string{gsql.AssertFence(stateTable)}
	params := map[string]any{}
	fl := &groupFills{a: a, pending: *pending, params: params}
	var streams []string
	syncedAt := false
	for _, ss := range group {
		syncedAt = syncedAt || ss.opts.SyncedAt
		if ss.truncated {
			stmts = append(stmts, gsql.Truncate(c.table(ss.table)))
		}
		for _, sg := range ss.segs {
			stmts = fl.before(stmts, ss.table, sg.cols)
			stmts = append(stmts, sg.statements(c.table(ss.table), c.table(sg.name), ss.opts)...)
		}
		for _, sg := range ss.hsegs {
			stmts = append(stmts, gsql.AppendHistory(c.table(ss.hist), c.table(sg.name), sg.cols, rows.StageName))
		}
		stmts = fl.take(stmts, func(f fill) bool { return f.table == ss.table })
		if ss.touched && !ss.renamed {
			streams = append(streams, ss.stream)
		}
	}
	if last {
		stmts = fl.take(stmts, func(fill) bool { return true })
		stmts = a.renameStatements(stmts, params)
	}
	sort.Strings(streams)
	if last {
		streams = append([]string{gsql.WholePipeline}, streams...)
	}
	stmts = append(stmts, gsql.SetState(stateTable))
	a.st.Statements += len(stmts) + 2 // BEGIN and COMMIT
	if syncedAt {
		a.st.Statements++ // DECLARE
	}
	script := gsql.Transaction(stmts)
	if syncedAt {
		script = gsql.TransactionAt(stmts)
	}
	params["pipeline"], params["fence"], params["sequence"], params["streams"] = req.Pipeline, int64(state.max), int64(req.Sequence), streams
	if _, err := c.query(ctx, script, params); err != nil {
		return err
	}
	*pending = fl.pending
	c.fills[req.Pipeline] = slices.DeleteFunc(c.fills[req.Pipeline], func(f fill) bool { return slices.Contains(fl.done, f) })
	if last {
		a.renamesCommitted(state)
	}
	a.st.RoundTrips += 3
	a.st.Transactions++
	for _, s := range streams {
		if s == gsql.WholePipeline {
			state.pipeline = req.Sequence
		} else {
			state.streams[s] = req.Sequence
		}
	}
	if len(streams) > 0 {
		state.max = max(state.max, req.Sequence)
	}
	return nil
}

// endEntry stages the surviving rows of the entry read so far, per stream, and releases its records. A
// truncate in the entry voids what earlier entries staged for the stream.
func (a *applier) endEntry(ctx context.Context) error {
	defer a.entry.Release()
	clear(a.histSeq)
	defer func() {
		// A stream whose table was renamed in this entry: its later items are of a new table of its name.
		for name, ss := range a.byName {
			if ss.renamed {
				delete(a.byName, name)
			}
		}
	}()
	for _, e := range a.entry.List() {
		ss := a.byName[e.Stream]
		if e.Fold.Truncated() {
			ss.truncated = true
			for _, sg := range ss.segs {
				sg.close()
			}
			ss.voided = append(ss.voided, ss.segs...)
			ss.segs = nil
		}
		if err := a.stageEntry(ctx, ss, e); err != nil {
			return fmt.Errorf("stream %s: %w", ss.stream, err)
		}
	}
	return nil
}

// targetColumns matches a batch's data columns to the target's: the target's spelling of each name, the
// Arrow column indexes, and the target's types, which must be what the Arrow types map to.
func targetColumns(table string, target bigquery.Schema, s *arrow.Schema) (cols []string, idx []int, types []*bigquery.FieldSchema, err error) {
	for i, f := range s.Fields() {
		if change.Reserved(f.Name) {
			continue
		}
		want := rows.Column(f.Name, f)
		var have *bigquery.FieldSchema
		for _, t := range target {
			if strings.EqualFold(t.Name, f.Name) {
				have = t
				break
			}
		}
		if have == nil {
			return nil, nil, nil, fmt.Errorf("table %s has no column %s after adding it", table, f.Name)
		}
		if !rows.SameType(want, have) {
			return nil, nil, nil, typeErr(table, f, have, want)
		}
		cols, idx, types = append(cols, have.Name), append(idx, i), append(types, have)
	}
	return cols, idx, types, nil
}

func typeErr(table string, f arrow.Field, have, want *bigquery.FieldSchema) error {
	return fault.DataErr(fmt.Errorf("table %s column %s is %s in BigQuery, but the stream's %s maps to %s", table, f.Name, rows.Describe(have), f.Type, rows.Describe(want)),
		fmt.Sprintf("change the column in BigQuery to %s (ALTER TABLE … or recreate the table), or give the source column a type that maps to %s", rows.Describe(want), rows.Describe(have)))
}

// ensureTable creates the table from s, or adds the columns of s it lacks (NULLABLE, by a table patch). A
// column whose type differs stops the apply with a fault.DataErr naming both types. spec says what the
// table holds beyond the data columns (the mirror's metadata columns, or a history table's own).
func (a *applier) ensureTable(ctx context.Context, name string, s *arrow.Schema, spec tableSpec) error {
	c := a.c
	t := c.dataset().Table(name)
	target, ok := c.tables[name]
	etag := ""
	if !ok {
		md, err := t.Metadata(ctx)
		a.st.RoundTrips++
		switch {
		case isNotFound(err):
		case err != nil:
			return classify(fmt.Errorf("table %s: %w", c.table(name), err), c.s)
		default:
			target, etag = md.Schema, md.ETag
		}
	}
	fields := change.DataFields(s)
	if target == nil {
		if len(fields) == 0 {
			return fault.DataErr(fmt.Errorf("the stream's schema has no data columns"), "the source must send at least one column")
		}
		var schema bigquery.Schema
		for _, f := range fields {
			if err := rows.CheckName(f.Name); err != nil {
				return fault.DataErr(fmt.Errorf("table %s column %s: %w", c.table(name), f.Name, err), fmt.Sprintf("rename column %s of the source table (ALTER TABLE … RENAME COLUMN) to a name BigQuery takes, or leave table %s out of the pipeline", f.Name, name))
			}
			schema = append(schema, rows.Column(f.Name, f))
		}
		schema = append(schema, spec.extra...)
		md := &bigquery.TableMetadata{Schema: schema, Description: "written by skippr"}
		if spec.history {
			md.Description = "written by skippr: every change of table " + spec.of + ", in order of (_skippr_position, _skippr_seq)"
			md.TableConstraints = &bigquery.TableConstraints{PrimaryKey: &bigquery.PrimaryKey{Columns: []string{gsql.HistPosition, gsql.HistSeq}}}
			md.Clustering = &bigquery.Clustering{Fields: []string{gsql.HistPosition}}
		} else if key := change.PrimaryKey(s); len(key) > 0 {
			// Not enforced by BigQuery, but its optimizer uses it; clustering by the key makes the MERGE
			// read less of the table.
			md.TableConstraints = &bigquery.TableConstraints{PrimaryKey: &bigquery.PrimaryKey{Columns: key}}
			if clusterable(schema, key) {
				md.Clustering = &bigquery.Clustering{Fields: key}
			}
		}
		if a.beforeCreate != nil {
			a.beforeCreate(name)
		}
		err := t.Create(ctx, md)
		a.st.RoundTrips++
		switch {
		case err == nil:
			c.tables[name] = schema
			return nil
		case !isConflict(err):
			return classify(fmt.Errorf("create table %s: %w", c.table(name), err), c.s)
		}
		// Created since the lookup above — by another process, or by an attempt killed after its create
		// landed and before it recorded the apply — so it is a table found like any other: its schema counts.
		md, err = t.Metadata(ctx)
		a.st.RoundTrips++
		if err != nil {
			// Read once, not looped on: a 404 is a table not visible everywhere yet, retryable (classify).
			return classify(fmt.Errorf("read table %s after its create found it there: %w", c.table(name), err), c.s)
		}
		target, etag = md.Schema, md.ETag
	}
	target, renamed, err := a.renameColumns(ctx, name, target, s)
	if err != nil {
		return err
	}
	if renamed {
		etag = "" // the rename changed the table's etag: the patch below reads it again
	}
	var added bigquery.Schema
	for _, f := range fields {
		want := rows.Column(f.Name, f)
		var have *bigquery.FieldSchema
		for _, x := range target {
			if strings.EqualFold(x.Name, f.Name) {
				have = x
			}
		}
		switch {
		case have == nil:
			if err := rows.CheckName(f.Name); err != nil {
				return fault.DataErr(fmt.Errorf("table %s column %s: %w", c.table(name), f.Name, err), fmt.Sprintf("rename column %s of the source table (ALTER TABLE … RENAME COLUMN) to a name BigQuery takes, or leave table %s out of the pipeline", f.Name, name))
			}
			added = append(added, want)
		case !rows.SameType(want, have):
			return typeErr(c.table(name).String(), f, have, want)
		}
	}
	for _, x := range spec.extra {
		if !slices.ContainsFunc(target, func(f *bigquery.FieldSchema) bool { return strings.EqualFold(f.Name, x.Name) }) {
			// Added to a table with rows: they hold NULL (BigQuery fills no value in a patch).
			added = append(added, x)
		}
	}
	if len(added) == 0 {
		c.tables[name] = target
		return nil
	}
	if !spec.history { // a history table's rows are past changes: they keep NULL
		if err := a.recordFills(ctx, name, fields, added); err != nil {
			return err
		}
	}
	if etag == "" {
		md, err := t.Metadata(ctx)
		a.st.RoundTrips++
		if err != nil {
			return classify(fmt.Errorf("table %s: %w", c.table(name), err), c.s)
		}
		target, etag = md.Schema, md.ETag
	}
	grown := append(append(bigquery.Schema{}, target...), added...)
	md, err := t.Update(ctx, bigquery.TableMetadataToUpdate{Schema: grown}, etag)
	a.st.RoundTrips++
	if err != nil {
		return classify(fmt.Errorf("add columns %s to %s: %w", names(added), c.table(name), err), c.s)
	}
	c.tables[name] = md.Schema
	return nil
}

// renameColumns renames the columns the source renamed (change.Renames) before missing ones are added, so
// rows written before the rename keep their values under the new name: ALTER TABLE … RENAME COLUMN, a DDL
// statement that commits at once. The table's columns decide (matched case-insensitively, as BigQuery
// matches column names), so a replay renames nothing. A key column is refused: the plugin clusters the table
// by its key and declares it the primary key, and BigQuery renames neither a clustering nor a key column.
func (a *applier) renameColumns(ctx context.Context, name string, target bigquery.Schema, s *arrow.Schema) (bigquery.Schema, bool, error) {
	c := a.c
	find := func(n string) int {
		return slices.IndexFunc(target, func(f *bigquery.FieldSchema) bool { return strings.EqualFold(f.Name, n) })
	}
	renames := change.Renames(change.DataFields(s), func(n string) bool { return find(n) >= 0 })
	for _, r := range renames {
		i := find(r.From)
		if slices.ContainsFunc(change.PrimaryKey(s), func(k string) bool { return strings.EqualFold(k, r.To) }) {
			return nil, false, fault.DataErr(fmt.Errorf("table %s: the source renamed key column %s to %s, and BigQuery cannot rename a clustering or primary key column", c.table(name), target[i].Name, r.To),
				fmt.Sprintf("recreate the table in BigQuery with the column renamed (CREATE TABLE … CLUSTER BY … AS SELECT … %s AS %s …) and restart, or resnapshot the table", target[i].Name, r.To))
		}
		if err := rows.CheckName(r.To); err != nil {
			return nil, false, fault.DataErr(fmt.Errorf("table %s column %s: %w", c.table(name), r.To, err), fmt.Sprintf("rename column %s of the source table to a name BigQuery takes, or leave table %s out of the pipeline", r.To, name))
		}
		_, err := c.query(ctx, gsql.RenameColumn(c.table(name), target[i].Name, r.To), nil)
		a.st.RoundTrips += 2
		if err != nil {
			return nil, false, fmt.Errorf("rename column %s of %s to %s: %w", target[i].Name, c.table(name), r.To, err)
		}
		renamed := *target[i]
		renamed.Name = r.To
		target = slices.Clone(target)
		target[i] = &renamed
		c.tables[name] = target
		slog.Info("renamed a column as the source did", "table", c.table(name).String(), "from", r.From, "to", r.To)
	}
	return target, len(renames) > 0, nil
}

// followRenames points the segment's MERGE at the columns a later schema s renamed: its rows were staged
// before the rename, under the former names.
func (sg *segment) followRenames(s *arrow.Schema) {
	has := func(n string) bool {
		return slices.ContainsFunc(sg.cols, func(c string) bool { return strings.EqualFold(c, n) })
	}
	for _, r := range change.Renames(change.DataFields(s), has) {
		for i, c := range sg.cols {
			if strings.EqualFold(c, r.From) {
				sg.cols[i] = r.To
			}
		}
	}
}

func names(s bigquery.Schema) string {
	out := make([]string, len(s))
	for i, f := range s {
		out[i] = f.Name + " " + rows.Describe(f)
	}
	return strings.Join(out, ", ")
}

// clusterable says whether BigQuery can cluster on the key columns: at most four, of the types it allows.
func clusterable(s bigquery.Schema, key []string) bool {
	if len(key) > 4 {
		return false
	}
	for _, k := range key {
		ok := false
		for _, f := range s {
			if strings.EqualFold(f.Name, k) && !f.Repeated {
				switch rows.Canonical(f.Type) {
				case rows.Int64, rows.String, rows.Date, rows.Timestamp, rows.DateTime, rows.Bool, rows.Numeric, rows.BigNumeric:
					ok = true
				}
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// segment is one staging table of a stream: rows of one batch schema, appended entry by entry through the
// table's default stream, each row with its ordinal (offset), read by the transaction only once every append
// was acknowledged.
type segment struct {
	schema  *arrow.Schema
	schema2 bigquery.Schema // the staging table's
	name    string
	cols    []string // the target's columns, staged as c0…
	key     []int    // indexes of cols; nil for a stream without a key (appended)
	enc     *rows.Encoder
	ms      *managedwriter.ManagedStream
	offset  int64 // rows appended so far; each row's ordinal
	// meta: the rows are staged with their metadata (rows.StageMetaSchema); valued and keyOnly count the
	// rows staged with values and the key-only deletes, so soft_delete runs only the statements it needs.
	meta            bool
	valued, keyOnly int
}

func (sg *segment) close() {
	if sg.ms != nil {
		sg.ms.Close()
		sg.ms = nil
	}
}

// closeSegments closes the write streams still open (an apply that failed before committing them).
func (a *applier) closeSegments() {
	for _, ss := range a.streams {
		for _, sg := range append(ss.segs, ss.hsegs...) {
			sg.close()
		}
	}
}

// stageEntry appends the entry's surviving rows of one stream to its staging tables: the current one when the
// rows' schema is its schema, a new one otherwise (so the MERGEs, run in order, keep the order of changes);
// with history, every change of the entry to the history's staging tables too.
func (a *applier) stageEntry(ctx context.Context, ss *streamState, e *change.Plan) error {
	rows, err := a.survivors(ss, e)
	if err != nil {
		return err
	}
	if err := a.stageRuns(ctx, ss.table, &ss.segs, rows, ss.opts.Any(), false); err != nil {
		return err
	}
	if !ss.opts.History {
		return nil
	}
	if rows, err = a.changes(e); err != nil {
		return err
	}
	if a.histSeq == nil {
		a.histSeq = map[string]int64{}
	}
	for i := range rows {
		rows[i].meta.Seq += a.histSeq[ss.hist]
	}
	a.histSeq[ss.hist] += int64(len(rows))
	return a.stageRuns(ctx, ss.hist, &ss.hsegs, rows, true, true)
}

// stageRuns appends rows to the staging tables segs of table, grouped by schema: each schema's rows to the
// last segment when it has that schema, to a new one otherwise.
func (a *applier) stageRuns(ctx context.Context, table string, segs *[]*segment, staged []stagedRow, meta, history bool) error {
	type group struct {
		schema *arrow.Schema
		rows   []stagedRow
	}
	var groups []*group
	// Each batch's schema is compared once, not each row's (SameSchema formats both schemas as text: per row
	// it made most of a 2M-row range's garbage, 7.8 GB of it, in the plugin's heap profile).
	bySchema := map[*arrow.Schema]*group{}
	for _, r := range staged {
		s := r.rec.Schema()
		g := bySchema[s]
		if g == nil {
			for _, x := range groups {
				if change.SameSchema(x.schema, s) {
					g = x
					break
				}
			}
			if g == nil {
				g = &group{schema: s}
				groups = append(groups, g)
			}
			bySchema[s] = g
		}
		g.rows = append(g.rows, r)
	}
	for _, g := range groups {
		var sg *segment
		if n := len(*segs); n > 0 && change.SameSchema((*segs)[n-1].schema, g.schema) {
			sg = (*segs)[n-1]
		} else {
			var err error
			if sg, err = a.newSegment(ctx, table, g.schema, meta, history); err != nil {
				return err
			}
			*segs = append(*segs, sg)
		}
		if err := a.appendRows(ctx, table, sg, g.rows); err != nil {
			return err
		}
	}
	return nil
}

// newSegment creates a staging table for rows of schema s bound for table; meta stages each row's metadata
// too (rows.StageMetaSchema), history makes it a segment of the history table (appended, never merged).
func (a *applier) newSegment(ctx context.Context, table string, s *arrow.Schema, meta, history bool) (*segment, error) {
	c := a.c
	cols, idx, types, err := targetColumns(table, c.tables[table], s)
	if err != nil {
		return nil, err
	}
	sg := &segment{schema: s, cols: cols, meta: meta}
	if key := change.PrimaryKey(s); len(key) > 0 && !history {
		for _, k := range key {
			for i, col := range cols {
				if strings.EqualFold(col, k) {
					sg.key = append(sg.key, i)
				}
			}
		}
		if len(sg.key) != len(key) {
			return nil, fault.DataErr(fmt.Errorf("primary key %v is not among the columns of the batch", key), "the source must send its key columns")
		}
	}
	if sg.enc, err = rows.NewEncoder(s, idx); err != nil {
		return nil, err
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	sg.name = fmt.Sprintf("_skippr_stage_%s_%s", table, hex.EncodeToString(rnd[:]))
	if len(sg.name) > 1024 {
		sg.name = "_skippr_stage_" + hex.EncodeToString(rnd[:])
	}
	sg.schema2 = rows.StageSchema(types)
	if meta {
		sg.schema2 = rows.StageMetaSchema(types)
	}
	schema := sg.schema2
	t := c.dataset().Table(sg.name)
	if err := t.Create(ctx, &bigquery.TableMetadata{Schema: schema, ExpirationTime: time.Now().Add(StageExpiry),
		Description: "skippr staging table of one apply; dropped after it, expires if not"}); err != nil {
		return nil, classify(fmt.Errorf("create staging table %s: %w", c.table(sg.name), err), c.s)
	}
	a.st.RoundTrips++
	a.st.StagingTable++
	a.stages = append(a.stages, t)
	return sg, nil
}

// open opens the staging table's default stream. The default stream needs no CreateWriteStream, whose quota
// ("10,000 streams every hour, per project per region") a pending stream per table per apply spends: 166
// tables changing every minute would exhaust it. It is at-least-once, so a retried append can leave a row
// twice; every staged row carries its ordinal and the statements read each ordinal once, and nothing reads
// the staging table before every append was acknowledged.
func (a *applier) open(ctx context.Context, sg *segment) error {
	if sg.ms != nil {
		return nil
	}
	c := a.c
	parent := managedwriter.TableParentFromParts(c.s.Project, c.s.Dataset, sg.name)
	ms, err := c.write.NewManagedStream(ctx, managedwriter.WithType(managedwriter.DefaultStream),
		managedwriter.WithDestinationTable(parent), managedwriter.WithSchemaDescriptor(rows.Descriptor(sg.schema2)))
	if err != nil {
		return classify(fmt.Errorf("staging table %s: open the default stream: %w", sg.name, err), c.s)
	}
	sg.ms = ms
	return nil
}

// appendRows encodes rows into requests of at most maxAppendBytes and waits for each to be acknowledged, so
// nothing of the entry is held once it returns.
func (a *applier) appendRows(ctx context.Context, table string, sg *segment, staged []stagedRow) error {
	c := a.c
	if err := a.open(ctx, sg); err != nil {
		return err
	}
	// The connection is closed once the entry's rows are acknowledged: a range of hundreds of tables would
	// otherwise hold one open per table until it commits ("Concurrent connections" quota).
	defer sg.close()
	var (
		buf     []byte
		bounds  []int
		results []*managedwriter.AppendResult
	)
	flush := func() error {
		if len(bounds) == 0 {
			return nil
		}
		batch := make([][]byte, len(bounds))
		start := 0
		for i, end := range bounds {
			batch[i] = buf[start:end]
			start = end
		}
		r, err := sg.ms.AppendRows(ctx, batch)
		if err != nil {
			return classify(fmt.Errorf("staging table %s: append rows from ordinal %d: %w", sg.name, sg.offset, err), c.s)
		}
		a.st.RoundTrips++
		a.st.StagedBytes += int64(len(buf))
		a.st.StagedRows += int64(len(bounds))
		results = append(results, r)
		sg.offset += int64(len(bounds))
		buf, bounds = nil, nil
		return nil
	}
	for _, r := range staged {
		var err error
		ord := sg.offset + int64(len(bounds))
		if sg.meta {
			buf, err = sg.enc.AppendMeta(buf, r.rec, r.row, int8(r.op), ord, r.meta)
			if r.meta.Vals {
				sg.valued++
			} else {
				sg.keyOnly++
			}
		} else {
			buf, err = sg.enc.Append(buf, r.rec, r.row, int8(r.op), ord)
		}
		if err != nil {
			return fmt.Errorf("table %s: %w", table, err)
		}
		bounds = append(bounds, len(buf))
		if len(buf) >= maxAppendBytes {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	for _, r := range results {
		if _, err := r.GetResult(ctx); err != nil {
			return classify(fmt.Errorf("staging table %s: append rows: %w", sg.name, err), c.s)
		}
	}
	return nil
}

// dropStages deletes the apply's staging tables; one that cannot be deleted expires (StageExpiry).
func (a *applier) dropStages() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, t := range a.stages {
		if err := t.Delete(ctx); err != nil && !isNotFound(err) {
			a.log.Warn("could not drop staging table; it expires by itself", "table", t.TableID, "expires_in", StageExpiry, "err", err)
		}
		a.st.RoundTrips++
	}
}

// crashPoint is the test hook of Settings.TestCrashDir: the process exits between staging and commit.
// It fires once for the pipeline's first apply that gets here, whatever its sequence, and once for each range
// that holds a multiple of 25, not only one ending on it: with coalesced ranges (whose bounds follow timing)
// few do, and on a loaded machine a run's commits are fewer and larger, so its sequences may never reach 25.
// The first apply makes the hook certain to fire in any run that commits rows.
func crashPoint(dir string, req *serve.Range) {
	if dir == "" {
		return
	}
	exitOnce(filepath.Join(dir, fmt.Sprintf("crash-%s-first", req.Pipeline)))
	first := max(req.FirstSequence, 1)
	m := (first + 24) / 25 * 25
	if m > req.Sequence {
		return
	}
	exitOnce(filepath.Join(dir, fmt.Sprintf("crash-%s-%d", req.Pipeline, m)))
}

// exitOnce exits the process with status 3 unless marker exists, creating the marker first; it returns when
// the marker was there already (or could not be written).
func exitOnce(marker string) {
	if _, err := os.Stat(marker); !errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		return
	}
	os.Exit(3)
}

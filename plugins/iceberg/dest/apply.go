package dest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// maxCommitAttempts bounds how often one table's commit is rebuilt after losing a race to another writer.
const maxCommitAttempts = 8

type tableResult struct {
	skipped bool
	rows    int64
}

// applyTable commits one table's part of an apply, rebuilding it from a fresh table state when another writer
// committed first. The SQL catalog reports such a race as an unwrapped "requirement failed: branch main has
// changed", which iceberg-go's own retry does not recognise, so the loop lives here.
func (d *Destination) applyTable(ctx context.Context, oc *openCatalog, s Settings, req serve.ApplyRequest, g *tableGroup) (tableResult, error) {
	for attempt := 1; ; attempt++ {
		a := &tableAttempt{d: d, oc: oc, s: s, req: req, g: g, attempt: attempt, mem: memory.DefaultAllocator}
		r, err := a.run(ctx)
		if err == nil {
			return r, nil
		}
		conflict := isConflict(err)
		// Files of an attempt that never reached the catalog, or that the catalog refused outright, belong to
		// nobody. After any other commit error the catalog may have taken the commit: keep them, unless the
		// catalog shows it did not.
		if !a.committing || conflict || a.notCommitted(ctx) {
			a.cleanup(ctx)
		}
		if !conflict || attempt >= maxCommitAttempts {
			if conflict {
				return tableResult{}, fmt.Errorf("commit lost to concurrent writers %d times: %w", attempt, err)
			}
			return tableResult{}, err
		}
		d.retries.Add(1)
		d.log().Info("iceberg commit conflict, retrying", "table", g.table, "sequence", req.Sequence, "attempt", attempt, "err", err)
		wait := time.Duration(10<<min(attempt, 6))*time.Millisecond + time.Duration(rand.Int64N(int64(20*time.Millisecond)))
		select {
		case <-ctx.Done():
			return tableResult{}, context.Cause(ctx)
		case <-time.After(wait):
		}
	}
}

// isConflict says the catalog refused a commit because the table moved: nothing was committed, and rebuilding
// the commit on the new table state will do.
func isConflict(err error) bool {
	if errors.Is(err, table.ErrCommitFailed) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "requirement failed") && (strings.Contains(msg, "has changed") || strings.Contains(msg, "created concurrently"))
}

// tableAttempt is one try at committing a table's part of an apply.
type tableAttempt struct {
	d       *Destination
	oc      *openCatalog
	s       Settings
	req     serve.ApplyRequest
	g       *tableGroup
	attempt int
	mem     memory.Allocator

	fs         *recordingIO // the table's file system, noting every file this attempt creates
	committing bool         // the catalog commit was sent
	loaded     string       // metadata location of the table state the attempt built on

	tbl         *table.Table // the loaded table over fs
	tx          *table.Transaction
	keyCols     []string
	seen        map[string]bool // schemas already evolved, by fingerprint
	schemas     []*arrow.Schema // the schemas evolved, in order
	evolution   []schemaChange  // changes evolve gathered, committed as one schema update (commitEvolution)
	partitioned bool            // the configured partition spec was considered
	rs          *resnap         // the table's re-snapshot bookkeeping (resnapshot.go)
	// histEntry and histSeq number a history table's rows within their entry (history.go).
	histEntry uint64
	histSeq   int64
	initials  []initialFill // columns added with an initial-default, and the batches before (initial.go)
}

// notCommitted says whether a commit that failed is known not to have landed. Only the embedded SQL catalog
// can say: its commit is one local transaction that is over when the call returns, and it moves the table's
// metadata location, so a table still at the location the attempt started from did not take it. (A full disk
// fails commits this way, while writing the new metadata file; keeping their files would fill it further on
// every retry.) A REST server may still apply a request whose response was lost, so there the files stay.
func (a *tableAttempt) notCommitted(ctx context.Context) bool {
	if a.oc.db == nil || a.loaded == "" {
		return false
	}
	tbl, err := a.oc.cat.LoadTable(ctx, append(a.s.NamespaceIdent(), a.g.table))
	if err != nil {
		return false
	}
	return tbl.MetadataLocation() == a.loaded
}

func (a *tableAttempt) cleanup(ctx context.Context) {
	if a.fs == nil {
		return
	}
	for _, f := range a.fs.created() {
		// A file whose creation failed may not exist; it needs no removal.
		if err := a.fs.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			a.d.log().Warn("iceberg: could not remove the file of a failed commit; it is an orphan for compaction to delete", "file", f, "err", err)
		}
	}
}

// recordingIO is a table's file IO that notes the name of every file created through it. iceberg-go reports
// only the files it finished (a data file whose write failed halfway, on a full disk, is never returned), and
// manifests only through the staged snapshot; noting names at creation lets a failed attempt remove all it
// wrote. It keeps the optional ReadFile and Stat of the file systems iceberg-go uses (local and blob).
type recordingIO struct {
	base iceio.IO
	mu   sync.Mutex
	seen map[string]bool
	list []string
}

func (r *recordingIO) note(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.seen[name] {
		if r.seen == nil {
			r.seen = map[string]bool{}
		}
		r.seen[name] = true
		r.list = append(r.list, name)
	}
}

// noted returns the files created so far, in order.
func (r *recordingIO) noted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.list...)
}

// created returns the files created so far, in order, and forgets them.
func (r *recordingIO) created() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.list
	r.list, r.seen = nil, nil
	return out
}

func (r *recordingIO) Open(name string) (iceio.File, error) { return r.base.Open(name) }
func (r *recordingIO) Remove(name string) error             { return r.base.Remove(name) }

func (r *recordingIO) writer() (iceio.WriteFileIO, error) {
	w, ok := r.base.(iceio.WriteFileIO)
	if !ok {
		return nil, fmt.Errorf("file system %T is read-only", r.base)
	}
	return w, nil
}

func (r *recordingIO) Create(name string) (iceio.FileWriter, error) {
	w, err := r.writer()
	if err != nil {
		return nil, err
	}
	r.note(name)
	return w.Create(name)
}

func (r *recordingIO) WriteFile(name string, p []byte) error {
	w, err := r.writer()
	if err != nil {
		return err
	}
	r.note(name)
	return w.WriteFile(name, p)
}

func (r *recordingIO) ReadFile(name string) ([]byte, error) {
	if rf, ok := r.base.(iceio.ReadFileIO); ok {
		return rf.ReadFile(name)
	}
	f, err := r.base.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

func (r *recordingIO) Stat(name string) (fs.FileInfo, error) {
	if st, ok := r.base.(iceio.StatIO); ok {
		return st.Stat(name)
	}
	f, err := r.base.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Stat()
}

func (a *tableAttempt) run(ctx context.Context) (tableResult, error) {
	if skipped, err := a.begin(ctx); err != nil || skipped {
		return tableResult{skipped: skipped}, err
	}
	// Evolve the schema for every schema the items carry, in log order, before writing anything: the rows
	// are written once, in the final schema.
	c, err := a.changes(ctx, a.g.items)
	if err != nil {
		return tableResult{}, err
	}
	defer c.release()
	// A soft-deleting table may hold an inserted key as a deleted row, which the insert replaces.
	upsert := a.s.UpsertInserts || a.g.meta.SoftDelete || a.rs.upsert(a.g.items)
	if _, err := a.rs.feed(ctx, a.mem, a.g.stream, a.g.items, c); err != nil {
		return tableResult{}, err
	}
	fo, err := fold(ctx, a.mem, c.batches, c.keyIdx, c.keySchema, upsert, a.g.meta, "stream "+a.g.stream)
	if err != nil {
		return tableResult{}, err
	}
	defer fo.release()
	dataFiles, delFiles, err := a.write(ctx, c, fo)
	if err != nil {
		return tableResult{}, err
	}
	if err := a.commit(ctx, dataFiles, delFiles, nil); err != nil {
		return tableResult{}, err
	}
	return tableResult{rows: fo.rows}, nil
}

// begin loads (or creates) the table, checks its fence, and opens the attempt's transaction over an IO that
// notes every file the attempt creates. skipped: the table already holds this sequence number.
func (a *tableAttempt) begin(ctx context.Context) (skipped bool, err error) {
	ident := append(a.s.NamespaceIdent(), a.g.table)
	tbl, err := a.loadOrCreate(ctx, ident)
	if err != nil {
		return false, err
	}
	done, err := tableSeq(tbl, a.req.Pipeline)
	if err != nil {
		return false, err
	}
	if done >= a.req.Sequence {
		return true, nil
	}
	a.rs = newResnap(tbl, a.req.Pipeline)
	a.rs.meta, a.rs.syncedAt, a.rs.seq = a.g.meta, a.g.syncedAt, a.req.Sequence
	a.loaded = tbl.MetadataLocation()
	if a.fs == nil {
		base, err := tbl.FS(ctx)
		if err != nil {
			return false, fmt.Errorf("file system: %w", err)
		}
		// The same table state over an IO that notes what this attempt creates. (The catalog's metrics
		// reporter, which skippr does not configure, is not carried over.)
		a.fs = &recordingIO{base: base}
	}
	a.tbl = table.New(tbl.Identifier(), tbl.Metadata(), tbl.MetadataLocation(), func(context.Context) (iceio.IO, error) { return a.fs, nil }, a.oc.cat)
	a.tx = a.tbl.NewTransaction()
	a.evolution = nil
	a.seen = map[string]bool{}
	a.initials = nil
	a.partitioned = false
	if a.keyCols, err = a.key(a.tbl); err != nil {
		return false, err
	}
	return false, nil
}

// evolve plans and stages the schema changes sc needs, once per distinct schema.
func (a *tableAttempt) evolve(sc *arrow.Schema) error {
	fp := sc.String()
	if a.seen[fp] {
		return nil
	}
	a.seen[fp] = true
	a.schemas = append(a.schemas, sc)
	// Plan against the schema with the changes gathered so far, which are committed together
	// (commitEvolution). UpdateSchema.Apply replays its operations and fails on a second call, so the schema
	// so far comes from a throwaway update that is never committed.
	var cur *iceberg.Schema
	if len(a.evolution) > 0 {
		us := a.tx.UpdateSchema(true, false)
		stageEvolution(us, a.evolution)
		s, err := us.Apply()
		if err != nil {
			return fmt.Errorf("evolve schema (%s): %w", describe(a.evolution), err)
		}
		cur = s
	} else {
		staged, err := a.tx.StagedTable()
		if err != nil {
			return err
		}
		cur = staged.Schema()
	}
	name := strings.Join(a.tbl.Identifier(), ".")
	changes, err := planEvolution(name, cur, sc, a.keyCols)
	if err != nil {
		return err
	}
	if len(changes) == 0 {
		return nil
	}
	a.d.log().Info("iceberg schema evolution", "table", name, "sequence", a.req.Sequence, "changes", describe(changes))
	if !a.g.history { // a history table's rows are past changes: they keep NULL
		a.initialDefaults(name, sc, changes)
	}
	a.evolution = append(a.evolution, changes...)
	return nil
}

// commitEvolution stages the changes evolve gathered as one schema update of the transaction.
func (a *tableAttempt) commitEvolution() error {
	if len(a.evolution) == 0 {
		return nil
	}
	changes := a.evolution
	a.evolution = nil
	us := a.tx.UpdateSchema(true, false)
	stageEvolution(us, changes)
	if err := us.Commit(); err != nil {
		return fmt.Errorf("evolve schema (%s): %w", describe(changes), err)
	}
	return nil
}

// changeSet is a run of items turned into batches in the staged table schema, with the key's columns.
type changeSet struct {
	batches   []opBatch
	staged    *table.StagedTable
	target    *arrow.Schema // the staged schema as Arrow, with field ids
	keyIdx    []int         // key columns in target
	keySchema *arrow.Schema // the key columns alone
	eqIDs     []int         // key field ids
}

func (c *changeSet) release() {
	for _, b := range c.batches {
		b.rec.Release()
	}
	c.batches = nil
}

// changes evolves the schema for every schema the items carry, in log order, then conforms their batches to
// the result. The first call also adds the configured partition spec to a new table.
func (a *tableAttempt) changes(ctx context.Context, items []serve.Item) (*changeSet, error) {
	var (
		stripped []arrow.RecordBatch
		ops      [][]change.Op
	)
	defer func() {
		for _, b := range stripped {
			b.Release()
		}
	}()
	renames := newLaterRenames(items)
	for i, it := range items {
		if it.Resnapshot != serve.ResnapshotNone {
			continue // marks are for resnap.feed
		}
		if it.Schema != nil {
			if it.Schema.Schema == nil {
				return nil, fmt.Errorf("stream %s: schema change without a schema", it.Stream)
			}
			if err := a.evolve(renames.of(i, dataOnly(it.Schema.Schema))); err != nil {
				return nil, err
			}
			a.initialsBefore(len(stripped))
			continue
		}
		rec := it.Record
		o, err := change.OpValues(rec)
		if err != nil {
			return nil, fmt.Errorf("stream %s item %d: %w", it.Stream, i, err)
		}
		st := change.StripReserved(rec)
		if rs := renames.of(i, st.Schema()); rs != st.Schema() {
			relabeled := array.NewRecordBatch(rs, st.Columns(), st.NumRows())
			st.Release()
			st = relabeled
		}
		if st, o, err = a.addColumns(st, rec, o, it); err != nil {
			return nil, fmt.Errorf("stream %s item %d: %w", it.Stream, i, err)
		}
		stripped = append(stripped, st)
		if err := a.evolve(st.Schema()); err != nil {
			return nil, err
		}
		a.initialsBefore(len(stripped) - 1)
		ops = append(ops, o)
	}
	if err := a.commitEvolution(); err != nil {
		return nil, err
	}
	if !a.partitioned {
		if err := a.partition(a.tx, a.tbl); err != nil {
			return nil, err
		}
		a.partitioned = true
	}
	staged, err := a.tx.StagedTable()
	if err != nil {
		return nil, err
	}
	c := &changeSet{staged: staged}
	sch := staged.Schema()
	name := strings.Join(a.tbl.Identifier(), ".")
	if c.target, err = table.SchemaToArrowSchema(sch, nil, true, false); err != nil {
		return nil, fmt.Errorf("arrow schema of %s: %w", name, err)
	}
	for i, b := range stripped {
		rec, err := conform(ctx, a.mem, b, c.target, fmt.Sprintf("stream %s batch %d", a.g.stream, i))
		if err != nil {
			c.release()
			return nil, err
		}
		if rec, err = a.fillInitials(rec, b.Schema(), i); err != nil {
			c.release()
			return nil, err
		}
		c.batches = append(c.batches, opBatch{rec: rec, ops: ops[i]})
	}
	keyFields := make([]arrow.Field, len(a.keyCols))
	c.keyIdx = make([]int, len(a.keyCols))
	c.eqIDs = make([]int, len(a.keyCols))
	for i, k := range a.keyCols {
		idx := c.target.FieldIndices(k)
		f, ok := sch.FindFieldByName(k)
		if len(idx) != 1 || !ok {
			c.release()
			return nil, fmt.Errorf("key column %s is not in table %s", k, name)
		}
		c.keyIdx[i], keyFields[i], c.eqIDs[i] = idx[0], c.target.Field(idx[0]), f.ID
	}
	c.keySchema = arrow.NewSchema(keyFields, nil)
	return c, nil
}

// write writes folded changes as data files and equality-delete files, uncommitted.
func (a *tableAttempt) write(ctx context.Context, c *changeSet, fo *folded) (dataFiles, delFiles []iceberg.DataFile, err error) {
	if len(fo.lookup) > 0 {
		found, err := a.lookupRows(ctx, c, fo.lookup, a.g.meta)
		if err != nil {
			return nil, nil, err
		}
		fo.data = append(fo.data, found...)
	}
	for _, rec := range fo.data {
		if err := checkRequired(rec, "stream "+a.g.stream); err != nil {
			return nil, nil, err
		}
	}
	if len(fo.data) > 0 {
		for df, err := range table.WriteRecords(ctx, c.staged.Table, c.target, retained(fo.data), table.WithTargetFileSize(a.s.TargetFileSize), table.WithParquetRowGroupLimit(RowGroupRows)) {
			if err != nil {
				return nil, nil, fmt.Errorf("write data files: %w", err)
			}
			dataFiles = append(dataFiles, df)
		}
	}
	if len(fo.deletes) > 0 {
		if delFiles, err = a.writeDeletes(ctx, a.tx, c.staged, c.eqIDs, fo.deletes); err != nil {
			return nil, nil, fmt.Errorf("write equality deletes: %w", err)
		}
	}
	return dataFiles, delFiles, nil
}

// commit stages one RowDelta of the files with the table's fence and commits the transaction, the files on
// disk first.
func (a *tableAttempt) commit(ctx context.Context, dataFiles, delFiles, posDelFiles []iceberg.DataFile) error {
	seq := strconv.FormatUint(a.req.Sequence, 10)
	if a.g.truncated && a.tbl.CurrentSnapshot() != nil {
		// Every row the table held goes in this commit, before the rows that came after the truncate are
		// added: one catalog commit, so a reader sees the table either before the truncate or after the apply.
		props := iceberg.Properties{seqKey(a.req.Pipeline): seq, propStream: a.g.stream, propTruncate: "true"}
		if err := a.tx.Delete(ctx, iceberg.AlwaysTrue{}, props); err != nil {
			return fmt.Errorf("stage truncate: %w", err)
		}
	}
	// Before the row delta: its equality deletes must reach the rewritten rows (fill.go).
	if err := a.fillExisting(ctx); err != nil {
		return err
	}
	resnapDels, resnapData, err := a.stageResnapshot(ctx)
	if err != nil {
		return err
	}
	delFiles = append(slices.Clone(delFiles), resnapDels...)
	dataFiles = append(slices.Clone(dataFiles), resnapData...)
	if len(dataFiles)+len(delFiles)+len(posDelFiles) > 0 {
		props := iceberg.Properties{seqKey(a.req.Pipeline): seq, propStream: a.g.stream}
		if err := a.tx.NewRowDelta(props).AddRows(dataFiles...).AddDeletes(append(slices.Clone(delFiles), posDelFiles...)...).Commit(ctx); err != nil {
			return fmt.Errorf("stage row delta: %w", err)
		}
	}
	if err := a.tx.SetProperties(a.renamedProps(iceberg.Properties{seqKey(a.req.Pipeline): seq})); err != nil {
		return err
	}
	if h := a.d.hooks.beforeCommit; h != nil {
		if err := h(a.g.table, a.attempt); err != nil {
			return err
		}
	}
	// Data files and manifests reach the disk before the catalog names them.
	if err := syncFiles(a.fs.noted()); err != nil {
		return err
	}
	a.committing = true
	committed, err := a.catalogCommit(ctx)
	if err != nil {
		// SQLite's "database or disk is full (13)" names no file: say which catalog refused.
		return fmt.Errorf("commit to %s: %w", a.oc.name, err)
	}
	// The catalog wrote the new metadata file without fsync; it must be on disk before the engine reclaims.
	if err := syncFiles([]string{committed.MetadataLocation()}); err != nil {
		return fmt.Errorf("commit to %s: %w", a.oc.name, err)
	}
	if h := a.d.hooks.afterCommit; h != nil {
		if err := h(a.g.table); err != nil {
			return err
		}
	}
	return nil
}

// catalogCommit commits the transaction. Commits to one embedded SQLite catalog take turns in this process:
// SQLite runs one writer at a time anyway, and a writer waiting on busy_timeout polls with growing sleeps,
// while a mutex hands over at once. Only the catalog call waits; the tables' files are written in parallel.
func (a *tableAttempt) catalogCommit(ctx context.Context) (*table.Table, error) {
	if a.oc.db != nil {
		a.d.commitMu.Lock()
		defer a.d.commitMu.Unlock()
	}
	return a.tx.Commit(ctx)
}

// retained yields the batches with an extra reference for consumers that release what they take.
func retained(recs []arrow.RecordBatch) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		for _, r := range recs {
			r.Retain()
			if !yield(r, nil) {
				r.Release()
				return
			}
		}
	}
}

func plain(recs []arrow.RecordBatch) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		for _, r := range recs {
			if !yield(r, nil) {
				return
			}
		}
	}
}

// writeDeletes writes equality delete files for the keys. An equality delete reaches only data of its own
// partition unless its spec is unpartitioned. When every partition source column is a key column, a key never
// moves between partitions, so partition-scoped deletes are exact. Otherwise the previous version of a row may
// sit in any partition (and a delete row carries only the key), so the deletes are written under the table's
// unpartitioned spec, which applies them to every partition.
func (a *tableAttempt) writeDeletes(ctx context.Context, tx *table.Transaction, staged *table.StagedTable, eqIDs []int, recs []arrow.RecordBatch) ([]iceberg.DataFile, error) {
	spec := staged.Spec()
	scoped := true
	for _, f := range spec.Fields() {
		for _, src := range f.SourceIDs {
			if !slices.Contains(eqIDs, src) {
				scoped = false
			}
		}
	}
	writer := tx
	if !scoped {
		meta := staged.Metadata()
		unpartitioned := -1
		for _, sp := range meta.PartitionSpecs() {
			if sp.IsUnpartitioned() {
				unpartitioned = sp.ID()
				break
			}
		}
		if unpartitioned < 0 {
			return nil, fmt.Errorf("table is partitioned by %s on non-key columns and has no unpartitioned partition spec to write global equality deletes under; partition by key columns only, or let skippr create the table", spec)
		}
		b, err := table.MetadataBuilderFromBase(meta, staged.MetadataLocation())
		if err != nil {
			return nil, err
		}
		if err := b.SetDefaultSpecID(unpartitioned); err != nil {
			return nil, err
		}
		view, err := b.Build()
		if err != nil {
			return nil, err
		}
		fsF := func(ctx context.Context) (iceio.IO, error) { return staged.FS(ctx) }
		writer = table.New(staged.Identifier(), view, staged.MetadataLocation(), fsF, a.oc.cat).NewTransaction()
	}
	return writer.WriteEqualityDeletes(ctx, eqIDs, plain(recs))
}

// partition adds the configured partition spec to a table skippr created and has not written yet. Tables are
// created unpartitioned (spec 0) and gain their spec with their first rows, so that spec 0 stays available for
// global equality deletes. An existing table's spec is never changed.
func (a *tableAttempt) partition(tx *table.Transaction, tbl *table.Table) error {
	fields := a.s.Partitions[a.g.stream]
	if a.g.history {
		fields = nil // the spec is the mirror's; the history table stays unpartitioned
	}
	if len(fields) == 0 || tbl.CurrentSnapshot() != nil || !tbl.Spec().IsUnpartitioned() {
		if len(fields) > 0 && tbl.CurrentSnapshot() != nil && tbl.Spec().IsUnpartitioned() {
			a.d.log().Warn("iceberg: table already holds data unpartitioned; the configured partition spec is not applied", "table", a.g.table)
		}
		return nil
	}
	staged, err := tx.StagedTable()
	if err != nil {
		return err
	}
	us := tx.UpdateSpec(true)
	for _, f := range fields {
		pf, err := ParsePartitionField(f)
		if err != nil {
			return fmt.Errorf("partitions.%s: %w", a.g.stream, err)
		}
		if _, ok := staged.Schema().FindFieldByName(pf.Source); !ok {
			return fmt.Errorf("partitions.%s: %q: column %s is not in the table", a.g.stream, f, pf.Source)
		}
		us.AddField(pf.Source, pf.Transform, "")
	}
	if err := us.Commit(); err != nil {
		return fmt.Errorf("partitions.%s: %w", a.g.stream, err)
	}
	return nil
}

// key returns the table's key columns: its identifier fields, which must match the stream's primary key when
// the stream declares one (deleting by another key would remove the wrong rows).
func (a *tableAttempt) key(tbl *table.Table) ([]string, error) {
	sch := tbl.Schema()
	var tk []string
	for _, id := range sch.IdentifierFieldIDs {
		name, ok := sch.FindColumnName(id)
		if !ok {
			return nil, fmt.Errorf("identifier field id %d is not in the table schema", id)
		}
		tk = append(tk, name)
	}
	sk := a.streamKey()
	switch {
	case len(tk) == 0:
		for _, k := range sk {
			if _, ok := sch.FindFieldByName(k); !ok {
				return nil, fmt.Errorf("stream %s: primary key column %s is not in the table", a.g.stream, k)
			}
		}
		return sk, nil
	case sk != nil && !slices.Equal(tk, sk):
		return nil, fault.DataErr(fmt.Errorf("stream %s: primary key (%s) differs from the table's identifier fields (%s)", a.g.stream, strings.Join(sk, ", "), strings.Join(tk, ", ")),
			schemaFix)
	}
	return tk, nil
}

// streamKey is the primary key the group's schemas declare (the last one wins).
func (a *tableAttempt) streamKey() []string {
	if a.g.history {
		return nil // a history table is only appended to
	}
	var k []string
	for _, it := range a.g.items {
		if it.Resnapshot != serve.ResnapshotNone {
			continue
		}
		var sc *arrow.Schema
		if it.Schema != nil {
			sc = it.Schema.Schema
			if sc != nil && change.PrimaryKey(sc) == nil && len(it.Schema.PrimaryKey) > 0 {
				k = it.Schema.PrimaryKey
				continue
			}
		} else {
			sc = it.Record.Schema()
		}
		if sc != nil {
			if pk := change.PrimaryKey(sc); pk != nil {
				k = pk
			}
		}
	}
	return k
}

// loadOrCreate loads the table, creating it from the group's first schema when it does not exist.
func (a *tableAttempt) loadOrCreate(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	tbl, err := a.oc.cat.LoadTable(ctx, ident)
	if err == nil {
		return tbl, nil
	}
	if !errors.Is(err, catalog.ErrNoSuchTable) {
		return nil, fmt.Errorf("load: %w", err)
	}
	var first *arrow.Schema
	for _, it := range a.g.items {
		if it.Resnapshot != serve.ResnapshotNone {
			continue
		}
		if it.Schema != nil && it.Schema.Schema != nil {
			first = it.Schema.Schema
		} else if it.Record != nil {
			first = it.Record.Schema()
		}
		if first != nil {
			break
		}
	}
	if a.g.history && first != nil {
		md := first.Metadata()
		first = arrow.NewSchema(nullable(change.DataFields(first)), &md)
	}
	sch, err := newTableSchema(a.g.stream, first, a.streamKey())
	if err != nil {
		return nil, err
	}
	props := iceberg.Properties{
		"format-version":                  strconv.Itoa(a.s.FormatVersion),
		propStream:                        a.g.stream,
		table.WriteTargetFileSizeBytesKey: strconv.FormatInt(a.s.TargetFileSize, 10),
	}
	if a.g.history {
		delete(props, propStream)
		props[propHistory] = a.g.stream
	}
	tbl, err = a.oc.cat.CreateTable(ctx, ident, sch, catalog.WithProperties(props))
	if errors.Is(err, catalog.ErrTableAlreadyExists) {
		// Another writer created it first.
		tbl, err = a.oc.cat.LoadTable(ctx, ident)
	}
	if err != nil {
		return nil, fmt.Errorf("create: %w", err)
	}
	a.d.log().Info("iceberg table created", "table", strings.Join(ident, "."), "location", tbl.Location())
	return tbl, nil
}

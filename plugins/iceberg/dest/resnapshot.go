package dest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/util"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// A re-snapshot of a stream (serve.Capabilities.Resnapshot) is kept in the stream's table; see doc.go.
//
// Its begin is the table property skippr.pipeline.P.resnapshot = the id of the table's current snapshot before
// the commit of the apply that carried the begin mark ("none" when the table had no snapshot), set in that
// commit beside the fence. Iceberg already records which rows arrived since: they are the data files added by
// this pipeline's apply snapshots after that one (a snapshot summary carries skippr.pipeline.P.sequence;
// compactions and other writers' snapshots do not). So nothing is written per row while a re-snapshot is open,
// and a SIGKILL or a replay finds the begin where the fence is: committed together or not at all.
//
// At the end mark the apply's commit removes the stream's rows not received since the begin: it scans the
// table's live keys and writes an equality delete for every key that is neither in those data files nor in the
// apply's own items between the begin and the end. The deletes carry the commit's sequence number, so they
// remove older rows only, never the rows the same commit adds; the property goes in the same commit.
//
// While a re-snapshot is open, inserts and snapshot reads of the stream are written as upserts (an equality
// delete beside the row), so that a row sent again replaces the copy the table holds instead of doubling it.

// resnapKey is the table property holding the pipeline's open re-snapshot of the table's stream.
func resnapKey(pipeline string) string { return "skippr.pipeline." + pipeline + ".resnapshot" }

// noSnapshot is the begin recorded for a table that had no snapshot yet: every data file counts.
const noSnapshot = "none"

// resnap is one table's re-snapshot bookkeeping for one apply, fed the apply's items in log order.
type resnap struct {
	prop     string              // the property's value when the apply began; "" when none was open
	open     bool                // a re-snapshot is open at this point of the log
	fromProp bool                // the open one began in an earlier apply (at prop)
	began    bool                // the open one began in this apply
	received map[string]struct{} // keys of the open one received in this apply
	ends     []bracket           // re-snapshots that end in this apply, in order
	marks    bool                // the apply holds a mark for the table

	keySchema *arrow.Schema // the key columns, with field ids, as the changes carry them
	eqIDs     []int
	buf       []byte

	// meta and syncedAt are the group's (tableGroup): with meta.SoftDelete the rows an end removes are kept,
	// marked deleted.
	meta     rowmeta.Options
	syncedAt time.Time
	seq      uint64 // the apply's sequence number: the entry of an item that carries none
}

// bracket is a re-snapshot that ends in this apply: the keys it received here, and, when it began in an
// earlier apply, that begin.
type bracket struct {
	received map[string]struct{}
	since    string // the begin property's value; "" when it began in this apply
	entry    uint64 // the WAL entry of the end mark: _skippr_position of the rows it marks deleted
}

func newResnap(tbl *table.Table, pipeline string) *resnap {
	r := &resnap{prop: tbl.Properties()[resnapKey(pipeline)]}
	if r.prop != "" {
		r.open, r.fromProp, r.received = true, true, map[string]struct{}{}
	}
	return r
}

// upsert says inserts and reads of these items must replace the row of their key: a re-snapshot is open, or
// begins among them.
func (r *resnap) upsert(items []serve.Item) bool {
	if r.open {
		return true
	}
	for _, it := range items {
		if it.Resnapshot == serve.ResnapshotBegin {
			return true
		}
	}
	return false
}

// feed takes a run of the apply's items, in log order, with the change set built from them (one batch per
// item with a record, in order). When a re-snapshot that began in this apply ends in the run, the rows the run
// wrote before its begin and not since are deleted at the end's place: a delete batch of their keys goes into
// c.batches there, since an equality delete cannot reach rows of its own commit. It returns the received keys of
// those re-snapshots, for the caller to drop rows that earlier chunks of the apply wrote (spill.go).
func (r *resnap) feed(ctx context.Context, mem memory.Allocator, stream string, items []serve.Item, c *changeSet) ([]map[string]struct{}, error) {
	r.keySchema, r.eqIDs = c.keySchema, c.eqIDs
	var (
		out     []opBatch
		closed  []map[string]struct{}
		written map[string]rowAt // the place of each key's last row in out, when an end is among the items
		j       int
	)
	for _, it := range items {
		if it.Resnapshot == serve.ResnapshotEnd {
			written = map[string]rowAt{}
		}
	}
	for _, it := range items {
		switch {
		case it.Resnapshot != serve.ResnapshotNone:
			r.marks = true
			if len(c.keyIdx) == 0 {
				return nil, fault.DataErr(fmt.Errorf("stream %s has no primary key, so a re-snapshot cannot tell which rows it received", stream),
					"add a primary key to the source table (or name its key columns in the source's settings) before asking for a re-snapshot")
			}
			if it.Resnapshot == serve.ResnapshotEnd && r.open && r.began {
				del, err := r.deleteUnreceived(ctx, mem, c, out, written, cmp.Or(it.Sequence, r.seq))
				if err != nil {
					return nil, fmt.Errorf("stream %s: %w", stream, err)
				}
				out = append(out, del...)
				closed = append(closed, r.received)
			}
			r.mark(it.Resnapshot, cmp.Or(it.Sequence, r.seq))
		case it.Record != nil:
			b := c.batches[j]
			j++
			out = append(out, b)
			if !r.open && written == nil {
				continue
			}
			k := batchKey(b, c.keyIdx)
			for row := range int(b.rec.NumRows()) {
				var err error
				if r.buf, err = k.Append(r.buf[:0], row); err != nil {
					return nil, fmt.Errorf("stream %s: %w", stream, err)
				}
				if written != nil {
					written[string(r.buf)] = rowAt{batch: len(out) - 1, row: row}
				}
				if r.open {
					r.received[string(r.buf)] = struct{}{}
				}
			}
		}
	}
	c.batches = out
	return closed, nil
}

// rowAt is a row of a batch of the change set being fed.
type rowAt struct{ batch, row int }

func batchKey(b opBatch, keyIdx []int) *change.Key {
	cols := make([]arrow.Array, len(keyIdx))
	for i, k := range keyIdx {
		cols[i] = b.rec.Column(k)
	}
	return change.NewKey(cols, nil)
}

// deleteUnreceived returns delete batches of the keys written in out (at their last rows) that the open
// re-snapshot did not receive.
func (r *resnap) deleteUnreceived(ctx context.Context, mem memory.Allocator, c *changeSet, out []opBatch, written map[string]rowAt, entry uint64) ([]opBatch, error) {
	rows := map[int][]int64{}
	for enc, at := range written {
		if _, ok := r.received[enc]; !ok {
			rows[at.batch] = append(rows[at.batch], int64(at.row))
		}
	}
	var del []opBatch
	for _, bi := range slices.Sorted(maps.Keys(rows)) {
		idx := rows[bi]
		slices.Sort(idx)
		rec, err := take(ctx, mem, out[bi].rec, idx)
		if err != nil {
			release(opRecs(del))
			return nil, err
		}
		if r.meta.SoftDelete {
			// Folded as a soft delete, the row keeps its values under this metadata.
			marked, err := deletedMeta(mem, rec, r.meta, entry, r.syncedAt)
			rec.Release()
			if err != nil {
				release(opRecs(del))
				return nil, err
			}
			rec = marked
		}
		ops := make([]change.Op, len(idx))
		for i := range ops {
			ops[i] = change.OpDelete
		}
		del = append(del, opBatch{rec: rec, ops: ops})
	}
	return del, nil
}

func opRecs(bs []opBatch) []arrow.RecordBatch {
	out := make([]arrow.RecordBatch, len(bs))
	for i, b := range bs {
		out[i] = b.rec
	}
	return out
}

func (r *resnap) mark(m serve.ResnapshotMark, entry uint64) {
	switch m {
	case serve.ResnapshotBegin:
		if r.open {
			return // asked again while one is open (a copy restarted): the older begin stays, it saw more
		}
		r.open, r.began, r.received = true, true, map[string]struct{}{}
	case serve.ResnapshotEnd:
		if !r.open {
			return // no begin applied here: nothing is known to be stale
		}
		b := bracket{received: r.received, entry: entry}
		if r.fromProp {
			b.since = r.prop
		}
		r.ends = append(r.ends, b)
		r.open, r.fromProp, r.began, r.received = false, false, false, nil
	}
}

// stageResnapshot adds to the attempt's transaction what the apply's marks ask for: the equality deletes of the
// rows that re-snapshots ending here did not receive (returned, to go into the commit's row delta), and the
// begin property set or removed.
//
// With soft_delete the rows are kept, marked deleted by the last end's entry: their rows, read from the
// table, go into data files (returned too) beside the deletes of their old versions.
func (a *tableAttempt) stageResnapshot(ctx context.Context) (dels, data []iceberg.DataFile, err error) {
	r := a.rs
	if r == nil || !r.marks {
		return nil, nil, nil
	}
	// A truncate in this apply removes every earlier row anyway.
	if len(r.ends) > 0 && !a.g.truncated {
		var staged *table.StagedTable
		emit := func(recs []arrow.RecordBatch) error {
			var err error
			if staged == nil {
				if staged, err = a.tx.StagedTable(); err != nil {
					return err
				}
			}
			files, err := a.writeDeletes(ctx, a.tx, staged, r.eqIDs, recs)
			if err != nil {
				return fmt.Errorf("write equality deletes: %w", err)
			}
			dels = append(dels, files...)
			if !r.meta.SoftDelete {
				return nil
			}
			kept, err := a.keptDeleted(ctx, staged, recs, r.ends[len(r.ends)-1].entry)
			if err != nil {
				return fmt.Errorf("keep the rows marked deleted: %w", err)
			}
			data = append(data, kept...)
			return nil
		}
		removed, err := a.unreceived(ctx, emit)
		if err != nil {
			return nil, nil, fmt.Errorf("re-snapshot of %s ends: find the rows the source no longer has: %w", a.g.stream, err)
		}
		a.d.log().Info("iceberg re-snapshot applied", "table", a.g.table, "stream", a.g.stream, "sequence", a.req.Sequence, "rows_removed", removed)
	}
	key := resnapKey(a.req.Pipeline)
	switch {
	case r.open && r.began:
		since := noSnapshot
		if cur := a.tbl.CurrentSnapshot(); cur != nil {
			since = strconv.FormatInt(cur.SnapshotID, 10)
		}
		if err := a.tx.SetProperties(iceberg.Properties{key: since}); err != nil {
			return nil, nil, err
		}
	case !r.open && r.prop != "":
		if err := a.tx.RemoveProperties([]string{key}); err != nil {
			return nil, nil, err
		}
	}
	return dels, data, nil
}

// errHistoryGone: the snapshots since a re-snapshot's begin were expired, so which rows arrived is unknown.
var errHistoryGone = errors.New("snapshot history since the begin is gone")

// unreceived hands emit the key columns of the table's live rows that a re-snapshot ending in this apply did
// not receive, and returns how many there are. The keys are diffed within the memory budget (keydiff.go); emit
// gets them in one call when they were diffed in memory, and in calls of up to half the budget otherwise.
func (a *tableAttempt) unreceived(ctx context.Context, emit func([]arrow.RecordBatch) error) (int64, error) {
	r := a.rs
	cur := a.tbl.CurrentSnapshot()
	if cur == nil {
		return 0, nil // no rows
	}
	var live int64
	if cur.Summary != nil {
		live, _ = strconv.ParseInt(cur.Summary.Properties["total-records"], 10, 64)
	}
	budget := a.s.bufferBudget()
	if a.d.hooks.resnapBudget > 0 {
		budget = a.d.hooks.resnapBudget
	}
	dir := a.s.SpillDir
	if a.d.hooks.spillDir != "" {
		dir = a.d.hooks.spillDir
	}
	kd := newKeyDiff(budget, dir, a.d.log(), a.mem, r.keySchema, live)
	defer kd.close()
	for _, b := range r.ends {
		if b.since == "" {
			kd.newSet(b.received)
			continue
		}
		set := kd.newSet(b.received)
		err := a.receivedSince(ctx, b.since, kd, set)
		if errors.Is(err, errHistoryGone) {
			// Removing by a guess would delete rows the source has: keep them, and say so.
			a.d.log().Warn("iceberg: re-snapshot cannot remove the rows the source no longer has: the table's snapshots since its begin were expired; run `skippr resnapshot` again and keep snapshots (no compaction with expiry) until it ends",
				"table", a.g.table, "stream", a.g.stream, "begin_snapshot", b.since)
			kd.drop(set)
			continue
		}
		if err != nil {
			return 0, err
		}
	}
	if len(kd.sets) == 0 {
		return 0, nil
	}
	var (
		out      []arrow.RecordBatch
		outBytes int64
		removed  int64
	)
	defer func() { release(out) }()
	// found collects unreceived rows; once spilled, they go out whenever they fill half the budget.
	found := func(rec arrow.RecordBatch) error {
		out = append(out, rec)
		removed += rec.NumRows()
		outBytes += util.TotalRecordSize(rec)
		if kd.spill == "" || outBytes < kd.budget/2 {
			return nil
		}
		err := emit(out)
		release(out)
		out, outBytes = nil, 0
		return err
	}
	var ls *liveSpill
	if kd.spill != "" {
		a.d.resnapSpills.Add(1)
		var err error
		if ls, err = kd.newLiveSpill(); err != nil {
			return 0, err
		}
		defer ls.close()
	}
	names := make([]string, r.keySchema.NumFields())
	for i := range names {
		names[i] = r.keySchema.Field(i).Name
	}
	opts := []table.ScanOption{table.WithSelectedFields(names...)}
	if f, ok := liveFilter(a.tbl); ok && r.meta.SoftDelete {
		// A row marked deleted before is not live: it stays as it was.
		opts = append(opts, table.WithRowFilter(f))
	}
	_, batches, err := a.tbl.Scan(opts...).ToArrowRecords(ctx)
	if err != nil {
		return 0, fmt.Errorf("scan: %w", err)
	}
	for b, err := range batches {
		if err != nil {
			return 0, fmt.Errorf("scan: %w", err)
		}
		rec, err := a.keyColumns(ctx, b, names)
		b.Release()
		if err != nil {
			return 0, err
		}
		if ls != nil {
			err = ls.add(ctx, rec)
			rec.Release()
			if err != nil {
				return 0, err
			}
			continue
		}
		rows, err := kd.unreceivedRows(rec, nil)
		if err == nil && len(rows) > 0 {
			var t arrow.RecordBatch
			if t, err = take(ctx, a.mem, rec, rows); err == nil {
				err = found(t)
			}
		}
		rec.Release()
		if err != nil {
			return 0, err
		}
	}
	if ls != nil {
		if h := a.d.hooks.resnapDiffing; h != nil {
			h()
		}
		if err := ls.diff(ctx, found); err != nil {
			return 0, err
		}
	}
	if len(out) > 0 {
		if err := emit(out); err != nil {
			return 0, err
		}
	}
	return removed, nil
}

// keyColumns picks the key columns of a scanned batch by name, in key order, cast to the key schema.
func (a *tableAttempt) keyColumns(ctx context.Context, b arrow.RecordBatch, names []string) (arrow.RecordBatch, error) {
	cols := make([]arrow.Array, len(names))
	fields := make([]arrow.Field, len(names))
	for i, n := range names {
		idx := b.Schema().FieldIndices(n)
		if len(idx) != 1 {
			return nil, fmt.Errorf("scan: key column %s missing", n)
		}
		cols[i], fields[i] = b.Column(idx[0]), b.Schema().Field(idx[0])
	}
	picked := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, b.NumRows())
	defer picked.Release()
	return asKeySchema(ctx, a.mem, picked, a.rs.keySchema)
}

// receivedSince adds to set the keys of the data files this pipeline's applies added after snapshot since.
func (a *tableAttempt) receivedSince(ctx context.Context, since string, kd *keyDiff, set *keySet) error {
	var stop int64 = -1
	if since != noSnapshot {
		id, err := strconv.ParseInt(since, 10, 64)
		if err != nil {
			return fmt.Errorf("table property %s=%q is not a snapshot id", resnapKey(a.req.Pipeline), since)
		}
		stop = id
	}
	fence := seqKey(a.req.Pipeline)
	for snap := a.tbl.CurrentSnapshot(); ; {
		if snap == nil {
			if stop >= 0 {
				return errHistoryGone
			}
			return nil
		}
		if snap.SnapshotID == stop {
			return nil
		}
		if snap.Summary != nil && snap.Summary.Properties[fence] != "" {
			if err := a.addedKeys(ctx, snap, kd, set); err != nil {
				return fmt.Errorf("snapshot %d: %w", snap.SnapshotID, err)
			}
		}
		if snap.ParentSnapshotID == nil {
			snap = nil
			continue
		}
		snap = a.tbl.SnapshotByID(*snap.ParentSnapshotID)
	}
}

// addedKeys adds to set the keys of the data files the snapshot added.
func (a *tableAttempt) addedKeys(ctx context.Context, snap *table.Snapshot, kd *keyDiff, set *keySet) error {
	manifests, err := snap.Manifests(a.fs)
	if err != nil {
		return fmt.Errorf("manifests: %w", err)
	}
	for _, m := range manifests {
		if m.SnapshotID() != snap.SnapshotID || m.ManifestContent() != iceberg.ManifestContentData {
			continue
		}
		entries, err := m.FetchEntries(a.fs, true)
		if err != nil {
			return fmt.Errorf("manifest %s: %w", m.FilePath(), err)
		}
		for _, e := range entries {
			if e.Status() != iceberg.EntryStatusADDED || e.DataFile().ContentType() != iceberg.EntryContentData {
				continue
			}
			err := readFileKeys(ctx, a.fs, e.DataFile().FilePath(), a.rs.eqIDs, a.rs.keySchema, func(rec arrow.RecordBatch) error {
				return kd.add(set, rec)
			})
			if err != nil {
				return fmt.Errorf("read keys of %s: %w", e.DataFile().FilePath(), err)
			}
		}
	}
	return nil
}

func release(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

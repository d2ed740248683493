package dest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// spilledTable is a table's part of an apply that outgrew the memory budget. Each chunk of its items is folded
// and written out as data and equality-delete files at once, uncommitted; the table's one commit adds them all
// at the end, as if the apply had been folded whole:
//
//   - a key's earlier versions in the table are removed by equality deletes, as always (they carry the
//     commit's sequence number, so they never touch the rows written beside them);
//   - a key written out by an earlier chunk of the same apply has its row there removed by a position delete
//     (file + row position), since equality deletes do not reach files of their own commit. keyIndex remembers
//     where each written key's row is; beyond its share of the memory budget it does so on disk and finds the
//     replaced rows at the commit (keyruns.go).
type spilledTable struct {
	d   *Destination
	oc  *openCatalog
	s   Settings
	req serve.ApplyRequest
	g   *tableGroup

	a       *tableAttempt // the transaction the files are written for; rebuilt after a lost commit race
	skipped bool          // the table already held the sequence number: nothing is written
	index   *keyIndex     // nil for a table without a key (append-only)
	files   []iceberg.DataFile
	eqDels  []iceberg.DataFile
	posDels map[int]*posSet // data file (place in files) -> positions of rows a later chunk replaced
	rows    int64
	schema  *iceberg.Schema // the staged schema the last chunk was written in
}

// add folds one chunk of items and writes it out.
func (st *spilledTable) add(ctx context.Context, items []serve.Item) error {
	if st.a == nil {
		st.a = &tableAttempt{d: st.d, oc: st.oc, s: st.s, req: st.req, g: st.g, attempt: 1, mem: memory.DefaultAllocator}
		skipped, err := st.a.begin(ctx)
		if err != nil {
			return err
		}
		st.skipped = skipped
	} else if k := keyOf(items); k != nil && !st.g.history && !slices.Equal(k, st.a.keyCols) {
		return fmt.Errorf("stream %s: primary key changed from (%s) to (%s) within one apply", st.g.stream, strings.Join(st.a.keyCols, ", "), strings.Join(k, ", "))
	}
	if st.skipped {
		return nil
	}
	fills := len(st.a.initials)
	c, err := st.a.changes(ctx, items)
	if err != nil {
		return err
	}
	defer c.release()
	st.warnUnfilled(fills)
	upsert := st.s.UpsertInserts || st.g.meta.SoftDelete || st.a.rs.upsert(items)
	closed, err := st.a.rs.feed(ctx, st.a.mem, st.g.stream, items, c)
	if err != nil {
		return err
	}
	if len(closed) > 0 && st.index != nil {
		if err := st.index.unspill(); err != nil {
			return err
		}
	}
	var unreceived []uint64
	for _, received := range closed {
		unreceived = append(unreceived, st.dropUnreceived(received)...)
	}
	fo, err := fold(ctx, st.a.mem, c.batches, c.keyIdx, c.keySchema, upsert, st.g.meta, "stream "+st.g.stream)
	if err != nil {
		return err
	}
	defer fo.release()
	if len(c.keyIdx) > 0 {
		if st.index == nil {
			st.index = newKeyIndex(c, st.indexLimit(), st.spillDir(), st.d.log(), st.deadLoc)
		}
		if len(unreceived) > 0 || len(fo.lookup) > 0 {
			// Both walk or look up the index: bring it back into memory (a soft-delete table never spills it).
			if err := st.index.unspill(); err != nil {
				return err
			}
		}
		if len(fo.lookup) > 0 {
			if err := st.softDeleteWritten(ctx, c, fo); err != nil {
				return err
			}
		}
		if len(unreceived) > 0 && st.g.meta.SoftDelete {
			kept, err := st.keepUnreceived(ctx, c, unreceived, st.a.rs.ends[len(st.a.rs.ends)-1].entry)
			if err != nil {
				return err
			}
			fo.data = append(fo.data, kept...)
		}
		if err := st.supersede(c); err != nil {
			return err
		}
	}
	data, dels, err := st.a.write(ctx, c, fo)
	if err != nil {
		return err
	}
	st.eqDels = append(st.eqDels, dels...)
	for _, df := range data {
		if st.index != nil {
			if err := st.index.addFile(ctx, st.a.fs, len(st.files), df, c); err != nil {
				return fmt.Errorf("index keys of %s: %w", df.FilePath(), err)
			}
		}
		st.files = append(st.files, df)
	}
	if st.index != nil {
		was := st.index.onDisk()
		if err := st.index.endChunk(); err != nil {
			return err
		}
		if !was && st.index.onDisk() {
			st.d.indexSpills.Add(1)
		}
	}
	st.rows += fo.rows
	st.schema = c.staged.Schema()
	return nil
}

// supersede turns every key of the chunk that an earlier chunk wrote out into a position delete of that row:
// whatever its op, the chunk holds a newer version. With the index on disk it records the keys instead, and the
// commit's resolve finds those rows.
func (st *spilledTable) supersede(c *changeSet) error {
	for _, b := range c.batches {
		keys, err := st.index.keys(b.rec, c.keyIdx)
		if err != nil {
			return err
		}
		for r := range b.ops {
			if st.index.onDisk() {
				if err := keys.touch(r); err != nil {
					return fmt.Errorf("stream %s: row %d: %w", st.g.stream, r, err)
				}
				continue
			}
			file, pos, ok, err := keys.take(r)
			if err != nil {
				return fmt.Errorf("stream %s: row %d: %w", st.g.stream, r, err)
			}
			if ok {
				st.deadAt(file, pos)
			}
		}
	}
	return nil
}

// deadAt notes that the row at pos of files[file] was replaced by a later chunk: a position delete.
func (st *spilledTable) deadAt(file int, pos int64) {
	if st.posDels == nil {
		st.posDels = map[int]*posSet{}
	}
	ps := st.posDels[file]
	if ps == nil {
		ps = newPosSet(st.files[file].Count())
		st.posDels[file] = ps
	}
	ps.add(pos)
}

// deadLoc is deadAt for a location as the key index packs it.
func (st *spilledTable) deadLoc(loc uint64) {
	st.deadAt(int(loc>>posBits), int64(loc&(1<<posBits-1)))
}

// indexLimit is the bytes the key index may take in memory: the buffer budget (it spills beyond half of it, so
// the buffer keeps at least half), none for a soft-delete table, whose chunks look written keys up.
func (st *spilledTable) indexLimit() int64 {
	switch {
	case st.g.meta.SoftDelete:
		return 0
	case st.d.hooks.indexLimit != 0:
		return max(st.d.hooks.indexLimit, 0)
	case st.d.hooks.bufferBudget > 0:
		return st.d.hooks.bufferBudget
	}
	return st.s.bufferBudget()
}

// spillDir is where the key index spills: spill_dir, or the test's.
func (st *spilledTable) spillDir() string {
	if st.d.hooks.spillDir != "" {
		return st.d.hooks.spillDir
	}
	return st.s.SpillDir
}

// commit writes the position deletes and commits every file of the table's part in one transaction,
// rebuilding it on the reloaded table after a lost race, as applyTable does, without writing the rows again.
func (st *spilledTable) commit(ctx context.Context) (tableResult, error) {
	if st.skipped {
		return tableResult{skipped: true}, nil
	}
	if st.index != nil {
		// The rows replaced that the index knows of only on disk: found now, once.
		if err := st.index.resolve(); err != nil {
			st.cleanup(context.WithoutCancel(ctx))
			return tableResult{}, fmt.Errorf("stream %s: resolve the key index: %w", st.g.stream, err)
		}
	}
	files := st.dropDeadFiles()
	posFiles, err := st.writePositionDeletes(ctx)
	if err != nil {
		st.cleanup(context.WithoutCancel(ctx))
		return tableResult{}, fmt.Errorf("write position deletes: %w", err)
	}
	keep := map[string]bool{}
	for _, f := range slices.Concat(files, st.eqDels, posFiles) {
		keep[f.FilePath()] = true
	}
	for attempt := 1; ; attempt++ {
		err := st.a.commit(ctx, files, st.eqDels, posFiles)
		if err == nil {
			return tableResult{rows: st.rows}, nil
		}
		conflict := isConflict(err)
		if !conflict || attempt >= maxCommitAttempts {
			// As in applyTable: files of a commit that may have landed stay.
			if !st.a.committing || conflict || st.a.notCommitted(context.WithoutCancel(ctx)) {
				st.cleanup(context.WithoutCancel(ctx))
			}
			if conflict {
				return tableResult{}, fmt.Errorf("commit lost to concurrent writers %d times: %w", attempt, err)
			}
			return tableResult{}, err
		}
		// The lost attempt's manifests go; the rows written stay for the next attempt.
		st.cleanupExcept(keep)
		st.d.retries.Add(1)
		st.d.log().Info("iceberg commit conflict, retrying", "table", st.g.table, "sequence", st.req.Sequence, "attempt", attempt, "spilled_files", len(keep), "err", err)
		wait := time.Duration(10<<min(attempt, 6))*time.Millisecond + time.Duration(rand.Int64N(int64(20*time.Millisecond)))
		select {
		case <-ctx.Done():
			st.cleanup(context.WithoutCancel(ctx))
			return tableResult{}, context.Cause(ctx)
		case <-time.After(wait):
		}
		skipped, err := st.rebase(ctx, attempt+1)
		if err != nil || skipped {
			st.cleanup(context.WithoutCancel(ctx))
			return tableResult{skipped: skipped}, err
		}
	}
}

// dropDeadFiles returns the data files to commit: a file whose every row a later chunk replaced would only
// be committed to be deleted, so it is removed instead, with its position deletes.
func (st *spilledTable) dropDeadFiles() []iceberg.DataFile {
	var live []iceberg.DataFile
	for i, df := range st.files {
		if pos := st.posDels[i]; pos == nil || pos.n < df.Count() {
			live = append(live, df)
			continue
		}
		delete(st.posDels, i)
		if err := st.a.fs.Remove(df.FilePath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			st.d.log().Warn("iceberg: could not remove a data file whose rows were all replaced; it is an orphan for compaction to delete", "file", df.FilePath(), "err", err)
		}
	}
	return live
}

// rebase opens a new transaction on the reloaded table and evolves it as the lost one was. The written files
// stay valid only if the table's schema and partition specs come out the same: another writer that changed
// them makes the apply fail (the engine applies it again after a restart) rather than commit files whose field
// ids or partitions would mean something else.
func (st *spilledTable) rebase(ctx context.Context, attempt int) (skipped bool, err error) {
	old := st.a
	a := &tableAttempt{d: st.d, oc: st.oc, s: st.s, req: st.req, g: st.g, attempt: attempt, mem: old.mem, fs: old.fs}
	if skipped, err := a.begin(ctx); err != nil || skipped {
		return skipped, err
	}
	if a.rs.prop != old.rs.prop {
		return false, fmt.Errorf("another writer changed the re-snapshot property %s of table %s while this apply wrote files for it", resnapKey(st.req.Pipeline), st.g.table)
	}
	a.rs = old.rs // what the chunks written so far received
	for _, sc := range old.schemas {
		if err := a.evolve(sc); err != nil {
			return false, err
		}
	}
	if err := a.commitEvolution(); err != nil {
		return false, err
	}
	if old.partitioned {
		if err := a.partition(a.tx, a.tbl); err != nil {
			return false, err
		}
		a.partitioned = true
	}
	staged, err := a.tx.StagedTable()
	if err != nil {
		return false, err
	}
	if !staged.Schema().Equals(st.schema) {
		return false, fmt.Errorf("another writer changed the schema of table %s while this apply wrote files for it: %s, now %s", st.g.table, st.schema, staged.Schema())
	}
	oldMeta, err := old.tx.StagedTable()
	if err != nil {
		return false, err
	}
	for _, f := range slices.Concat(st.files, st.eqDels) {
		was, now := oldMeta.Metadata().PartitionSpecByID(int(f.SpecID())), staged.Metadata().PartitionSpecByID(int(f.SpecID()))
		if was == nil || now == nil || !was.Equals(*now) {
			return false, fmt.Errorf("another writer changed the partition spec %d of table %s while this apply wrote files for it", f.SpecID(), st.g.table)
		}
	}
	st.a = a
	return false, nil
}

// cleanup removes every file the table's part wrote, the spilled ones too.
func (st *spilledTable) cleanup(ctx context.Context) {
	if st.index != nil {
		st.index.close()
	}
	if st.a != nil && st.a.fs != nil {
		st.a.cleanup(ctx)
	}
}

// cleanupExcept removes the files created so far except those in keep, which stay noted for a later cleanup.
func (st *spilledTable) cleanupExcept(keep map[string]bool) {
	for _, f := range st.a.fs.created() {
		if keep[f] {
			st.a.fs.note(f)
			continue
		}
		if err := st.a.fs.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			st.d.log().Warn("iceberg: could not remove the file of a failed commit; it is an orphan for compaction to delete", "file", f, "err", err)
		}
	}
}

// keyOf is the primary key the items' schemas declare, or nil.
func keyOf(items []serve.Item) []string {
	var k []string
	for _, it := range items {
		var sc *arrow.Schema
		switch {
		case it.Resnapshot != serve.ResnapshotNone:
			continue
		case it.Schema != nil && it.Schema.Schema != nil && change.PrimaryKey(it.Schema.Schema) == nil && len(it.Schema.PrimaryKey) > 0:
			k = it.Schema.PrimaryKey
			continue
		case it.Schema != nil:
			sc = it.Schema.Schema
		default:
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

// dropUnreceived removes, by position deletes, the rows earlier chunks of the apply wrote whose key a
// re-snapshot that began in this apply and ends in the current chunk did not receive: written before its begin,
// and not sent since (resnap.feed deletes those of the current chunk).
func (st *spilledTable) dropUnreceived(received map[string]struct{}) (dropped []uint64) {
	if st.index == nil {
		return nil
	}
	drop := func(loc uint64) {
		dropped = append(dropped, loc)
		st.deadLoc(loc)
	}
	var buf []byte
	for k, loc := range st.index.ints {
		buf = change.AppendInt(buf[:0], k)
		if _, ok := received[string(buf)]; !ok {
			drop(loc)
			delete(st.index.ints, k)
			st.index.bytes -= intEntryBytes
		}
	}
	for k, loc := range st.index.encs {
		if _, ok := received[k]; !ok {
			drop(loc)
			delete(st.index.encs, k)
			st.index.bytes -= encEntryBytes + int64(len(k))
		}
	}
	return dropped
}

// softDeleteWritten gives the soft deletes of fo.lookup whose key an earlier chunk of the apply wrote out the
// values of that row (read back from its data file, uncommitted and so not in the table), under the delete's
// metadata, as rows to add; the rest stay in fo.lookup, for the table to give their values (lookupRows). It
// runs before supersede forgets where those rows are.
func (st *spilledTable) softDeleteWritten(ctx context.Context, c *changeSet, fo *folded) error {
	type want struct {
		pos       int64
		batch, at int // the delete row: fo.lookup[batch], row at
	}
	byFile := map[int][]want{}
	rest := make([][]int64, len(fo.lookup))
	for bi, d := range fo.lookup {
		keys, err := st.index.keys(d, c.keyIdx)
		if err != nil {
			return err
		}
		for r := range int(d.NumRows()) {
			file, pos, ok, err := keys.peek(r)
			if err != nil {
				return fmt.Errorf("stream %s: %w", st.g.stream, err)
			}
			if ok {
				byFile[file] = append(byFile[file], want{pos, bi, r})
			} else {
				rest[bi] = append(rest[bi], int64(r))
			}
		}
	}
	if len(byFile) == 0 {
		return nil
	}
	for _, fileNo := range slices.Sorted(maps.Keys(byFile)) {
		ws := byFile[fileNo]
		slices.SortFunc(ws, func(x, y want) int { return cmp.Compare(x.pos, y.pos) })
		pos := make([]int64, len(ws))
		for i, w := range ws {
			pos[i] = w.pos
		}
		vals, err := st.rowsAt(ctx, c, fileNo, pos)
		if err != nil {
			return err
		}
		// The delete rows, one take per row (a chunk's soft deletes of keys written before it are few next to
		// its rows), in the order of vals.
		parts := make([]arrow.RecordBatch, 0, len(ws))
		for _, w := range ws {
			p, err := take(ctx, st.a.mem, fo.lookup[w.batch], []int64{int64(w.at)})
			if err != nil {
				vals.Release()
				release(parts)
				return err
			}
			parts = append(parts, p)
		}
		meta, err := concatRecords(st.a.mem, parts)
		release(parts)
		if err != nil {
			vals.Release()
			return err
		}
		fo.data = append(fo.data, compose(vals, meta, st.g.meta))
		vals.Release()
		meta.Release()
	}
	var left []arrow.RecordBatch
	for bi, d := range fo.lookup {
		if len(rest[bi]) == 0 {
			continue
		}
		r, err := take(ctx, st.a.mem, d, rest[bi])
		if err != nil {
			release(left)
			return err
		}
		left = append(left, r)
	}
	release(fo.lookup)
	fo.lookup = left
	return nil
}

// rowsAt reads the rows at positions pos (ascending) of the data file an earlier chunk wrote (files[fileNo]),
// in the table schema c.target.
func (st *spilledTable) rowsAt(ctx context.Context, c *changeSet, fileNo int, pos []int64) (arrow.RecordBatch, error) {
	path := st.files[fileNo].FilePath()
	var (
		parts []arrow.RecordBatch
		at    int64
		i     int
	)
	defer func() { release(parts) }()
	err := readFileRows(ctx, st.a.fs, path, func(rec arrow.RecordBatch) error {
		n := at + rec.NumRows()
		var rows []int64
		for ; i < len(pos) && pos[i] < n; i++ {
			rows = append(rows, pos[i]-at)
		}
		at = n
		if len(rows) == 0 {
			return nil
		}
		conformed, err := conform(ctx, st.a.mem, rec, c.target, "data file "+path)
		if err != nil {
			return err
		}
		defer conformed.Release()
		t, err := take(ctx, st.a.mem, conformed, rows)
		if err != nil {
			return err
		}
		parts = append(parts, t)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("stream %s: read back rows of %s: %w", st.g.stream, path, err)
	}
	if i < len(pos) {
		return nil, fmt.Errorf("stream %s: %s holds fewer rows than the key index says", st.g.stream, path)
	}
	return concatRecords(st.a.mem, parts)
}

// keepUnreceived reads back the rows at locs (as dropUnreceived returns them) and returns them marked deleted by
// the re-snapshot's end entry: with soft_delete, a row the re-snapshot did not receive is kept, flagged.
func (st *spilledTable) keepUnreceived(ctx context.Context, c *changeSet, locs []uint64, entry uint64) ([]arrow.RecordBatch, error) {
	byFile := map[int][]int64{}
	for _, loc := range locs {
		f := int(loc >> posBits)
		byFile[f] = append(byFile[f], int64(loc&(1<<posBits-1)))
	}
	// A key this chunk holds too is the chunk's to write (its fold has the newer version, deleted or not).
	inChunk := map[string]struct{}{}
	var buf []byte
	for _, b := range c.batches {
		k := batchKey(b, c.keyIdx)
		for r := range int(b.rec.NumRows()) {
			var err error
			if buf, err = k.Append(buf[:0], r); err != nil {
				return nil, err
			}
			inChunk[string(buf)] = struct{}{}
		}
	}
	var out []arrow.RecordBatch
	for _, f := range slices.Sorted(maps.Keys(byFile)) {
		pos := byFile[f]
		slices.Sort(pos)
		all, err := st.rowsAt(ctx, c, f, pos)
		if err != nil {
			release(out)
			return nil, err
		}
		k := batchKey(opBatch{rec: all}, c.keyIdx)
		var keep []int64
		for r := range int(all.NumRows()) {
			if buf, err = k.Append(buf[:0], r); err != nil {
				all.Release()
				release(out)
				return nil, err
			}
			if _, ok := inChunk[string(buf)]; !ok {
				keep = append(keep, int64(r))
			}
		}
		rows, err := take(ctx, st.a.mem, all, keep)
		all.Release()
		if err != nil {
			release(out)
			return nil, err
		}
		marked, err := deletedMeta(st.a.mem, rows, st.g.meta, entry, st.g.syncedAt)
		rows.Release()
		if err != nil {
			release(out)
			return nil, err
		}
		out = append(out, marked)
	}
	return out, nil
}

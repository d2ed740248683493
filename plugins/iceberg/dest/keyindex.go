package dest

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
)

// keyIndex remembers, for each key an apply has written out so far, where its row is: the data file (its place
// in spilledTable.files) and the row position, packed into one uint64. One integer key column, the common
// case, is kept as an int64 (as change.Fold does); other keys by their change.Key encoding. In memory it takes
// about 20–40 bytes per distinct key written out; once that passes half its share of the memory budget (limit),
// it goes to disk as sorted runs (keyRuns) and is resolved by a merge at the commit, so that a range of any
// size stays within memory_limit.
type keyIndex struct {
	intKey bool
	ints   map[int64]uint64
	encs   map[string]uint64
	bytes  int64 // estimated size, for the buffer budget

	limit int64            // bytes the index may take in memory; 0: no limit
	dir   string           // spill_dir
	log   *slog.Logger     //
	dead  func(loc uint64) // takes the rows a resolve of the runs finds replaced
	runs  *keyRuns         // non-nil while the index is on disk
}

// Estimated bytes per entry: a map slot (key, value) at the load Go's maps keep, with their control bytes; an
// encoded key adds its string header and bytes.
const (
	intEntryBytes = 28
	encEntryBytes = 40
)

const (
	posBits = 40 // rows per data file < 2^40
	maxFile = 1<<(64-posBits) - 1
)

func newKeyIndex(c *changeSet, limit int64, dir string, log *slog.Logger, dead func(loc uint64)) *keyIndex {
	ki := &keyIndex{limit: limit, dir: dir, log: log, dead: dead}
	ki.intKey = len(c.keyIdx) == 1 && change.IntKeyType(c.keySchema.Field(0).Type)
	ki.reset()
	return ki
}

// reset empties the in-memory maps.
func (ki *keyIndex) reset() {
	ki.ints, ki.encs = nil, nil
	if ki.intKey {
		ki.ints = map[int64]uint64{}
	} else {
		ki.encs = map[string]uint64{}
	}
	ki.bytes = 0
}

// onDisk says the index is in runs: take and peek are not available until unspill.
func (ki *keyIndex) onDisk() bool { return ki.runs != nil }

// endChunk is called after each chunk: the next records belong to the next chunk, and an index in memory that
// outgrew half its limit goes to disk, its entries as records older than any chunk to come.
func (ki *keyIndex) endChunk() error {
	if ki.runs != nil {
		ki.runs.chunk++
		ki.bytes = ki.runs.bytes()
		return nil
	}
	if ki.limit <= 0 || ki.bytes <= ki.limit/2 {
		return nil
	}
	return ki.toDisk()
}

// shed lets go of what the index holds in memory, between chunks: an index in memory goes to disk, one on disk
// writes its buffer out as a run and drops it. The apply calls it when the indexes of all its tables together
// take more than their share (applyBuffer.shedIndexes). An index kept in memory (limit 0) keeps it.
func (ki *keyIndex) shed() error {
	if ki.limit <= 0 {
		return nil
	}
	if ki.runs == nil {
		if err := ki.toDisk(); err != nil {
			return err
		}
	}
	if err := ki.runs.flush(); err != nil {
		return err
	}
	ki.runs.recs, ki.runs.arena = nil, nil
	ki.bytes = 0
	return nil
}

// toDisk moves an index in memory to runs: its entries become records older than any chunk to come.
func (ki *keyIndex) toDisk() error {
	kr := newKeyRuns(ki.dir, ki.limit, ki.log, ki.dead)
	var buf []byte
	for k, loc := range ki.ints {
		buf = appendIntKey(buf[:0], k)
		if err := kr.add(buf, 0, loc); err != nil {
			kr.close()
			return err
		}
	}
	for k, loc := range ki.encs {
		if err := kr.add([]byte(k), 0, loc); err != nil {
			kr.close()
			return err
		}
	}
	ki.reset()
	ki.runs = kr
	ki.bytes = kr.bytes()
	return nil
}

// resolve hands the rows the runs hold as replaced to dead (the commit calls it once; an index in memory has
// handed them over already, through take).
func (ki *keyIndex) resolve() error {
	if ki.runs == nil {
		return nil
	}
	err := ki.runs.resolve(nil)
	ki.runs = nil
	ki.reset()
	return err
}

// unspill brings an index on disk back into memory (the replaced rows go to dead), for the steps that look keys
// up or walk the index: soft deletes of keys written by earlier chunks, and re-snapshot ends. Those keep it in
// memory from then on, as before the index could spill, until it outgrows its limit again.
func (ki *keyIndex) unspill() error {
	if ki.runs == nil {
		return nil
	}
	kr := ki.runs
	ki.runs = nil
	ki.reset()
	return kr.resolve(func(key []byte, loc uint64) error {
		if ki.intKey {
			ki.ints[intKeyOf(key)] = loc
			ki.bytes += intEntryBytes
			return nil
		}
		ki.encs[string(key)] = loc
		ki.bytes += encEntryBytes + int64(len(key))
		return nil
	})
}

// close removes the index's files, if any.
func (ki *keyIndex) close() {
	if ki.runs != nil {
		ki.runs.close()
		ki.runs = nil
	}
}

// appendIntKey encodes an integer key for the runs, in an order the same as the integers'.
func appendIntKey(b []byte, k int64) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(k)^1<<63)
}

func intKeyOf(b []byte) int64 { return int64(binary.BigEndian.Uint64(b) ^ 1<<63) }

// keyCursor reads the keys of one batch.
type keyCursor struct {
	ki  *keyIndex
	key *change.Key
	buf []byte
}

func (ki *keyIndex) keys(rec arrow.RecordBatch, keyIdx []int) (*keyCursor, error) {
	cols := make([]arrow.Array, len(keyIdx))
	for i, c := range keyIdx {
		cols[i] = rec.Column(c)
	}
	k := &keyCursor{ki: ki, key: change.NewKey(cols, nil)}
	if ki.intKey && !k.key.IsInt() {
		return nil, fmt.Errorf("key column is %s, not an integer as when the apply began", cols[0].DataType())
	}
	return k, nil
}

// take returns where row r's key was written, and forgets it: the caller replaces that row.
func (k *keyCursor) take(r int) (file int, pos int64, ok bool, err error) {
	return k.find(r, true)
}

// peek returns where row r's key was written, if it was.
func (k *keyCursor) peek(r int) (file int, pos int64, ok bool, err error) {
	return k.find(r, false)
}

func (k *keyCursor) find(r int, forget bool) (file int, pos int64, ok bool, err error) {
	if k.ki.runs != nil {
		return 0, 0, false, fmt.Errorf("key index: a lookup while the index is on disk")
	}
	var loc uint64
	if k.ki.ints != nil {
		key, err := k.key.Int(r)
		if err != nil {
			return 0, 0, false, err
		}
		if loc, ok = k.ki.ints[key]; ok && forget {
			delete(k.ki.ints, key)
			k.ki.bytes -= intEntryBytes
		}
	} else {
		if k.buf, err = k.key.Append(k.buf[:0], r); err != nil {
			return 0, 0, false, err
		}
		if loc, ok = k.ki.encs[string(k.buf)]; ok && forget {
			delete(k.ki.encs, string(k.buf))
			k.ki.bytes -= encEntryBytes + int64(len(k.buf))
		}
	}
	return int(loc >> posBits), int64(loc & (1<<posBits - 1)), ok, nil
}

// touch records, for an index on disk, that the current chunk holds a newer version of row r's key: the
// resolve at the commit finds the row an earlier chunk wrote for it dead (what take does in memory).
func (k *keyCursor) touch(r int) error {
	return k.record(r, noLoc)
}

// record appends a record of row r's key to the runs.
func (k *keyCursor) record(r int, loc uint64) error {
	var err error
	if k.ki.intKey {
		key, err := k.key.Int(r)
		if err != nil {
			return err
		}
		k.buf = appendIntKey(k.buf[:0], key)
	} else if k.buf, err = k.key.Append(k.buf[:0], r); err != nil {
		return err
	}
	kr := k.ki.runs
	if err := kr.add(k.buf, kr.chunk, loc); err != nil {
		return err
	}
	k.ki.bytes = kr.bytes()
	return nil
}

// put records that row r's key is at file, pos.
func (k *keyCursor) put(r, file int, pos int64) error {
	if file > maxFile || pos >= 1<<posBits {
		return fmt.Errorf("file %d row %d is beyond the key index's range", file, pos)
	}
	loc := uint64(file)<<posBits | uint64(pos)
	if k.ki.runs != nil {
		return k.record(r, loc)
	}
	// A key is put once per file: fold left one version of it per chunk, and take removed the earlier one.
	if k.ki.ints != nil {
		key, err := k.key.Int(r)
		if err != nil {
			return err
		}
		k.ki.ints[key] = loc
		k.ki.bytes += intEntryBytes
		return nil
	}
	var err error
	if k.buf, err = k.key.Append(k.buf[:0], r); err != nil {
		return err
	}
	k.ki.encs[string(k.buf)] = loc
	k.ki.bytes += encEntryBytes + int64(len(k.buf))
	return nil
}

// addFile indexes the keys of a data file just written. The writer decides how rows fall into files (bin
// packing, partitions, concurrent writers), so the positions are read back from the file's key columns, found
// by field id, which is cheap next to writing it.
func (ki *keyIndex) addFile(ctx context.Context, fsys iceio.IO, fileNo int, df iceberg.DataFile, c *changeSet) error {
	keyIdx := make([]int, len(c.eqIDs))
	for i := range keyIdx {
		keyIdx[i] = i
	}
	var pos int64
	err := readFileKeys(ctx, fsys, df.FilePath(), c.eqIDs, c.keySchema, func(rec arrow.RecordBatch) error {
		k, err := ki.keys(rec, keyIdx)
		if err != nil {
			return err
		}
		for r := range int(rec.NumRows()) {
			if err := k.put(r, fileNo, pos); err != nil {
				return err
			}
			pos++
		}
		return nil
	})
	if err != nil {
		return err
	}
	if pos != df.Count() {
		return fmt.Errorf("read %d keys back, the file holds %d rows", pos, df.Count())
	}
	return nil
}

// readFileKeys hands fn the key columns of a data file in row order, found by field id (a column renamed since
// the file was written is still found) and cast to keySchema. fn must not keep the batch.
func readFileKeys(ctx context.Context, fsys iceio.IO, path string, eqIDs []int, keySchema *arrow.Schema, fn func(arrow.RecordBatch) error) error {
	f, err := fsys.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return err
	}
	defer pf.Close()
	leaves := make([]int, len(eqIDs))
	for i, id := range eqIDs {
		leaves[i] = -1
		sc := pf.MetaData().Schema
		for j := range sc.NumColumns() {
			if int(sc.Column(j).SchemaNode().FieldID()) == id {
				leaves[i] = j
			}
		}
		if leaves[i] < 0 {
			return fmt.Errorf("key field id %d is not in the file", id)
		}
	}
	mem := memory.DefaultAllocator
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, mem)
	if err != nil {
		return err
	}
	rr, err := fr.GetRecordReader(ctx, leaves, nil)
	if err != nil {
		return err
	}
	defer rr.Release()
	for rr.Next() {
		rec, err := asKeySchema(ctx, mem, rr.RecordBatch(), keySchema)
		if err != nil {
			return err
		}
		err = fn(rec)
		rec.Release()
		if err != nil {
			return err
		}
	}
	return rr.Err()
}

// asKeySchema casts key columns read from Parquet to the types the batches had, so that both encode keys
// alike (a Parquet reader may choose another Arrow type for the same column).
func asKeySchema(ctx context.Context, mem memory.Allocator, rec arrow.RecordBatch, want *arrow.Schema) (arrow.RecordBatch, error) {
	cols := make([]arrow.Array, rec.NumCols())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	for i, col := range rec.Columns() {
		wt := want.Field(i).Type
		if arrow.TypeEqual(col.DataType(), wt) {
			col.Retain()
			cols[i] = col
			continue
		}
		out, err := compute.CastArray(compute.WithAllocator(ctx, mem), col, compute.SafeCastOptions(wt))
		if err != nil {
			return nil, fmt.Errorf("key column %s read back as %s: %w", want.Field(i).Name, col.DataType(), err)
		}
		cols[i] = out
	}
	return array.NewRecordBatch(want, cols, rec.NumRows()), nil
}

// readFileRows hands fn every column of a data file in row order. fn must not keep the batch.
func readFileRows(ctx context.Context, fsys iceio.IO, path string, fn func(arrow.RecordBatch) error) error {
	f, err := fsys.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return err
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, memory.DefaultAllocator)
	if err != nil {
		return err
	}
	rr, err := fr.GetRecordReader(ctx, nil, nil)
	if err != nil {
		return err
	}
	defer rr.Release()
	for rr.Next() {
		if err := fn(rr.RecordBatch()); err != nil {
			return err
		}
	}
	return rr.Err()
}

// concatRecords joins batches of one schema into one.
func concatRecords(mem memory.Allocator, recs []arrow.RecordBatch) (arrow.RecordBatch, error) {
	cols := make([]arrow.Array, recs[0].NumCols())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	var n int64
	for _, r := range recs {
		n += r.NumRows()
	}
	for j := range cols {
		parts := make([]arrow.Array, len(recs))
		for i, r := range recs {
			parts[i] = r.Column(j)
		}
		c, err := array.Concatenate(parts, mem)
		if err != nil {
			return nil, err
		}
		cols[j] = c
	}
	return array.NewRecordBatch(recs[0].Schema(), cols, n), nil
}

package change

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// The fold is how a destination reduces one apply's change rows of a stream to what it must write: per key
// the newest row wins (a delete included, so a delete after an insert leaves nothing), keys stay in the order
// they were first seen so that the statements a destination builds are deterministic, and a truncate forgets
// everything before it. Every destination folds the same way: the rules live here once.
//
// Keys are equal exactly when their values are equal, whatever Arrow type carried them: a batch with an
// int32 key and a later batch of a widened int64 (or unsigned) key name the same row for the same number.
// Strings and large strings are equal for equal text; other types compare by their Arrow text form.

// OpValues returns the op of every row of a change batch, checked as Ops checks them.
func OpValues(rec arrow.RecordBatch) ([]Op, error) {
	col, err := Ops(rec)
	if err != nil {
		return nil, err
	}
	out := make([]Op, col.Len())
	for i, v := range col.Int8Values() {
		out[i] = Op(v)
	}
	return out, nil
}

// Key reads the primary key of the rows of one batch.
type Key struct {
	cols  []arrow.Array
	names []string
	ints  func(int) int64
}

// NewKey reads the key from the given columns, named for error messages. No columns: the stream has no key.
func NewKey(cols []arrow.Array, names []string) *Key {
	k := &Key{cols: cols, names: names}
	if len(cols) == 1 {
		k.ints = intValues(cols[0])
	}
	return k
}

// KeyOf reads the key a batch's schema declares (PrimaryKey), found by column name.
func KeyOf(rec arrow.RecordBatch) (*Key, error) {
	names := PrimaryKey(rec.Schema())
	cols := make([]arrow.Array, len(names))
	for i, n := range names {
		idx := rec.Schema().FieldIndices(n)
		if len(idx) != 1 {
			return nil, fault.DataErr(fmt.Errorf("primary key column %q is not in the batch", n),
				"the source must list in "+PrimaryKeyMeta+" only columns the batch has")
		}
		cols[i] = rec.Column(idx[0])
	}
	return NewKey(cols, names), nil
}

// Len is the number of key columns; 0 for a stream without a key.
func (k *Key) Len() int { return len(k.cols) }

// IsInt says the key is one integer column that Int reads: any signed integer, or an unsigned one narrower
// than 64 bits. Hashing an int64 is much cheaper than an encoding, and it is the common key.
func (k *Key) IsInt() bool { return k.ints != nil }

// Int returns row's key as an int64; only when IsInt.
func (k *Key) Int(row int) (int64, error) {
	if k.cols[0].IsNull(row) {
		return 0, k.nullErr(row, 0)
	}
	return k.ints(row), nil
}

// Append appends row's key encoding to buf: two rows have equal encodings exactly when their keys are equal.
// An integer key column encodes as AppendInt of its value, so an index of Int keys can be carried over.
func (k *Key) Append(buf []byte, row int) ([]byte, error) {
	for j, c := range k.cols {
		if c.IsNull(row) {
			return buf, k.nullErr(row, j)
		}
		buf = appendValue(buf, c, row)
	}
	return buf, nil
}

// AppendInt is the encoding Append gives an integer key of value v.
func AppendInt(buf []byte, v int64) []byte { return binary.AppendVarint(append(buf, 'i'), v) }

func (k *Key) nullErr(row, col int) error {
	name := fmt.Sprint(col)
	if col < len(k.names) {
		name = k.names[col]
	}
	return fault.DataErr(fmt.Errorf("row %d: primary key column %s is null", row, name),
		"a primary key column must never be null: fix the source table's key or choose another key")
}

// IntKeyType says a single key column of type t is read by Key.Int (Key.IsInt).
func IntKeyType(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.UINT8, arrow.UINT16, arrow.UINT32:
		return true
	}
	return false
}

// intValues returns a reader of an integer column's values as int64, or nil for other types (uint64 does not
// always fit, so it goes through the encoding).
func intValues(c arrow.Array) func(int) int64 {
	switch a := c.(type) {
	case *array.Int64:
		v := a.Int64Values()
		return func(i int) int64 { return v[i] }
	case *array.Int32:
		v := a.Int32Values()
		return func(i int) int64 { return int64(v[i]) }
	case *array.Int16:
		v := a.Int16Values()
		return func(i int) int64 { return int64(v[i]) }
	case *array.Int8:
		v := a.Int8Values()
		return func(i int) int64 { return int64(v[i]) }
	case *array.Uint32:
		v := a.Uint32Values()
		return func(i int) int64 { return int64(v[i]) }
	case *array.Uint16:
		v := a.Uint16Values()
		return func(i int) int64 { return int64(v[i]) }
	case *array.Uint8:
		v := a.Uint8Values()
		return func(i int) int64 { return int64(v[i]) }
	}
	return nil
}

// appendValue encodes one non-null value behind a tag byte of its kind, so that values of different kinds
// never share an encoding and each encoding is self-delimiting.
func appendValue(buf []byte, c arrow.Array, i int) []byte {
	if ints := intValues(c); ints != nil {
		return AppendInt(buf, ints(i))
	}
	switch a := c.(type) {
	case *array.Uint64:
		if v := a.Value(i); v <= math.MaxInt64 {
			return AppendInt(buf, int64(v))
		} else {
			return binary.AppendUvarint(append(buf, 'u'), v)
		}
	case *array.Date32:
		return binary.AppendVarint(append(buf, 'd'), int64(a.Value(i)))
	case *array.Timestamp:
		unit := byte(a.DataType().(*arrow.TimestampType).Unit)
		return binary.AppendVarint(append(buf, 't', unit), int64(a.Value(i)))
	case *array.Time64:
		unit := byte(a.DataType().(*arrow.Time64Type).Unit)
		return binary.AppendVarint(append(buf, 'h', unit), int64(a.Value(i)))
	case *array.Float32:
		return binary.LittleEndian.AppendUint64(append(buf, 'f'), math.Float64bits(float64(a.Value(i))))
	case *array.Float64:
		return binary.LittleEndian.AppendUint64(append(buf, 'f'), math.Float64bits(a.Value(i)))
	case *array.String:
		return appendBytes(append(buf, 's'), a.Value(i))
	case *array.LargeString:
		return appendBytes(append(buf, 's'), a.Value(i))
	case *array.Binary:
		return appendBytes(append(buf, 'b'), string(a.Value(i)))
	case *array.LargeBinary:
		return appendBytes(append(buf, 'b'), string(a.Value(i)))
	}
	return appendBytes(append(buf, 'v'), c.ValueStr(i))
}

func appendBytes(buf []byte, v string) []byte {
	return append(binary.AppendUvarint(buf, uint64(len(v))), v...)
}

// Last is what a fold keeps of a key: the position of its newest row and that row's op.
type Last struct {
	Batch int // the batch's number, counting Add calls from 0
	Row   int
	Op    Op
	// Replaces: a row of this key in the fold was an update or delete (or any row, with UpsertInserts), so a
	// version the destination holds from an earlier apply must go. A destination that upserts by key anyway
	// can ignore it; one that only appends (a lake) writes a delete for it.
	Replaces bool
	// ValBatch and ValRow locate the key's newest row in the fold that carries values (any op but a delete);
	// HasValues is false when every row of the key since it was first seen (or since the last truncate) was a
	// delete. A destination that soft-deletes (plugin-sdk/rowmeta) writes these values with the deleted flag
	// when the newest row is a delete, so an insert and a delete folded together leave the row as it was last
	// seen, exactly as when they arrive in two applies.
	ValBatch, ValRow int
	HasValues        bool
	// gone: a later delete of an equal row cancelled this insert (full row matching); Last leaves it out.
	gone bool
}

// FoldOptions tune a fold.
type FoldOptions struct {
	// Rows is the expected number of rows, to size the index once: growing a map of a million keys rehashed
	// it about as long as the Iceberg Parquet writer ran.
	Rows int
	// UpsertInserts treats inserts and reads as upserts (Replaces is set for every key): for a destination
	// that may already hold the key, as after a re-snapshot.
	UpsertInserts bool
	// FullRow: the destination applies streams matched by full row (AddFullRow); without it such a stream
	// is refused.
	FullRow bool
}

// Fold collapses the change rows of one stream, batch by batch, to the newest row of each key.
type Fold struct {
	opt       FoldOptions
	last      []Last
	byInt     map[int64]int
	byEnc     map[string]int
	buf       []byte
	batches   int
	rows      int64
	truncated bool
	// Full row matching (fullrow.go): each batch's rows, the kept inserts by encoding, how many entries of
	// last the index has seen, and how many entries a delete cancelled.
	images  []*Image
	byImg   map[string][]int
	indexed int
	gone    int
}

// NewFold starts an empty fold.
func NewFold(opt FoldOptions) *Fold { return &Fold{opt: opt} }

// Add folds the next batch: key reads its key (Len 0 for a stream without a key), ops are its rows' ops as
// OpValues returned them. Without a key every row survives, and an update or delete is refused because
// nothing identifies the row it changes.
func (f *Fold) Add(key *Key, ops []Op) error {
	bi := f.batches
	f.batches++
	f.rows += int64(len(ops))
	if key.Len() == 0 {
		for i, op := range ops {
			if op == OpUpdate || op == OpDelete {
				return fault.DataErr(fmt.Errorf("row %d: %s, but the stream has no primary key (%s metadata) to find the row by", i, op, PrimaryKeyMeta),
					"give the source table a primary key (or replica identity), or replicate only its inserts")
			}
			f.last = append(f.last, Last{Batch: bi, Row: i, Op: op, ValBatch: bi, ValRow: i, HasValues: op != OpDelete})
		}
		return nil
	}
	if f.last == nil {
		f.last = make([]Last, 0, f.opt.Rows)
	}
	if key.IsInt() && f.byEnc == nil {
		if f.byInt == nil {
			f.byInt = make(map[int64]int, f.opt.Rows)
		}
		for i, op := range ops {
			k, err := key.Int(i)
			if err != nil {
				return err
			}
			si, ok := f.byInt[k]
			if !ok {
				si = len(f.last)
				f.byInt[k] = si
				f.last = append(f.last, Last{})
			}
			f.set(si, bi, i, op)
		}
		return nil
	}
	if f.byEnc == nil {
		// A key that is not an integer after ones that were (a widened or changed column): carry the
		// integer keys over in the encoding Append gives them.
		f.byEnc = make(map[string]int, max(f.opt.Rows, len(f.byInt)))
		for k, si := range f.byInt {
			f.byEnc[string(AppendInt(nil, k))] = si
		}
		f.byInt = nil
	}
	for i, op := range ops {
		var err error
		if f.buf, err = key.Append(f.buf[:0], i); err != nil {
			return err
		}
		si, ok := f.byEnc[string(f.buf)]
		if !ok {
			si = len(f.last)
			f.byEnc[string(f.buf)] = si
			f.last = append(f.last, Last{})
		}
		f.set(si, bi, i, op)
	}
	return nil
}

func (f *Fold) set(si, batch, row int, op Op) {
	l := &f.last[si]
	l.Batch, l.Row, l.Op = batch, row, op
	if op != OpDelete {
		l.ValBatch, l.ValRow, l.HasValues = batch, row, true
	}
	l.Replaces = l.Replaces || op == OpUpdate || op == OpDelete || f.opt.UpsertInserts
}

// Truncate records that the stream was emptied after the rows added so far: they are forgotten, and the
// destination must remove every row it holds before it writes what the fold keeps.
func (f *Fold) Truncate() {
	f.truncated = true
	f.last = f.last[:0]
	f.byInt, f.byEnc = nil, nil
	f.byImg, f.indexed, f.gone = nil, 0, 0
}

// Truncated says a truncate was folded: the destination empties the table first.
func (f *Fold) Truncated() bool { return f.truncated }

// Rows is the number of change rows added.
func (f *Fold) Rows() int64 { return f.rows }

// Batches is the number of batches added.
func (f *Fold) Batches() int { return f.batches }

// Last returns the surviving row of each key in the order keys were first seen (since the last truncate),
// deletes included; for a stream without a key, every row in order.
// For a stream matched by full row, the kept inserts and deletes in order (fullrow.go).
func (f *Fold) Last() []Last {
	if f.gone > 0 {
		f.last = slices.DeleteFunc(f.last, func(l Last) bool { return l.gone })
		f.byImg, f.indexed, f.gone = nil, 0, 0
	}
	return f.last
}

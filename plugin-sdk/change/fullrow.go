package change

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// Folding a stream matched by full row (MatchMeta = MatchFullRow).
//
// Such a stream has no key, so nothing collapses per key: every row survives in order, and a delete carries
// the whole old row. One thing is folded: a delete whose image equals a row inserted earlier in the same fold
// (since the last truncate) cancels that insert, and neither reaches the destination. What remains is a list
// of inserts and of deletes that each match a row the destination held before the fold, so a destination may
// apply all the deletes first (each removing exactly one equal row) and then all the inserts: the table ends
// as the same multiset of rows as when every change is applied one by one in order, since identical rows
// cannot be told apart. That is what makes a range of 100k changes a few statements, not 100k.
//
// Rows are equal when every data column is equal (Key's rules per value), NULL equal to NULL, in the order of
// the batch's fields.

// Image reads the whole rows of one batch (its data columns) for matching.
type Image struct {
	cols  []arrow.Array
	names []string
}

// ImageOf reads the data columns of rec (DataFields).
func ImageOf(rec arrow.RecordBatch) *Image {
	img := &Image{}
	for i, f := range rec.Schema().Fields() {
		if Reserved(f.Name) {
			continue
		}
		img.cols = append(img.cols, rec.Column(i))
		img.names = append(img.names, f.Name)
	}
	return img
}

// Append appends row's encoding to buf: two rows have equal encodings exactly when they have the same columns
// with equal values, NULL equal to NULL.
func (m *Image) Append(buf []byte, row int) []byte {
	for j, c := range m.cols {
		buf = appendBytes(buf, m.names[j])
		if c.IsNull(row) {
			buf = append(buf, 'n')
			continue
		}
		buf = appendValue(buf, c, row)
	}
	return buf
}

// AddFullRow folds the next batch of a stream matched by full row: img reads its rows, ops are their ops as
// OpValues returned them. Inserts and reads are kept in order; a delete cancels the newest earlier insert of
// an equal row in the fold, or is kept (HasValues: its own row is the image to remove). An update is refused:
// such a stream carries it as a delete and an insert. A fold whose options lack FullRow refuses the batch,
// since its destination would otherwise write the deletes as rows.
func (f *Fold) AddFullRow(img *Image, ops []Op) error {
	bi := f.batches
	f.batches++
	f.rows += int64(len(ops))
	if !f.opt.FullRow {
		return fault.ConfigErr(fmt.Errorf("the stream is matched by full row (%s %s), which this destination does not apply", MatchMeta, MatchFullRow),
			"send the table to a destination that applies full_row streams (PostgreSQL, DuckDB), or set the source table's mode to append (inserts only) or give it key_columns")
	}
	for len(f.images) < bi {
		f.images = append(f.images, nil)
	}
	f.images = append(f.images, img)
	for i, op := range ops {
		switch op {
		case OpUpdate:
			return fault.DataErr(fmt.Errorf("row %d: update in a stream matched by full row (%s %s)", i, MatchMeta, MatchFullRow),
				"the source must send an update of such a stream as a delete of the old row followed by an insert of the new one")
		case OpDelete:
			f.indexInserts()
			f.buf = img.Append(f.buf[:0], i)
			if live := f.byImg[string(f.buf)]; len(live) > 0 {
				f.last[live[len(live)-1]].gone = true
				f.gone++
				f.byImg[string(f.buf)] = live[:len(live)-1]
				continue
			}
			f.last = append(f.last, Last{Batch: bi, Row: i, Op: op, Replaces: true, ValBatch: bi, ValRow: i, HasValues: true})
		default:
			f.last = append(f.last, Last{Batch: bi, Row: i, Op: op, ValBatch: bi, ValRow: i, HasValues: true})
		}
	}
	return nil
}

// indexInserts adds the inserts kept since the last call to the index of rows a delete can cancel. The index
// is built at the first delete only: a stream of inserts costs no encoding.
func (f *Fold) indexInserts() {
	if f.byImg == nil {
		f.byImg = map[string][]int{}
		f.indexed = 0
	}
	for ; f.indexed < len(f.last); f.indexed++ {
		l := f.last[f.indexed]
		if l.gone || l.Op == OpDelete {
			continue
		}
		f.buf = f.images[l.Batch].Append(f.buf[:0], l.Row)
		f.byImg[string(f.buf)] = append(f.byImg[string(f.buf)], f.indexed)
	}
}

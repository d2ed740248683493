package dest

import (
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// History mode (history: true for a stream): beside the stream's table T, the Iceberg table T_history gets every
// change as its own row, in order. It is one more table of the apply (applyBuffer.add gives it the stream's
// items, truncates and re-snapshot marks left out), committed like any other: its own commit, recording the
// apply's sequence number in its table property skippr.pipeline.P.sequence, checked before anything is written.
// So a replayed range appends nothing twice, and a crash between the mirror's commit and the history's leaves
// the history below the marker: the replay skips the mirror (its fence) and appends the history's part.
//
// Its columns: the stream's data columns (a delete holds its key and NULLs), then _skippr_op (string: insert,
// update, delete, snapshot), _skippr_source_committed_at (timestamptz, NULL when unknown), _skippr_position
// (long, the WAL entry) and _skippr_seq (int, the change's place among the stream's changes in that entry,
// from 0). (_skippr_position, _skippr_seq) is unique; the table has no identifier fields (it is only appended
// to). A TRUNCATE empties the mirror, not the history; the rows a re-snapshot's end removes are not changes of
// the source and are not in it. The table property skippr.history = S names its stream (LastApplied reports
// the mirror's fence, not this one's).

// The history table's own columns (_skippr_source_committed_at is rowmeta.SourceCommittedAt).
const (
	histOp  = "_skippr_op"
	histPos = "_skippr_position"
	histSeq = "_skippr_seq"
)

// propHistory marks a history table with the stream it holds the changes of.
const propHistory = "skippr.history"

func historyTable(table string) string { return table + "_history" }

// dataOnly is a schema without the protocol's reserved columns (a schema change item's schema still has them).
func dataOnly(s *arrow.Schema) *arrow.Schema {
	md := s.Metadata()
	return arrow.NewSchema(change.DataFields(s), &md)
}

// addColumns adds to st, the stripped change batch rec of item it, the columns the group writes beyond the
// source's: rowmeta's for a mirror, the history's for a history table (whose rows are then all appended:
// the ops returned are inserts). It checks first that the source's columns do not clash with them.
func (a *tableAttempt) addColumns(st, rec arrow.RecordBatch, ops []change.Op, it serve.Item) (arrow.RecordBatch, []change.Op, error) {
	pos := it.Sequence
	if pos == 0 {
		pos = a.req.Sequence
	}
	if a.g.history {
		h, err := a.historyBatch(st, rec, ops, pos)
		st.Release()
		if err != nil {
			return nil, nil, err
		}
		ins := make([]change.Op, len(ops))
		for i := range ins {
			ins[i] = change.OpInsert
		}
		return h, ins, nil
	}
	o := a.g.meta
	if !o.Any() {
		return st, ops, nil
	}
	// The raw batch: stripping took the source's _skippr_ columns away already.
	if err := o.CheckSchema(a.g.stream, rec.Schema()); err != nil {
		st.Release()
		return nil, nil, err
	}
	out, err := withMeta(a.mem, st, rec, ops, o, pos, a.g.syncedAt)
	st.Release()
	return out, ops, err
}

// historyBatch is the history rows of st (rec stripped), the changes of entry pos: their columns, op, commit
// time, entry and place in the entry. The batch has no primary key: the history table has none.
func (a *tableAttempt) historyBatch(st, rec arrow.RecordBatch, ops []change.Op, pos uint64) (arrow.RecordBatch, error) {
	for _, f := range rec.Schema().Fields() {
		if slices.Contains([]string{histPos, histSeq, rowmeta.SourceCommittedAt}, f.Name) {
			return nil, fault.ConfigErr(fmt.Errorf("stream %s has a column %s, which its history table adds itself", a.g.stream, f.Name),
				fmt.Sprintf("rename the source column %s, exclude it (exclude_columns), or turn history off for the stream", f.Name))
		}
	}
	if a.histEntry != pos {
		a.histEntry, a.histSeq = pos, 0
	}
	times, err := change.Committed(rec)
	if err != nil {
		return nil, err
	}
	n := len(ops)
	opB := array.NewStringBuilder(a.mem)
	atB := array.NewTimestampBuilder(a.mem, utcMicros)
	posB := array.NewInt64Builder(a.mem)
	seqB := array.NewInt32Builder(a.mem)
	defer opB.Release()
	defer atB.Release()
	defer posB.Release()
	defer seqB.Release()
	for i, op := range ops {
		opB.Append(rowmeta.OpName(op))
		if t, ok := change.CommittedAt(times, i); ok {
			atB.Append(arrow.Timestamp(t.UnixMicro()))
		} else {
			atB.AppendNull()
		}
		posB.Append(int64(pos))
		seqB.Append(int32(a.histSeq) + int32(i))
	}
	a.histSeq += int64(n)
	// Every data column is optional here: a delete holds only its key.
	fields := nullable(st.Schema().Fields())
	fields = append(fields,
		addedField(histOp, arrow.BinaryTypes.String), addedField(rowmeta.SourceCommittedAt, utcMicros),
		addedField(histPos, arrow.PrimitiveTypes.Int64), addedField(histSeq, arrow.PrimitiveTypes.Int32))
	cols := append(slices.Clone(st.Columns()), opB.NewArray(), atB.NewArray(), posB.NewArray(), seqB.NewArray())
	out := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, int64(n))
	for _, c := range cols[len(cols)-4:] {
		c.Release()
	}
	return out, nil
}

// nullable returns the fields, each made nullable.
func nullable(fields []arrow.Field) []arrow.Field {
	out := slices.Clone(fields)
	for i := range out {
		out[i].Nullable = true
	}
	return out
}

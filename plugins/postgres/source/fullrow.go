package source

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// Tables in mode: full_row: no key, REPLICA IDENTITY FULL. Their stream is matched by full row
// (change.MatchFullRow): a delete carries the whole old row, which REPLICA IDENTITY FULL logs, and removes
// one equal row at the destination; an update goes as a delete of its old row and an insert of its new one.
// Like mode: append, such a table is copied exactly (exact.go): with no key, a change the copy already holds
// would otherwise be applied twice, so changes committed before the copy's snapshot are dropped here too.

// fullRowDelete sends a delete of a full_row table as its old row.
func (p *processor) fullRowDelete(ctx context.Context, rel *relation, m *pglogrepl.DeleteMessage, lsn pglogrepl.LSN) error {
	if p.inCopy(rel.stream) {
		return nil
	}
	old, err := oldRow(rel, m.OldTuple)
	if err != nil {
		return fmt.Errorf("delete from %s at %s: %w", rel.stream, lsn, err)
	}
	return p.appendRow(ctx, rel, change.OpDelete, old, lsn)
}

// fullRowUpdate sends an update of a full_row table as a delete of its old row and an insert of its new one.
// A value the update left unchanged out of line (TOAST) is in the old row.
func (p *processor) fullRowUpdate(ctx context.Context, rel *relation, m *pglogrepl.UpdateMessage, lsn pglogrepl.LSN) error {
	if p.inCopy(rel.stream) {
		return nil
	}
	old, err := oldRow(rel, m.OldTuple)
	if err != nil {
		return fmt.Errorf("update of %s at %s: %w", rel.stream, lsn, err)
	}
	vals, missing, err := tupleValuesMissing(rel, m.NewTuple, m.OldTuple)
	if err != nil {
		return fmt.Errorf("update of %s at %s: %w", rel.stream, lsn, err)
	}
	if len(missing) > 0 {
		return fault.ConfigErr(fmt.Errorf("update of %s at %s: column %s left unchanged out of line (TOAST) and missing from the old row", rel.stream, lsn, rel.cols[missing[0]].Name),
			fmt.Sprintf("run ALTER TABLE %s REPLICA IDENTITY FULL, then re-snapshot the table (`skippr resnapshot PIPELINE %s`)", rel.table.Name.Quoted(), rel.stream))
	}
	if err := p.appendRow(ctx, rel, change.OpDelete, old, lsn); err != nil {
		return err
	}
	return p.appendRow(ctx, rel, change.OpInsert, vals, lsn)
}

// oldRow is every column of the old row, which only REPLICA IDENTITY FULL logs whole.
func oldRow(rel *relation, old *pglogrepl.TupleData) ([][]byte, error) {
	if old == nil || len(old.Columns) != len(rel.cols) {
		return nil, fault.ConfigErr(fmt.Errorf("the change carries no whole old row, which mode: full_row needs (REPLICA IDENTITY FULL was turned off?)"),
			fmt.Sprintf("run ALTER TABLE %s REPLICA IDENTITY FULL, then re-snapshot the table (`skippr resnapshot PIPELINE %s`): changes already in the slot cannot be matched", rel.table.Name.Quoted(), rel.stream))
	}
	vals := make([][]byte, len(rel.cols))
	for i, c := range old.Columns {
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
		case pglogrepl.TupleDataTypeText:
			vals[i] = c.Data
		default:
			return nil, fault.ConfigErr(fmt.Errorf("the old row has no value for column %s (kind %q)", rel.cols[i].Name, c.DataType),
				fmt.Sprintf("run ALTER TABLE %s REPLICA IDENTITY FULL, then re-snapshot the table (`skippr resnapshot PIPELINE %s`)", rel.table.Name.Quoted(), rel.stream))
		}
	}
	return vals, nil
}

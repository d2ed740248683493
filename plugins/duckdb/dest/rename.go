package dest

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

// tableRename is one stream renamed in an entry: to was from before.
type tableRename struct{ from, to string }

// followRenamedTables prepares an entry in which a stream is renamed (a schema of it carries
// change.RenamedFromTableMeta): the rows of the former stream that come before the rename in the entry are
// written under the new name, into the renamed table, as the source's table held them when it was renamed. It
// returns the renames, in the entry's order, which writeEntry makes before any other statement of the entry.
//
// Writing them into the former table first and renaming it afterwards would give the same rows, but DuckDB
// refuses a transaction that alters a table after writing it (writeEntry); this needs no second transaction.
func followRenamedTables(segs []*segment) []tableRename {
	var renames []tableRename
	var before []*change.Plan // the plans met so far, in the entry's order
	for _, g := range segs {
		for _, sp := range g.plans.List() {
			for _, s := range sp.Schemas {
				from := change.RenamedFromTable(s)
				if from == "" || from == sp.Stream || slices.Contains(renames, tableRename{from, sp.Stream}) {
					continue
				}
				renames = append(renames, tableRename{from, sp.Stream})
				for _, p := range before {
					if p.Stream == from {
						p.Stream = sp.Stream
					}
				}
			}
			before = append(before, sp)
		}
	}
	return renames
}

// renameTable follows a RENAME TABLE at the source (change.RenamedFromTableMeta): the stream `to` was stream
// `from` before. When the schema has a table for from and none for to, the table is renamed, its history table
// with it, and the pipeline's per-stream state (an open re-snapshot's record, the stream's last sequence) moves
// to the new name: the rows written before the rename stay, and the changes after it land beside them. When the
// table for to exists already (this apply is a replay, or a later schema still carries the marker), or neither
// exists (nothing was written under the old name), nothing is done and the table is created as for any stream.
// In the apply's transaction, so the rename commits with the rows and the fence, or not at all.
func (a *applier) renameTable(ctx context.Context, from, to string) error {
	oldName, newName := TableName(from), TableName(to)
	if from == "" || from == to || strings.EqualFold(oldName, newName) {
		return nil
	}
	haveNew, err := tableExists(ctx, a.conn, a.s.Schema, newName)
	if err != nil {
		return fmt.Errorf("stream %s was renamed from %s: %w", to, from, err)
	}
	haveOld, err := tableExists(ctx, a.conn, a.s.Schema, oldName)
	if err != nil {
		return fmt.Errorf("stream %s was renamed from %s: %w", to, from, err)
	}
	if haveNew || !haveOld {
		return nil
	}
	move := func(oldT, newT string) error {
		if err := a.exec(ctx, "ALTER TABLE "+a.qualify(oldT)+" RENAME TO "+ducksql.Ident(newT)); err != nil {
			return fmt.Errorf("stream %s was renamed to %s at the source: rename table %s to %s: %w", from, to, a.qualify(oldT), newT, err)
		}
		return nil
	}
	if err := move(oldName, newName); err != nil {
		return err
	}
	oldHist, newHist := oldName+"_history", newName+"_history"
	haveOldHist, err := tableExists(ctx, a.conn, a.s.Schema, oldHist)
	if err != nil {
		return err
	}
	haveNewHist, err := tableExists(ctx, a.conn, a.s.Schema, newHist)
	if err != nil {
		return err
	}
	if haveOldHist && !haveNewHist {
		if err := move(oldHist, newHist); err != nil {
			return err
		}
	}
	if keys, ok := a.open[from]; ok {
		// The key table keeps its name: the record names it.
		if err := a.exec(ctx, "UPDATE "+resnapshotName(a.s)+" SET stream = ? WHERE pipeline = ? AND stream = ?", to, a.pipeline, from); err != nil {
			return fmt.Errorf("stream %s was renamed to %s at the source: move its re-snapshot record: %w", from, to, err)
		}
		delete(a.open, from)
		a.open[to] = keys
	}
	a.renamedAway[from] = true
	delete(a.tables, from)
	delete(a.tables, to)
	a.log.Info("table renamed, as its stream was at the source", "from", a.qualify(oldName), "to", a.qualify(newName), "stream", to)
	return nil
}

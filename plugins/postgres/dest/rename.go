package dest

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
)

// renameTable follows a RENAME TABLE at the source (change.RenamedFromTableMeta): the stream `to` was stream
// `from` before. When the schema has a table for from and none for to, the table is renamed, its history table
// with it, and the pipeline's per-stream state (an open re-snapshot's begin, the stream's last sequence) moves
// to the new name: the rows written before the rename stay, and the changes after it land beside them. When
// the table for to exists already (this apply is a replay, or a later schema still carries the marker), or
// neither exists (nothing was written under the old name), nothing is done and the table is created as for any
// stream. All in the apply's transaction, so the rename commits with the rows and the fence, or not at all.
func (a *applier) renameTable(ctx context.Context, from, to string) error {
	if from == "" || from == to {
		return nil
	}
	cfg := a.cfg
	reg := func(table string) (bool, error) {
		var ok bool
		err := a.tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{cfg.TargetSchema, table}.Sanitize()).Scan(&ok)
		return ok, cfg.Explain(err)
	}
	oldName, newName := TableName(from), TableName(to)
	haveNew, err := reg(newName)
	if err != nil {
		return err
	}
	haveOld, err := reg(oldName)
	if err != nil {
		return err
	}
	if haveNew || !haveOld || oldName == newName {
		return nil
	}
	move := func(oldT, newT string) error {
		q := "ALTER TABLE " + pgx.Identifier{cfg.TargetSchema, oldT}.Sanitize() + " RENAME TO " + pgx.Identifier{newT}.Sanitize()
		if _, err := a.tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("stream %s was renamed to %s at the source: rename table %s to %s: %w", from, to, oldT, newT, cfg.Explain(err))
		}
		return nil
	}
	if err := move(oldName, newName); err != nil {
		return err
	}
	oldHist, newHist := oldName+"_history", newName+"_history"
	if haveOldHist, err := reg(oldHist); err != nil {
		return err
	} else if haveNewHist, err := reg(newHist); err != nil {
		return err
	} else if haveOldHist && !haveNewHist {
		if err := move(oldHist, newHist); err != nil {
			return err
		}
	}
	if haveRS, err := reg(ResnapshotTable); err != nil {
		return err
	} else if haveRS {
		if _, err := a.tx.Exec(ctx, `UPDATE `+pgx.Identifier{cfg.TargetSchema, ResnapshotTable}.Sanitize()+` SET stream = $3 WHERE pipeline = $1 AND stream = $2`, a.pipeline, from, to); err != nil {
			return fmt.Errorf("stream %s was renamed to %s at the source: move its re-snapshot state: %w", from, to, cfg.Explain(err))
		}
	}
	if _, err := a.tx.Exec(ctx, `UPDATE `+stateTable(cfg)+` SET streams = streams - $2::text WHERE pipeline = $1`, a.pipeline, from); err != nil {
		return fmt.Errorf("stream %s was renamed to %s at the source: %w", from, to, cfg.Explain(err))
	}
	delete(a.tables, from)
	a.renamedAway[from] = true
	if a.histSeq != nil && a.histEntry == a.entry {
		// Changes of the entry written under the former name hold the first numbers of its history.
		a.histSeq[to] += a.histSeq[from]
		delete(a.histSeq, from)
	}
	slog.Info("table renamed, as its stream was at the source", "from", pgx.Identifier{cfg.TargetSchema, oldName}.Sanitize(), "to", pgx.Identifier{cfg.TargetSchema, newName}.Sanitize(), "stream", to)
	return nil
}

package dest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// ResnapshotTable records, per pipeline and stream, the transaction that applied a re-snapshot's begin mark.
//
// "Rows received since the begin" needs no state per row: every row an apply writes (an upsert, even of equal
// values) is a new tuple version whose xmin is the apply's transaction, so at the end mark the rows the re-snapshot
// did not send are exactly those whose xmin is older than the begin's transaction. The end deletes them, in the
// apply's transaction, and forgets the begin. The cost is this one row per stream being re-snapshot, and a DELETE
// that scans the table once at the end. Rows left alone for over two billion transactions appear newer than the
// begin (xid wraparound of age()) and are kept, never wrongly deleted.
const ResnapshotTable = "_skippr_resnapshot"

// resnapshotMarks applies the marks of one apply after its rows are written, in their order.
func (a *applier) resnapshotMarks(ctx context.Context, pipeline string, marks []serve.Item) error {
	if len(marks) == 0 {
		return nil
	}
	cfg := a.cfg
	state := pgx.Identifier{cfg.TargetSchema, ResnapshotTable}.Sanitize()
	var have bool
	if err := a.tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, state).Scan(&have); err != nil {
		return cfg.Explain(err)
	}
	if !have {
		if _, err := a.tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+state+` (pipeline text NOT NULL, stream text NOT NULL, begin_xid xid8 NOT NULL, PRIMARY KEY (pipeline, stream))`); err != nil {
			return fmt.Errorf("create %s: %w", state, cfg.Explain(err))
		}
	}
	for _, m := range marks {
		switch m.Resnapshot {
		case serve.ResnapshotBegin:
			// A begin while one is open (a request made again) keeps the older one: it saw more.
			if _, err := a.tx.Exec(ctx, `INSERT INTO `+state+` (pipeline, stream, begin_xid) VALUES ($1, $2, pg_current_xact_id()) ON CONFLICT DO NOTHING`, pipeline, m.Stream); err != nil {
				return fmt.Errorf("re-snapshot of %s begins: %w", m.Stream, cfg.Explain(err))
			}
		case serve.ResnapshotEnd:
			var begin string
			err := a.tx.QueryRow(ctx, `DELETE FROM `+state+` WHERE pipeline = $1 AND stream = $2 RETURNING (begin_xid::text::numeric % 4294967296)::text`, pipeline, m.Stream).Scan(&begin)
			if errors.Is(err, pgx.ErrNoRows) {
				continue // no begin applied here: nothing is known to be stale
			}
			if err != nil {
				return fmt.Errorf("re-snapshot of %s ends: %w", m.Stream, cfg.Explain(err))
			}
			name := pgx.Identifier{cfg.TargetSchema, TableName(m.Stream)}.Sanitize()
			var exists bool
			if err := a.tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil {
				return cfg.Explain(err)
			}
			if !exists {
				continue
			}
			meta, err := cfg.Settings.For(m.Stream)
			if err != nil {
				return err
			}
			q := `DELETE FROM ` + name + ` WHERE age(xmin) > age($1::text::xid)`
			if meta.SoftDelete {
				// The rows the source no longer has are marked deleted, as their deletes would have been.
				a.entry = m.Sequence
				q = `UPDATE ` + name + ` SET ` + a.metaSets(meta, change.OpDelete, "NULL") + ` WHERE age(xmin) > age($1::text::xid) AND NOT ` + pgx.Identifier{rowmeta.Deleted}.Sanitize()
			}
			tag, err := a.tx.Exec(ctx, q, begin)
			if err != nil {
				return fmt.Errorf("re-snapshot of %s ends: remove the rows the source no longer has: %w", m.Stream, cfg.Explain(err))
			}
			slog.Info("re-snapshot applied", "stream", m.Stream, "rows_removed", tag.RowsAffected())
		}
	}
	return nil
}

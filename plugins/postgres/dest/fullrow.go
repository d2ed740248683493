package dest

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// Streams matched by full row (change.FullRow): keyless tables whose deletes carry the whole old row.
//
// The fold (plugin-sdk/change, fullrow.go) leaves deletes that each match a row the table held before the
// entry, and inserts; writeStream removes those deletes first, then inserts the rest like any keyless stream.
// The deletes of one entry and schema are one statement: the images are staged, grouped into (row, count),
// and for each group exactly count of the table's equal rows go, chosen by ctid. Rows are compared by their
// text form, ROW(c1, c2, ...)::text, which
//   - treats NULL as equal to NULL (the composite's text leaves a NULL field empty, and an empty string is "");
//   - is hashable, so the table is scanned once per statement with a hash semi-join, not once per delete (an
//     index cannot help a comparison of every column, and PostgreSQL's own apply of REPLICA IDENTITY FULL
//     scans per row);
//   - works for types without an equality operator (json, point, xml);
//   - compares the values the table holds with the images as the same column types print them in one session,
//     so equal values print alike.
//
// A delete that finds no equal row means the table has drifted from the source (rows changed outside
// skippr): the apply fails with a data fault naming the table, rather than leave a row the source deleted.

// deleteFullRows removes, for each row, exactly one row of the table equal to it in every data column.
func (a *applier) deleteFullRows(ctx context.Context, ts *tableState, rows []row) error {
	if len(rows) == 0 {
		return nil
	}
	if ts.meta.SoftDelete {
		return fault.ConfigErr(fmt.Errorf("table %s: soft_delete is not applied to a keyless table matched by full row (mode: full_row)", ts.name),
			"turn soft_delete off for this destination, or give the source table a key (key_columns) so deleted rows can be flagged")
	}
	type group struct {
		schema *arrow.Schema
		rows   []row
	}
	var groups []*group
	for _, r := range rows {
		s := r.rec.Schema()
		i := 0
		for ; i < len(groups); i++ {
			g := groups[i].schema
			if g == s || (g.Equal(s) && protocol.SchemaID(g) == protocol.SchemaID(s)) {
				break
			}
		}
		if i == len(groups) {
			groups = append(groups, &group{schema: s})
		}
		groups[i].rows = append(groups[i].rows, r)
	}
	for _, g := range groups {
		if err := a.deleteFullRowGroup(ctx, ts, g.schema, g.rows); err != nil {
			return err
		}
	}
	return nil
}

func (a *applier) deleteFullRowGroup(ctx context.Context, ts *tableState, s *arrow.Schema, rows []row) error {
	var cols []string
	for _, f := range change.DataFields(s) {
		// _skippr_meta also holds what this destination replaced (NUL characters): not part of the image.
		if f.Name != change.MetaColumn {
			cols = append(cols, f.Name)
		}
	}
	stage, err := a.stage(ctx, ts, s, cols, rows)
	if err != nil {
		return err
	}
	image := "ROW(" + quoteAll(cols) + ")::text"
	sql := `WITH img AS (SELECT ` + image + ` AS r, count(*) AS n FROM ` + stage + ` GROUP BY 1),
	cand AS (SELECT ctid AS id, ` + image + ` AS r FROM ` + ts.name + ` WHERE ` + image + ` IN (SELECT r FROM img)),
	ranked AS (SELECT id, r, row_number() OVER (PARTITION BY r ORDER BY id) AS k FROM cand)
	DELETE FROM ` + ts.name + ` WHERE ctid IN (SELECT ranked.id FROM ranked JOIN img ON img.r = ranked.r WHERE ranked.k <= img.n)`
	tag, err := a.tx.Exec(ctx, sql)
	if err != nil {
		return fmt.Errorf("delete %d rows matched by full row from %s: %w", len(rows), ts.name, a.cfg.Explain(err))
	}
	if n := tag.RowsAffected(); n != int64(len(rows)) {
		return fault.DataErr(fmt.Errorf("table %s: %d deletes of whole rows found only %d equal rows: the table no longer holds rows the source deleted (changed outside skippr?)", ts.name, len(rows), n),
			fmt.Sprintf("re-snapshot the table (`skippr resnapshot PIPELINE STREAM`), or restore the missing rows of %s and run again", ts.name))
	}
	return nil
}

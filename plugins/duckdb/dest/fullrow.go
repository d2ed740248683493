package dest

import (
	"context"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

// Streams matched by full row (change.FullRow): keyless tables whose deletes carry the whole old row.
//
// The fold (plugin-sdk/change, fullrow.go) leaves deletes that each match a row the table held before the
// entry, and inserts; writeStreamRows removes those deletes first, then inserts the rest like any keyless
// stream. The deletes of one entry and schema are one statement: the images are staged, grouped into (row,
// count), joined to the table column by column with IS NOT DISTINCT FROM (NULL matches NULL), and for each
// group exactly count equal rows go, chosen by rowid. A delete that finds no equal row means the table has
// drifted from the source: the apply fails with a data fault naming the table.

// deleteFullRows removes, for each row, exactly one row of the stream's table equal to it in every data column.
func (a *applier) deleteFullRows(ctx context.Context, stream string, rows []row) error {
	if len(rows) == 0 {
		return nil
	}
	name := a.tableName(stream)
	if a.s.Meta(stream).SoftDelete {
		return fault.ConfigErr(fmt.Errorf("table %s: soft_delete is not applied to a keyless table matched by full row (mode: full_row)", name),
			"turn soft_delete off for this destination, or give the source table a key (key_columns) so deleted rows can be flagged")
	}
	var groups [][]row
	for _, r := range rows {
		i := 0
		for ; i < len(groups) && !change.SameSchema(groups[i][0].rec.Schema(), r.rec.Schema()); i++ {
		}
		if i == len(groups) {
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], r)
	}
	for _, g := range groups {
		if err := a.deleteFullRowGroup(ctx, name, g[0].rec.Schema(), g); err != nil {
			return err
		}
	}
	return nil
}

func (a *applier) deleteFullRowGroup(ctx context.Context, name string, s *arrow.Schema, rows []row) error {
	if err := a.stage(ctx, s, rows); err != nil {
		return err
	}
	var cols, on []string
	for _, f := range change.DataFields(s) {
		// _skippr_meta also holds what a destination replaced: not part of the image.
		if f.Name == change.MetaColumn {
			continue
		}
		c := ducksql.Ident(f.Name)
		cols = append(cols, c)
		on = append(on, "t."+c+" IS NOT DISTINCT FROM i."+c)
	}
	tcols := make([]string, len(cols))
	for i, c := range cols {
		tcols[i] = "t." + c
	}
	q := "DELETE FROM " + name + " WHERE rowid IN (SELECT id FROM (" +
		"SELECT t.rowid AS id, i._skippr_n AS n, row_number() OVER (PARTITION BY " + strings.Join(tcols, ", ") + " ORDER BY t.rowid) AS k" +
		" FROM " + name + " AS t JOIN (SELECT " + strings.Join(cols, ", ") + ", count(*) AS _skippr_n FROM temp.main." + stageTable + " GROUP BY ALL) AS i" +
		" ON " + strings.Join(on, " AND ") + ") WHERE k <= n)"
	res, err := a.conn.ExecContext(ctx, q)
	if err != nil {
		return fmt.Errorf("delete %d rows matched by full row from %s: %w", len(rows), name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("delete %d rows matched by full row from %s: %w", len(rows), name, err)
	}
	if n != int64(len(rows)) {
		return fault.DataErr(fmt.Errorf("table %s: %d deletes of whole rows found only %d equal rows: the table no longer holds rows the source deleted (changed outside skippr?)", name, len(rows), n),
			fmt.Sprintf("re-snapshot the table (`skippr resnapshot PIPELINE STREAM`), or restore the missing rows of %s and run again", name))
	}
	return nil
}

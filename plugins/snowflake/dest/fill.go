package dest

import (
	"context"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/snowflake/sfsql"
)

// Rows that existed before a column was added hold, at the source, the value it was added with
// (values.MetaExistingRows: PostgreSQL's ADD COLUMN … DEFAULT fills them without logging a change). The
// destination gives its own existing rows that value, but only when it adds the column itself: the metadata
// stays on the field for as long as the source keeps it, and a row later set to NULL must stay NULL.
//
// The ADD COLUMN commits at once (Snowflake DDL), the apply's rows and fence later, in one transaction; a
// process dying in between would leave the column added and never filled, and the replay would not add it
// again. So the fill is recorded first, in sfsql.FillTable (committed before the ALTER), and done in the apply's
// transaction, which deletes the record with the fence: a replay after any crash finds either no column (and
// adds it, recording again) or the record (and fills). UPDATE … WHERE c IS NULL runs before any row of the
// range carries the column, so it reaches only rows that existed before the ADD COLUMN at the source: rows of
// the range written in the older shape too, as at the source. Snowflake's own ADD COLUMN … DEFAULT is not
// used: a default added by ALTER TABLE cannot be dropped again (docs.snowflake.com/en/sql-reference/sql/
// alter-table-column: DROP DEFAULT "not allowed if the column and default were defined by an ALTER TABLE
// command"), and it would keep filling later inserts that leave the column out.

// fill is a recorded fill: the column of table to give value where it is NULL.
type fill struct {
	table, column, value string
}

// existingValues maps the Snowflake names of the data fields of s that carry a value for existing rows to it.
func existingValues(s *arrow.Schema) map[string]string {
	var out map[string]string
	for _, f := range change.DataFields(s) {
		if v, ok := f.Metadata.GetValue(values.MetaExistingRows); ok {
			if out == nil {
				out = map[string]string{}
			}
			out[sfsql.Name(f.Name)] = v
		}
	}
	return out
}

// recordFill records, before the column is added, that its existing rows get value. A value Snowflake cannot
// read as the column's type (or any value of a semi-structured column, whose text at the source is no JSON)
// is logged and not recorded: the rows keep NULL, which failing would not change at any retry.
func (x *conn) recordFill(ctx context.Context, pipeline string, t sfsql.Table, c sfsql.Column, value string) (bool, error) {
	ok := !c.Type.Nested()
	if ok {
		rows, err := x.query(ctx, sfsql.TryCast(c.Type), value)
		if err != nil {
			return false, explain(x.s, fmt.Sprintf("check the value of the existing rows of column %s of %s", c.Name, t), err)
		}
		for rows.Next() {
			if err := rows.Scan(&ok); err != nil {
				rows.Close()
				return false, fmt.Errorf("check the value of the existing rows of column %s of %s: %w", c.Name, t, err)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return false, fmt.Errorf("check the value of the existing rows of column %s of %s: %w", c.Name, t, err)
		}
	}
	if !ok {
		x.d.log().Warn("adding a column; its existing rows hold a value at the source that Snowflake does not read as the column's type, so they hold NULL here",
			"table", t.String(), "column", c.Name, "type", c.Type.DDL(), "value", value)
		return false, nil
	}
	db, sc := sfsql.Name(x.s.Database), sfsql.Name(x.s.Schema)
	// Delete first: a process that died after recording and before the ALTER left the row behind.
	if err := x.exec(ctx, sfsql.DeleteFill(db, sc), pipeline, t.Name, c.Name); err != nil {
		return false, explain(x.s, "record the fill of column "+c.Name+" of "+t.String(), err)
	}
	if err := x.exec(ctx, sfsql.InsertFill(db, sc), pipeline, t.Name, c.Name, value); err != nil {
		return false, explain(x.s, "record the fill of column "+c.Name+" of "+t.String(), err)
	}
	x.d.fills[pipeline] = append(slices.DeleteFunc(x.d.fills[pipeline], func(f fill) bool { return f.table == t.Name && f.column == c.Name }),
		fill{table: t.Name, column: c.Name, value: value})
	return true, nil
}

// readFills reads the pipeline's recorded fills.
func (x *conn) readFills(ctx context.Context, pipeline string) ([]fill, error) {
	rows, err := x.query(ctx, sfsql.ReadFills(sfsql.Name(x.s.Database), sfsql.Name(x.s.Schema)), pipeline)
	if err != nil {
		return nil, explain(x.s, "read "+sfsql.FillTable, err)
	}
	defer rows.Close()
	var out []fill
	for rows.Next() {
		var f fill
		if err := rows.Scan(&f.table, &f.column, &f.value); err != nil {
			return nil, fmt.Errorf("read %s: %w", sfsql.FillTable, err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", sfsql.FillTable, err)
	}
	return out, nil
}

// fills are the recorded fills an apply does in its transaction.
type fills struct {
	x        *conn
	pipeline string
	pending  []fill
}

// before does, in the transaction, the fills of table t whose column the columns cols (a load's) carry: the
// rows merged so far are the ones that existed before the column was added.
func (f *fills) before(ctx context.Context, t sfsql.Table, cols []sfsql.Column) error {
	for i := 0; i < len(f.pending); i++ {
		p := f.pending[i]
		if p.table != t.Name {
			continue
		}
		for _, c := range cols {
			if c.Name == p.column {
				if err := f.do(ctx, t, p); err != nil {
					return err
				}
				f.pending = append(f.pending[:i], f.pending[i+1:]...)
				i--
				break
			}
		}
	}
	return nil
}

// rest does, in the transaction, the fills no load of the range came before (the range added the column but
// wrote no row with it).
func (f *fills) rest(ctx context.Context) error {
	for _, p := range f.pending {
		if err := f.do(ctx, f.x.table(p.table), p); err != nil {
			return err
		}
	}
	f.pending = nil
	return nil
}

func (f *fills) do(ctx context.Context, t sfsql.Table, p fill) error {
	x := f.x
	cols, err := x.columns(ctx, t)
	if err != nil {
		return err
	}
	if typ, ok := cols[p.column]; ok {
		if err := x.exec(ctx, sfsql.Fill(t, sfsql.Column{Name: p.column, Type: typ}), p.value); err != nil {
			return explain(x.s, fmt.Sprintf("give the existing rows of %s the value %q of the added column %s", t, p.value, p.column), err)
		}
		x.d.log().Info("added a column; existing rows hold the value they hold at the source", "table", t.String(), "column", p.column, "value", p.value)
	} else {
		// Dropped or renamed outside skippr since it was added: nothing to fill, and nothing to keep.
		x.d.log().Warn("a column added with a value for its existing rows is gone from the table; its existing rows were not filled",
			"table", t.String(), "column", p.column, "value", p.value)
	}
	if err := x.exec(ctx, sfsql.DeleteFill(sfsql.Name(x.s.Database), sfsql.Name(x.s.Schema)), f.pipeline, p.table, p.column); err != nil {
		return explain(x.s, "delete the fill of column "+p.column+" of "+t.String(), err)
	}
	return nil
}

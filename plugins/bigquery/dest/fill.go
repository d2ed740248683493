package dest

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"cloud.google.com/go/bigquery"
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/bigquery/gsql"
)

// Rows that existed before a column was added hold, at the source, the value it was added with
// (values.MetaExistingRows: PostgreSQL's ADD COLUMN … DEFAULT fills them without logging a change). The
// destination gives its own existing rows that value, but only when it adds the column itself: the metadata
// stays on the field for as long as the source keeps it, and a row later set to NULL must stay NULL.
//
// The column is added by a table patch, which takes effect at once; a multi-statement transaction takes
// queries and DML only, so the patch cannot share the apply's transaction, and a process dying between the
// two would leave the column added and never filled (the replay finds the column and adds nothing). So the
// fill is recorded first, in the pipeline's gsql.FillTable, and done in the apply's transaction, which
// deletes the record with the state rows: a replay after any crash finds either no column (and adds it,
// recording again) or the record (and fills). The UPDATE … WHERE c IS NULL runs before the first MERGE that
// writes the column, so it reaches only rows that existed before the ADD COLUMN at the source (rows of the
// range in the older shape too, as at the source). BigQuery's column DEFAULT is not used: "when you add a row
// to a table that doesn't contain data for a column with a default value, the default value is written"
// (docs.cloud.google.com/bigquery/docs/default-values) — it is about rows written later, not the rows there.

// fill is a recorded fill: the column of table to give value where it is NULL.
type fill struct {
	table, column, value string
}

// readFills reads the pipeline's recorded fills; a pipeline that never recorded one has no fill table.
func (c *conn) readFills(ctx context.Context, pipeline string) ([]fill, error) {
	name := gsql.FillTable(pipeline)
	if _, err := c.dataset().Table(name).Metadata(ctx); isNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, classify(fmt.Errorf("fill table %s: %w", c.table(name), err), c.s)
	}
	rows, err := c.query(ctx, gsql.ReadFills(c.table(name)), map[string]any{"pipeline": pipeline})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", c.table(name), err)
	}
	var out []fill
	for _, r := range rows {
		if len(r) != 3 {
			return nil, fmt.Errorf("read %s: %d columns, want 3", c.table(name), len(r))
		}
		out = append(out, fill{table: fmt.Sprint(r[0]), column: fmt.Sprint(r[1]), value: fmt.Sprint(r[2])})
	}
	return out, nil
}

// loadFills reads the pipeline's fills once per process (and again after a failed apply): one process
// applies a pipeline at a time, and it records every later fill itself.
func (c *conn) loadFills(ctx context.Context, pipeline string) error {
	if c.fillsRead[pipeline] {
		return nil
	}
	list, err := c.readFills(ctx, pipeline)
	if err != nil {
		return err
	}
	if c.fills == nil {
		c.fills, c.fillsRead, c.intents = map[string][]fill{}, map[string]bool{}, map[string]map[string]string{}
	}
	list, intents := splitRenames(list) // a rename's intent is a row of the fill table (tablerename.go)
	c.fills[pipeline], c.intents[pipeline], c.fillsRead[pipeline] = list, intents, true
	return nil
}

// castType is the GoogleSQL type a column's value for existing rows is cast to; "" for a column that takes
// no cast from text (repeated, STRUCT, JSON, …).
func castType(f *bigquery.FieldSchema) string {
	if f.Repeated {
		return ""
	}
	// The REST API answers with the legacy names (INTEGER, FLOAT, BOOLEAN); the plugin writes GoogleSQL's.
	switch t := strings.ToUpper(string(f.Type)); t {
	case "INTEGER", "INT64":
		return "INT64"
	case "FLOAT", "FLOAT64":
		return "FLOAT64"
	case "BOOLEAN", "BOOL":
		return "BOOL"
	case "NUMERIC", "BIGNUMERIC", "STRING", "BYTES", "DATE", "TIME", "DATETIME", "TIMESTAMP":
		return t
	}
	return ""
}

// recordFills records, before the table patch adds them, the fills of the added columns whose fields carry
// a value for existing rows. A value BigQuery cannot read as the column's type is logged and not recorded:
// the rows keep NULL, which failing would not change at any retry.
func (a *applier) recordFills(ctx context.Context, table string, fields []arrow.Field, added bigquery.Schema) error {
	c, pipeline := a.c, a.req.Pipeline
	for _, col := range added {
		i := slices.IndexFunc(fields, func(f arrow.Field) bool { return strings.EqualFold(f.Name, col.Name) })
		if i < 0 {
			continue
		}
		value, ok := fields[i].Metadata.GetValue(values.MetaExistingRows)
		if !ok {
			continue
		}
		typ := castType(col)
		if typ != "" {
			rows, err := c.query(ctx, gsql.CanCast(typ), map[string]any{"value": value})
			a.st.RoundTrips += 3
			if err != nil {
				return fmt.Errorf("check the value of the existing rows of column %s of %s: %w", col.Name, c.table(table), err)
			}
			if len(rows) != 1 || len(rows[0]) != 1 || rows[0][0] != true {
				typ = ""
			}
		}
		if typ == "" {
			a.log.Warn("adding a column; its existing rows hold a value at the source that BigQuery does not read as the column's type, so they hold NULL here",
				"table", c.table(table).String(), "column", col.Name, "type", string(col.Type), "value", value)
			continue
		}
		if err := c.ensureFillTable(ctx, pipeline); err != nil {
			return err
		}
		name := gsql.FillTable(pipeline)
		_, err := c.query(ctx, gsql.RecordFill(c.table(name)), map[string]any{"pipeline": pipeline, "tbl": table, "col": col.Name, "value": []string{value}})
		a.st.RoundTrips += 3
		if err != nil {
			return fmt.Errorf("record the fill of column %s of %s in %s: %w", col.Name, c.table(table), c.table(name), err)
		}
		c.fills[pipeline] = append(slices.DeleteFunc(c.fills[pipeline], func(f fill) bool { return f.table == table && f.column == col.Name }),
			fill{table: table, column: col.Name, value: value})
	}
	return nil
}

// ensureFillTable creates the pipeline's fill table when it records its first fill.
func (c *conn) ensureFillTable(ctx context.Context, pipeline string) error {
	name := gsql.FillTable(pipeline)
	if c.stateReady[name] {
		return nil
	}
	t := c.dataset().Table(name)
	_, err := t.Metadata(ctx)
	if isNotFound(err) {
		err = t.Create(ctx, &bigquery.TableMetadata{
			Description: "skippr: columns added to tables of pipeline " + pipeline + " whose existing rows still wait for the value they hold at the source",
			Schema: bigquery.Schema{
				{Name: "pipeline", Type: bigquery.StringFieldType, Required: true},
				{Name: "tbl", Type: bigquery.StringFieldType, Required: true},
				{Name: "col", Type: bigquery.StringFieldType, Required: true},
				{Name: "value", Type: bigquery.StringFieldType, Required: true},
			},
		})
		if isConflict(err) {
			err = nil
		}
	}
	if err != nil {
		return classify(fmt.Errorf("fill table %s: %w", c.table(name), err), c.s)
	}
	c.stateReady[name] = true
	return nil
}

// groupFills adds the fills of one transaction to its statements and parameters: each before the first
// MERGE into its table that writes its column, the others of the group's tables after their statements, and
// on the last transaction every fill left. done lists the fills the transaction does.
type groupFills struct {
	a       *applier
	pending []fill
	params  map[string]any
	done    []fill
}

func (g *groupFills) add(stmts []string, f fill) []string {
	c := g.a.c
	param := fmt.Sprintf("fill_%d", len(g.done))
	typ := ""
	for _, col := range c.tables[f.table] {
		if strings.EqualFold(col.Name, f.column) {
			typ = castType(col)
		}
	}
	if typ == "" {
		// Gone from the table (dropped or renamed outside skippr) since it was added: nothing to fill.
		g.a.log.Warn("a column added with a value for its existing rows is gone from the table; its existing rows were not filled",
			"table", c.table(f.table).String(), "column", f.column, "value", f.value)
	} else {
		stmts = append(stmts, gsql.Fill(c.table(f.table), f.column, typ, param))
		g.params[param+"_value"] = f.value
	}
	stmts = append(stmts, gsql.DropFill(c.table(gsql.FillTable(g.a.req.Pipeline)), param))
	g.params[param+"_tbl"], g.params[param+"_col"] = f.table, f.column
	g.done = append(g.done, f)
	return stmts
}

// before adds the fills of table whose column cols (a MERGE's) write.
func (g *groupFills) before(stmts []string, table string, cols []string) []string {
	return g.take(stmts, func(f fill) bool {
		return f.table == table && slices.ContainsFunc(cols, func(c string) bool { return strings.EqualFold(c, f.column) })
	})
}

// take adds the pending fills match selects.
func (g *groupFills) take(stmts []string, match func(fill) bool) []string {
	kept := g.pending[:0]
	for _, f := range g.pending {
		if match(f) {
			stmts = g.add(stmts, f)
		} else {
			kept = append(kept, f)
		}
	}
	g.pending = kept
	return stmts
}

// knowTables reads the schemas of the tables of pending fills this apply has not read (the column types
// the fills cast to).
func (a *applier) knowTables(ctx context.Context, pending []fill) error {
	c := a.c
	for _, f := range pending {
		if _, ok := c.tables[f.table]; ok {
			continue
		}
		md, err := c.dataset().Table(f.table).Metadata(ctx)
		a.st.RoundTrips++
		switch {
		case isNotFound(err):
			c.tables[f.table] = bigquery.Schema{}
		case err != nil:
			return classify(fmt.Errorf("table %s: %w", c.table(f.table), err), c.s)
		default:
			c.tables[f.table] = md.Schema
		}
	}
	return nil
}

package dest

import (
	"context"
	"fmt"
	"slices"

	"github.com/skippr-dev/skippr/plugins/snowflake/sfsql"
)

// A renamed stream (RENAME TABLE a TO b at the source) arrives as stream b whose schema carries
// change.RenamedFromTableMeta = a. At b's first item of an apply, when b's table does not exist and a's does, the
// destination renames a's table to b's (ALTER TABLE … RENAME TO), its history table first, and moves a's
// pending fills (fill.go) to b's table; the rows of a that the apply staged earlier (before the rename at the
// source) are staged again for b's table and merged there. a's state row goes in the apply's transaction. When
// b's table exists already (a replay after the rename) nothing is renamed; when neither exists, b's table is
// created as usual.
//
// The rename is DDL, which Snowflake commits at once, apart from the apply's transaction; a crash may come
// between. The replay finds b's table and renames nothing, and the fence says nothing of the range committed.
// But the replayed range starts with a's items before the rename, which name a's table: staging them (which
// creates the table first) would make a's table anew and merge its rows there. So, before renaming, the apply
// records the intent in sfsql.FillTable, as a row with an empty COLUMN_NAME (TABLE_NAME: a's table, VALUE: stream
// b), committed at once, and deletes it in the transaction that commits the range: a replay that finds the
// intent, a's table gone and b's there, sends a's items to stream b until b's first item. The order of the DDL
// makes each crash point safe: the intent, then the fills (a crash after moves nothing twice: a replay finds
// them moved), then the history (the table still has its old name, so the replay renames), then the table.

// renames is what an apply knows of renamed streams.
type renames struct {
	// intents: former table → the stream renamed to, recorded (sfsql.FillTable) and not yet committed over.
	intents map[string]string
	// redirect: items of the stream whose table is the key go to the stream it maps to (a replay whose rename
	// is done), until that stream's first item of the apply.
	redirect map[string]string
	// hist: a former history table (missing) → the renamed one (there), for a replay after a crash between
	// the history's rename and the table's: the table has its old name, its history the new.
	hist map[string]string
	seen map[string]bool // streams whose first item of the apply was looked at
	// done: former tables whose rename the apply did or followed; their intents go in its transaction. An
	// intent whose marker lies beyond the range (a replay cut shorter) stays for the apply that reaches it.
	done map[string]bool
	// gone: renamed streams without an item after their rename in this apply; their state rows go.
	gone map[string]bool
}

// splitRenames takes the rename intents (an empty column name) out of the pipeline's recorded fills.
func splitRenames(list []fill) (fills []fill, intents map[string]string) {
	intents = map[string]string{}
	for _, f := range list {
		if f.column == "" {
			intents[f.table] = f.value
			continue
		}
		fills = append(fills, f)
	}
	return fills, intents
}

// loadRenames reads which recorded renames are done: their items go to the renamed table.
func (x *conn) loadRenames(ctx context.Context, intents map[string]string) (*renames, error) {
	if intents == nil {
		intents = map[string]string{}
	}
	rn := &renames{intents: intents, redirect: map[string]string{}, hist: map[string]string{}, seen: map[string]bool{}, done: map[string]bool{}, gone: map[string]bool{}}
	for old, stream := range intents {
		o, n := x.table(old), x.table(TableName(stream))
		moved, err := x.moved(ctx, o, n)
		if err != nil {
			return nil, err
		}
		if moved {
			rn.redirect[old] = stream
		}
		oh, nh := historyTable(o), historyTable(n)
		if moved, err = x.moved(ctx, oh, nh); err != nil {
			return nil, err
		}
		if moved {
			rn.hist[oh.Name] = nh.Name
		}
	}
	return rn, nil
}

// moved says table old is gone and table nw is there.
func (x *conn) moved(ctx context.Context, old, nw sfsql.Table) (bool, error) {
	oldCols, err := x.columns(ctx, old)
	if err != nil || oldCols != nil {
		return false, err
	}
	newCols, err := x.columns(ctx, nw)
	return newCols != nil, err
}

// history is the history table of table t: historyTable, or where a replayed rename moved it.
func (rn *renames) history(x *conn, t sfsql.Table) sfsql.Table {
	h := historyTable(t)
	if n, ok := rn.hist[h.Name]; ok {
		return x.table(n)
	}
	return h
}

// renameTable renames the table of stream from to the table of stream to when the latter does not exist.
// moved: the former table is gone (renamed now or before), so what the apply staged for it belongs to the new.
func (x *conn) renameTable(ctx context.Context, pipeline string, rn *renames, from, to string) (moved bool, err error) {
	old, nw := x.table(TableName(from)), x.table(TableName(to))
	if old == nw {
		return false, nil
	}
	// From here on, items of stream from are of a new table of that name (the source may create it again).
	delete(rn.redirect, old.Name)
	delete(rn.hist, historyTable(old).Name)
	rn.done[old.Name] = true
	oldCols, err := x.columns(ctx, old)
	if err != nil {
		return false, err
	}
	newCols, err := x.columns(ctx, nw)
	if err != nil {
		return false, err
	}
	switch {
	case oldCols != nil && newCols != nil:
		// Both exist: the source made a table of the old name again after the rename, or the tables are not
		// skippr's to move. Nothing is renamed; each stream writes its own table.
		x.d.log().Info("stream renamed, but both tables exist; nothing renamed", "from", old.String(), "to", nw.String())
		return false, nil
	case oldCols == nil && newCols == nil:
		return false, nil // nothing to rename: b's table is created from its schema
	}
	rn.gone[from] = true
	if oldCols == nil {
		return true, nil // renamed before (a replay)
	}
	db, sc := sfsql.Name(x.s.Database), sfsql.Name(x.s.Schema)
	if err := x.exec(ctx, sfsql.DeleteFill(db, sc), pipeline, old.Name, ""); err != nil {
		return false, explain(x.s, "record the rename of "+old.String(), err)
	}
	if err := x.exec(ctx, sfsql.InsertFill(db, sc), pipeline, old.Name, "", to); err != nil {
		return false, explain(x.s, "record the rename of "+old.String(), err)
	}
	rn.intents[old.Name] = to
	// The table's pending fills follow it: the new row first, so that no crash point loses one.
	for i, f := range x.d.fills[pipeline] {
		if f.table != old.Name {
			continue
		}
		if err := x.exec(ctx, sfsql.DeleteFill(db, sc), pipeline, nw.Name, f.column); err != nil {
			return false, explain(x.s, "move the fill of column "+f.column+" to "+nw.String(), err)
		}
		if err := x.exec(ctx, sfsql.InsertFill(db, sc), pipeline, nw.Name, f.column, f.value); err != nil {
			return false, explain(x.s, "move the fill of column "+f.column+" to "+nw.String(), err)
		}
		if err := x.exec(ctx, sfsql.DeleteFill(db, sc), pipeline, old.Name, f.column); err != nil {
			return false, explain(x.s, "move the fill of column "+f.column+" to "+nw.String(), err)
		}
		x.d.fills[pipeline][i].table = nw.Name
	}
	oh, nh := historyTable(old), historyTable(nw)
	ohCols, err := x.columns(ctx, oh)
	if err != nil {
		return false, err
	}
	nhCols, err := x.columns(ctx, nh)
	if err != nil {
		return false, err
	}
	pairs := [][2]sfsql.Table{{old, nw}}
	if ohCols != nil && nhCols == nil {
		pairs = [][2]sfsql.Table{{oh, nh}, {old, nw}}
	}
	for _, p := range pairs {
		err := x.exec(ctx, sfsql.RenameTable(p[0], p[1].Name))
		delete(x.d.tables, p[0].String())
		delete(x.d.tables, p[1].String())
		if err != nil {
			return false, explain(x.s, fmt.Sprintf("rename table %s to %s", p[0], p[1]), err)
		}
		x.d.log().Info("renamed a table as the source renamed its stream", "from", p[0].String(), "to", p[1].String(), "stream", to, "was", from)
		if x.d.afterRename != nil {
			if err := x.d.afterRename(p[1].Name); err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

// restage points the loads earlier chunks staged for table old (and its history) at table nw: each file is
// PUT again to nw's stage (the local files live until the apply ends), so the COPY in the transaction reads it
// from the renamed table's stage whether or not Snowflake kept the old table stage's files with the table.
func (x *conn) restage(ctx context.Context, chunks [][]*streamPlan, old, nw sfsql.Table, stream string) error {
	oh, nh := historyTable(old), historyTable(nw)
	for _, plans := range chunks {
		for _, sp := range plans {
			if sp.table != old {
				continue
			}
			sp.table, sp.Stream = nw, stream
			if sp.histTable == oh {
				sp.histTable = nh
			}
			for _, l := range slices.Concat(sp.loads, sp.hist) {
				switch l.into {
				case old:
					l.into = nw
				case oh:
					l.into = nh
				default:
					continue
				}
				if err := x.exec(ctx, sfsql.Put(l.file, l.into)); err != nil {
					return explain(x.s, "put "+l.file+" to "+l.into.Stage(), err)
				}
			}
		}
	}
	return nil
}

package dest

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/bigquery/gsql"
)

// A renamed stream (RENAME TABLE a TO b at the source) arrives as stream b whose schema carries
// change.RenamedFromTableMeta = a. At b's first item of an apply, when b's table does not exist and a's does, the
// destination renames a's table to b's (ALTER TABLE … RENAME TO), its history table first, and moves a's pending
// fills (fill.go) to b's table; what the apply staged for a earlier in the range (its rows before the rename)
// is merged into b's table, and a's state row is deleted in the transaction. When b's table exists already (a
// replay after the rename) nothing is renamed; when neither exists, b's table is created as usual.
//
// A multi-statement transaction takes queries and DML only ("Statements supported in transactions": DDL on a
// permanent table is not among them), so the rename runs before the transaction, as its own job, and a crash
// may come between. The replay finds b's table and renames nothing, and the fence says nothing of the range
// committed. But the replayed range starts with a's items before the rename, which name a's table: the apply
// would create a's table anew (ensureTable) and merge them there. So, before renaming, the intent is recorded
// in the pipeline's fill table as a row with an empty column (tbl: a's table, value: stream b), and deleted in
// the transaction that commits the range: a replay that finds the intent, a's table gone and b's there, sends
// a's items to stream b until b's first item. The order of the jobs makes each crash point safe: the intent,
// then the fills (each recorded for b's table before it is dropped for a's), the history (the table keeps its
// old name, so the replay renames), the table.

// renames is what an apply knows of renamed streams.
type renames struct {
	// intents: former table → the stream renamed to, recorded and not yet committed over.
	intents map[string]string
	// redirect: items of the stream whose table is the key go to the stream it maps to (a replay whose rename
	// is done), until that stream's first item of the apply.
	redirect map[string]string
	// hist: a former history table (missing) → the renamed one (there): a replay after a crash between the
	// history's rename and the table's.
	hist map[string]string
	seen map[string]bool // streams whose first item of the apply was looked at
	// done: former tables whose rename the apply did or followed; their intents go in its last transaction. An
	// intent whose marker lies beyond the range (a replay cut shorter) stays for the apply that reaches it.
	done map[string]bool
	// gone: streams renamed in this apply; their state rows go in its last transaction.
	gone map[string]bool
}

// splitRenames takes the rename intents (an empty column) out of the pipeline's recorded fills.
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

// exists says whether the dataset has the table.
func (a *applier) exists(ctx context.Context, name string) (bool, error) {
	if s, ok := a.c.tables[name]; ok && len(s) > 0 {
		return true, nil
	}
	_, err := a.c.dataset().Table(name).Metadata(ctx)
	a.st.RoundTrips++
	if isNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, classify(fmt.Errorf("table %s: %w", a.c.table(name), err), a.c.s)
	}
	return true, nil
}

// moved says table old is gone and table nw is there.
func (a *applier) moved(ctx context.Context, old, nw string) (bool, error) {
	there, err := a.exists(ctx, old)
	if err != nil || there {
		return false, err
	}
	return a.exists(ctx, nw)
}

// loadRenames reads which of the pipeline's recorded renames are done: their items go to the renamed table.
func (a *applier) loadRenames(ctx context.Context) error {
	rn := &renames{intents: map[string]string{}, redirect: map[string]string{}, hist: map[string]string{},
		seen: map[string]bool{}, done: map[string]bool{}, gone: map[string]bool{}}
	a.renames = rn
	for old, stream := range a.c.intents[a.req.Pipeline] {
		rn.intents[old] = stream
		nw := TableName(stream)
		ok, err := a.moved(ctx, old, nw)
		if err != nil {
			return err
		}
		if ok {
			rn.redirect[old] = stream
		}
		if ok, err = a.moved(ctx, gsql.HistoryTable(old), gsql.HistoryTable(nw)); err != nil {
			return err
		}
		if ok {
			rn.hist[gsql.HistoryTable(old)] = gsql.HistoryTable(nw)
		}
	}
	return nil
}

// history is the history table of table t: gsql.HistoryTable, or where a replayed rename moved it.
func (rn *renames) history(t string) string {
	h := gsql.HistoryTable(t)
	if n, ok := rn.hist[h]; ok {
		return n
	}
	return h
}

// followRename looks at the stream's first item of the apply for a table rename, and sends the item to the
// renamed stream when it belongs to a stream whose table a replayed rename moved.
func (a *applier) followRename(ctx context.Context, it *serve.Item) error {
	rn := a.renames
	if !rn.seen[it.Stream] {
		rn.seen[it.Stream] = true
		if from := it.RenamedFromTable(); from != "" && from != it.Stream {
			if err := a.renameTable(ctx, from, it.Stream); err != nil {
				return fmt.Errorf("stream %s renamed from %s: %w", it.Stream, from, err)
			}
		}
	}
	if to, ok := rn.redirect[TableName(it.Stream)]; ok && to != it.Stream {
		it.Stream = to
	}
	return nil
}

// renameTable renames the table of stream from to the table of stream to when the latter does not exist, and
// points what the apply holds for the former stream at it.
func (a *applier) renameTable(ctx context.Context, from, to string) error {
	c, rn := a.c, a.renames
	old, nw := TableName(from), TableName(to)
	if old == nw {
		return nil
	}
	// From here on, items of stream from are of a new table of that name (the source may create it again).
	delete(rn.redirect, old)
	delete(rn.hist, gsql.HistoryTable(old))
	rn.done[old] = true
	oldThere, err := a.exists(ctx, old)
	if err != nil {
		return err
	}
	newThere, err := a.exists(ctx, nw)
	if err != nil {
		return err
	}
	switch {
	case oldThere && newThere:
		// Both exist: the source made a table of the old name again after the rename, or the tables are not
		// skippr's to move. Nothing is renamed; each stream writes its own table.
		a.log.Warn("stream renamed, but both tables exist; nothing renamed", "from", c.table(old).String(), "to", c.table(nw).String())
		return nil
	case !oldThere && !newThere:
		return nil // nothing to rename: b's table is created from its schema
	}
	rn.gone[from] = true
	if oldThere {
		if err := a.renameTables(ctx, from, to, old, nw); err != nil {
			return err
		}
	}
	// What the apply holds for the former stream (its rows before the rename, this entry's and staged ones)
	// goes to the renamed table; the stream's state is dropped at the end of the entry (endEntry).
	if ss := a.byName[from]; ss != nil && ss.table == old {
		ss.table, ss.hist, ss.renamed = nw, rn.history(nw), true
		// The tables the former stream wrote are the renamed stream's now.
		maps.DeleteFunc(a.tables, func(_, s string) bool { return s == from })
	}
	return nil
}

// renameTables records the intent, moves the fills, and renames the history table (when there is one and the
// new name is free) and the table.
func (a *applier) renameTables(ctx context.Context, from, to, old, nw string) error {
	c, pipeline := a.c, a.req.Pipeline
	if err := c.ensureFillTable(ctx, pipeline); err != nil {
		return err
	}
	fills := c.table(gsql.FillTable(pipeline))
	record := func(tbl, col, value string) error {
		_, err := c.query(ctx, gsql.RecordFill(fills), map[string]any{"pipeline": pipeline, "tbl": tbl, "col": col, "value": []string{value}})
		a.st.RoundTrips += 3
		return err
	}
	if err := record(old, "", to); err != nil {
		return fmt.Errorf("record the rename of %s in %s: %w", c.table(old), fills, err)
	}
	a.renames.intents[old] = to
	for i, f := range c.fills[pipeline] {
		if f.table != old {
			continue
		}
		if err := record(nw, f.column, f.value); err != nil {
			return fmt.Errorf("move the fill of column %s to %s: %w", f.column, c.table(nw), err)
		}
		_, err := c.query(ctx, gsql.DropFill(fills, "mv"), map[string]any{"pipeline": pipeline, "mv_tbl": old, "mv_col": f.column})
		a.st.RoundTrips += 3
		if err != nil {
			return fmt.Errorf("move the fill of column %s to %s: %w", f.column, c.table(nw), err)
		}
		c.fills[pipeline][i].table = nw
	}
	oh, nh := gsql.HistoryTable(old), gsql.HistoryTable(nw)
	hThere, err := a.exists(ctx, oh)
	if err != nil {
		return err
	}
	nhThere, err := a.exists(ctx, nh)
	if err != nil {
		return err
	}
	pairs := [][2]string{{old, nw}}
	if hThere && !nhThere {
		pairs = [][2]string{{oh, nh}, {old, nw}}
	}
	for _, p := range pairs {
		_, err := c.query(ctx, gsql.RenameTable(c.table(p[0]), p[1]), nil)
		a.st.RoundTrips += 3
		delete(c.tables, p[0])
		delete(c.tables, p[1])
		if err != nil {
			return classify(fmt.Errorf("rename table %s to %s: %w", c.table(p[0]), p[1], err), c.s)
		}
		a.log.Warn("renamed a table as the source renamed its stream", "from", c.table(p[0]).String(), "to", c.table(p[1]).String(), "stream", to, "was", from)
		if a.afterRename != nil {
			if err := a.afterRename(p[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// renameStatements are the last transaction's statements for the renames the range did or followed: the
// intents and the former streams' state rows go.
func (a *applier) renameStatements(stmts []string, params map[string]any) []string {
	c, rn, pipeline := a.c, a.renames, a.req.Pipeline
	fills := c.table(gsql.FillTable(pipeline))
	n := 0
	for _, old := range slices.Sorted(maps.Keys(rn.intents)) {
		if !rn.done[old] {
			continue
		}
		param := fmt.Sprintf("rename_%d", n)
		n++
		stmts = append(stmts, gsql.DropFill(fills, param))
		params[param+"_tbl"], params[param+"_col"] = old, ""
	}
	state := c.table(gsql.StateTable(pipeline))
	for i, stream := range slices.Sorted(maps.Keys(rn.gone)) {
		param := fmt.Sprintf("gone_%d", i)
		stmts = append(stmts, gsql.DeleteState(state, param))
		params[param] = stream
	}
	return stmts
}

// renamesCommitted forgets, once the last transaction committed, the intents and state rows it deleted.
func (a *applier) renamesCommitted(st *state) {
	rn := a.renames
	kept := map[string]string{}
	for old, stream := range rn.intents {
		if !rn.done[old] {
			kept[old] = stream
		}
	}
	a.c.intents[a.req.Pipeline] = kept
	for stream := range rn.gone {
		delete(st.streams, stream)
	}
}

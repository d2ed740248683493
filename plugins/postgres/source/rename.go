package source

// A table renamed at the source (ALTER TABLE a RENAME TO b) keeps its oid, and logical decoding goes on sending its
// changes: pgoutput sends a Relation message with the new name before the first change decoded after the rename
// (the decoder reads the catalog as of each change, so changes before it still come as a's). A publication FOR
// TABLE keeps the table by oid; one FOR TABLES IN SCHEMA or FOR ALL TABLES keeps it while it stays in the schema.
// The stream therefore sees a rename as a Relation message whose relation id is a captured table's under another
// name, and:
//
//   - when the new name is captured too (listed in tables, or matched by a pattern), the table's stream goes on
//     under the new name: its schema is marked as renamed from the old stream (change.RenamedFromTableMeta) until
//     the table's next Relation message, and destinations rename their table (or find it renamed already, when
//     they replay). Nothing is truncated or copied: the old name leaves the capture set, the new one joins it;
//   - when it is not, the Read stops with a config fault naming the rename and the two ways out, before any change
//     of the transaction is emitted, so the checkpoint stays before it.
//
// The pattern watcher (patterns.go) and the publication check (pubwatch.go) read the catalog, which is ahead of the
// stream: they recognise the table by its oid, so a rename is neither a drop (release) nor a new table (a copy).

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugins/postgres/config"
)

// capturedOID is the stream of the captured table with that oid, "" when none.
func (p *processor) capturedOID(oid uint32) string {
	if oid == 0 {
		return ""
	}
	for name, t := range p.r.tables {
		if t != nil && t.OID == oid {
			return name
		}
	}
	return ""
}

// followRename handles a Relation message naming a captured table (oid) under a new name: it returns the former
// stream when the new name is captured and the table's stream now goes on under it, and a config fault when the
// new name is not captured.
func (p *processor) followRename(ctx context.Context, oid uint32, name string) (string, error) {
	r := p.r
	old := p.capturedOID(oid)
	if old == "" || old == name {
		return "", nil
	}
	tn, err := config.ParseTableName(pgQuote(name))
	if err != nil {
		return "", fmt.Errorf("table %s renamed to %s: %w", old, name, err)
	}
	oldTN := r.tables[old].Name
	if !slices.Contains(r.exact, tn) && !r.cfg.Matches(tn) {
		return "", fault.ConfigErr(fmt.Errorf("the stream at LSN %s renames captured table %s to %s, which the pipeline does not capture; nothing after it was emitted, and the destination's table keeps its rows", p.pos, old, name),
			fmt.Sprintf("either capture the new name: add %s to tables, or a pattern that matches it, and drop %s from tables if it is listed there (the new name is then followed as a rename: no copy, the destination renames its table); or stop capturing it: remove %s from tables (the destination's table keeps the rows it has)",
				name, old, old))
	}
	if c := r.tables[name]; c != nil && c.OID != oid {
		return "", fault.DataErr(fmt.Errorf("the stream at LSN %s renames captured table %s to %s, the name of another captured table: the destination could not tell the two tables' rows apart", p.pos, old, name),
			"start the pipeline from an empty checkpoint (a new snapshot)")
	}
	_, recopying := p.recopy[old]
	if _, copying := p.rs.c.Progress()[old]; copying || recopying {
		return "", fault.ResnapshotErr(fmt.Errorf("captured table %s is renamed to %s at LSN %s while it is being copied", old, name, p.pos),
			"start the pipeline from an empty checkpoint (a new snapshot)")
	}
	fresh, err := loadConfigured(ctx, r.pool, r.resolver, r.cfg, tn)
	switch {
	case errors.Is(err, errNoTable) || err == nil && fresh.OID != oid:
		// Renamed or dropped again since (the catalog is ahead of the stream): decoded with what was read last.
		fresh, err = r.tables[old], nil
		fresh.Name = tn
	case err != nil:
		return "", fmt.Errorf("table %s, renamed to %s: %w", old, name, r.cfg.Explain(err))
	}
	delete(r.tables, old)
	r.tables[name] = fresh
	r.cfg.TableNames = slices.DeleteFunc(r.cfg.TableNames, func(t config.TableName) bool { return t == oldTN })
	if !slices.Contains(r.cfg.TableNames, tn) {
		r.cfg.TableNames = append(r.cfg.TableNames, tn)
	}
	if cols, ok := p.lastCols[old]; ok {
		p.lastCols[name] = cols
		delete(p.lastCols, old)
	}
	if l, ok := p.copied[old]; ok {
		p.copied[name] = l
		delete(p.copied, old)
	}
	delete(p.recopy, old)
	delete(p.pw.dropping, old)
	p.pub.forget(oldTN)
	p.pub.watch(tn, fresh.Append)
	r.released = append(r.released, old)
	r.emitted = true // the next checkpoint's tables differ
	p.pw.sent = false
	r.log.Info("captured table renamed to a captured name: its stream goes on under the new name, and destinations rename its table",
		"from", old, "to", name, "lsn", p.pos)
	return old, nil
}

// catalogHas says whether a table of that oid exists now (under whatever name).
func (p *processor) catalogHas(ctx context.Context, oid uint32) bool {
	var ok bool
	err := p.r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class WHERE oid = $1)`, oid).Scan(&ok)
	return err == nil && ok
}

// findRenamed notes the checkpoint's tables that the catalog has under another name (their oid, which the
// checkpoint keeps, under a name the checkpoint does not list): renamed while no Read ran. The Read captures them
// under the old name, so the slot's changes from before the rename come as before, and the Relation message
// with the new name is followed as a rename, as if the Read had been running.
func (r *reader) findRenamed(ctx context.Context, pos *Position) error {
	if pos == nil || pos.Phase != PhaseStream && !pos.copiedAll() || len(pos.OIDs) == 0 {
		return nil
	}
	existing, _, err := catalogTables(ctx, r.pool)
	if err != nil {
		return r.cfg.Explain(err)
	}
	byOID := map[uint32]config.TableName{}
	for tn, oid := range existing {
		byOID[oid] = tn
	}
	for _, n := range pos.Tables {
		tn, err := config.ParseTableName(pgQuote(n))
		if err != nil {
			continue
		}
		oid := pos.OIDs[n]
		now, ok := byOID[oid]
		if oid == 0 || !ok || now == tn || existing[tn] == oid || slices.Contains(pos.Tables, now.String()) {
			continue
		}
		if r.renamedAt == nil {
			r.renamedAt = map[string]config.TableName{}
		}
		r.renamedAt[n] = now
		r.log.Info("captured table renamed while the pipeline was stopped: captured under its old name until the stream reaches the rename",
			"table", n, "now", now.String())
	}
	return nil
}

// keepRenamed keeps the tables renamed while no Read ran in the capture set under their old names, in the
// checkpoint's order, and their new names out of it: the stream's rename brings them in (followRename), not a copy.
func (r *reader) keepRenamed(pos *Position) {
	if len(r.renamedAt) == 0 {
		return
	}
	for n, now := range r.renamedAt {
		tn, _ := config.ParseTableName(pgQuote(n))
		r.cfg.TableNames = slices.DeleteFunc(r.cfg.TableNames, func(t config.TableName) bool { return t == now || t == tn })
		r.cfg.TableNames = append(r.cfg.TableNames, tn)
	}
	at := func(t config.TableName) int {
		if i := slices.Index(pos.Tables, t.String()); i >= 0 {
			return i
		}
		return len(pos.Tables)
	}
	slices.SortStableFunc(r.cfg.TableNames, func(a, b config.TableName) int { return at(a) - at(b) })
}

// oids are the captured tables' oids by stream name, for the checkpoint (Position.OIDs); nil when none is known.
func (r *reader) oids() map[string]uint32 {
	var out map[string]uint32
	for _, tn := range r.cfg.TableNames {
		if t := r.tables[tn.String()]; t != nil && t.OID != 0 {
			if out == nil {
				out = map[string]uint32{}
			}
			out[tn.String()] = t.OID
		}
	}
	return out
}

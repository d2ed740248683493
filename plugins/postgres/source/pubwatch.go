package source

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugins/postgres/config"
)

// A publication can be altered while a pipeline streams, and pgoutput decodes each change with the catalog as of
// its position in the WAL. Tried on PostgreSQL 15: after ALTER PUBLICATION … DROP TABLE the table's changes
// simply stop coming; after SET (publish = 'insert') its updates and deletes stop coming (a Relation message is
// re-sent, but only when a change of the table is still published: nothing at all arrives for a dropped table);
// after DROP PUBLICATION the walsender fails at the first change decoded past it ("publication … does not
// exist"), and a publication created again in a later transaction does not help, because the decoder reads the
// catalog as of the change. The silent cases leave no trace in the stream, so the stream cannot tell us; the
// catalog can.
//
// pubWatch compares the catalog rows that decide what is published with those seen at the previous check: the
// publication's pg_publication row (its oid and xmin: any ALTER PUBLICATION that changes options writes a new row
// version, so a new xmin) and, for each captured table, the pg_publication_rel or pg_publication_namespace row
// that makes it a member (a table removed and added again has a new row, a new oid). A row version never comes
// back, so equal rows at two checks mean no change of them committed between the two, even one that was undone.
// The processor checks after it received runs of messages and before it handles them, whenever they hold a
// commit or a keepalive (processor.run: only those move the position a checkpoint carries), so every checkpoint it
// sends at a position E follows a check that began after E arrived: a change that committed before E is in the
// catalog that check reads (see the README for the one residual window). A difference stops the Read before the
// runs are handled, and nothing after the previous check's position is ever checkpointed.
//
// Why not a marker in the stream: pgoutput sends nothing for an ALTER PUBLICATION, and an event trigger that
// writes one (pg_logical_emit_message) would need a superuser and an object in the user's database.
//
// The class is resnapshot: changes written between the alteration and its repair are not in the slot for the
// table, and putting the table back does not bring them (the decoder reads the catalog as of each change).

// pubRow is one publication as the catalog holds it: its row's version and options, and for each captured table
// the row that makes it a member ("" when none does).
type pubRow struct {
	exists                    bool
	version                   string // oid/xmin of the pg_publication row
	walNow                    string // the server's WAL insert position when it was read
	all, ins, upd, del, trunc bool
	members                   map[string]string
	// oids are the captured tables' oids now (0: no such table): a table captured by a pattern whose oid is not
	// the captured one was dropped, which patterns.go handles. Read from pg_class under the statement's
	// snapshot, as the membership is: to_regclass alone looks the name up in the catalog cache, which can still
	// hold a table whose DROP committed before the snapshot (it takes no lock, so it need not see the
	// invalidation), and the table would then look present but unpublished.
	oids map[string]uint32
}

// pubWatch watches the publications the stream reads through.
type pubWatch struct {
	r *reader
	// pubs: the publications checked, each with the captured tables that come through it.
	pubs []watchedPub
	// prev: the rows seen at the last check, by publication; at: the stream's position when it ran.
	prev map[string]pubRow
	at   pglogrepl.LSN
}

type watchedPub struct {
	name       string
	appendOnly bool
	tables     []config.TableName
}

func newPubWatch(r *reader) *pubWatch {
	w := &pubWatch{r: r, prev: map[string]pubRow{}}
	main := watchedPub{name: r.cfg.Publication}
	app := watchedPub{name: r.cfg.AppendPublication(), appendOnly: true}
	for _, tn := range r.cfg.TableNames {
		if r.cfg.Append(tn) {
			app.tables = append(app.tables, tn)
		} else {
			main.tables = append(main.tables, tn)
		}
	}
	// The main publication is always named to pgoutput (startReplication), so its drop fails the stream even
	// when every table is in mode: append; the append publication is named only when it holds tables.
	w.pubs = append(w.pubs, main)
	if len(app.tables) > 0 {
		w.pubs = append(w.pubs, app)
	}
	return w
}

// watch adds a table captured while streaming (patterns.go) to the publication it comes through.
func (w *pubWatch) watch(tn config.TableName, appendOnly bool) {
	for i := range w.pubs {
		if w.pubs[i].appendOnly == appendOnly {
			w.pubs[i].tables = append(w.pubs[i].tables, tn)
			return
		}
	}
	w.pubs = append(w.pubs, watchedPub{name: w.r.cfg.AppendPublication(), appendOnly: true, tables: []config.TableName{tn}})
}

// forget stops watching a table captured by a pattern that was dropped (patterns.go): its membership is gone with it.
func (w *pubWatch) forget(tn config.TableName) {
	for i := range w.pubs {
		w.pubs[i].tables = slices.DeleteFunc(w.pubs[i].tables, func(t config.TableName) bool { return t == tn })
	}
}

// read reads one publication's rows.
func (w *pubWatch) read(ctx context.Context, p watchedPub) (pubRow, error) {
	names := make([]string, len(p.tables))
	known := make([]uint32, len(p.tables)) // the captured table's oid: a table renamed since is still it (rename.go)
	for i, t := range p.tables {
		names[i] = t.Quoted()
		if c := w.r.tables[t.String()]; c != nil {
			known[i] = c.OID
		}
	}
	rows, err := w.r.pool.Query(ctx, `SELECT pg_current_wal_insert_lsn()::text, p.oid::text || '/' || p.xmin::text, p.puballtables, p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate, t.ord,
		CASE WHEN t.ord IS NULL THEN ''
		     WHEN p.puballtables THEN 'all tables'
		     ELSE coalesce(
		         (SELECT 'table row ' || pr.oid FROM pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid = t.rel),
		         (SELECT 'schema row ' || pn.oid FROM pg_publication_namespace pn JOIN pg_class c ON c.relnamespace = pn.pnnspid
		           WHERE pn.pnpubid = p.oid AND c.oid = t.rel),
		         '') END, coalesce((SELECT c.oid FROM pg_class c WHERE c.oid = t.rel), 0)
		FROM pg_publication p LEFT JOIN (
			SELECT u.ord, coalesce(to_regclass(u.name)::oid, (SELECT c.oid FROM pg_class c WHERE c.oid = u.known AND u.known <> 0)) AS rel
			FROM unnest($2::text[], $3::oid[]) WITH ORDINALITY AS u(name, known, ord)) AS t ON true
		WHERE p.pubname = $1`, p.name, names, known)
	if err != nil {
		return pubRow{}, fmt.Errorf("read publication %s: %w", p.name, w.r.cfg.Explain(err))
	}
	defer rows.Close()
	out := pubRow{members: map[string]string{}, oids: map[string]uint32{}}
	for rows.Next() {
		var ord *int64
		var member string
		var oid uint32
		if err := rows.Scan(&out.walNow, &out.version, &out.all, &out.ins, &out.upd, &out.del, &out.trunc, &ord, &member, &oid); err != nil {
			return pubRow{}, fmt.Errorf("read publication %s: %w", p.name, err)
		}
		out.exists = true
		if ord != nil {
			out.members[p.tables[*ord-1].String()] = member
			out.oids[p.tables[*ord-1].String()] = oid
		}
	}
	if err := rows.Err(); err != nil {
		return pubRow{}, fmt.Errorf("read publication %s: %w", p.name, w.r.cfg.Explain(err))
	}
	if !out.exists {
		if err := w.r.pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&out.walNow); err != nil {
			return pubRow{}, fmt.Errorf("read the WAL position: %w", w.r.cfg.Explain(err))
		}
	}
	return out, nil
}

// check reads the publications and compares them with the last check. upTo is the position of the last message
// received before it: the change, if any, committed before the stream got past upTo. lastCP is the last
// checkpoint sent, the position the message promises nothing was committed after.
func (w *pubWatch) check(ctx context.Context, upTo, lastCP pglogrepl.LSN) error {
	for _, p := range w.pubs {
		cur, err := w.read(ctx, p)
		if err != nil {
			return err
		}
		prev, seen := w.prev[p.name]
		if err := w.compare(p, prev, seen, cur, upTo, lastCP); err != nil {
			return err
		}
		w.prev[p.name] = cur
	}
	w.at = upTo
	return nil
}

// compare says what makes cur unfit, or what changed since prev (seen false: the first check, which only
// judges cur).
func (w *pubWatch) compare(p watchedPub, prev pubRow, seen bool, cur pubRow, upTo, lastCP pglogrepl.LSN) error {
	// The catalog is read as it is now, which may be far ahead of the stream: the change committed after the
	// previous check began and before the server's WAL position at this one, and the stream, at upTo, has not
	// handled anything past it yet.
	when := fmt.Sprintf("in a transaction that committed between LSN %s (where the stream was at the last check that found the publication intact) and LSN %s (the server's WAL at this check); the stream stopped at LSN %s before handling anything after it",
		w.at, cur.walNow, upTo)
	if !seen {
		when = fmt.Sprintf("before LSN %s (the server's WAL as this Read resumed from its checkpoint at LSN %s; the slot's changes are decoded with the catalog as of each, so some may have been left out)",
			cur.walNow, upTo)
	}
	pub := pgx.Identifier{p.name}.Sanitize()
	stop := func(what, fix string) error {
		return fault.ResnapshotErr(fmt.Errorf("publication %s %s, %s: the changes it no longer published are not in the replication slot, and restoring it does not bring them back (the server decodes each change with the catalog as of its position); nothing after LSN %s was checkpointed",
			p.name, what, when, lastCP),
			fix+", then re-snapshot: run `skippr teardown PIPELINE` and sync the pipeline under a new name and wal.url, so its tables are copied again")
	}
	if !cur.exists {
		return stop("was dropped", fmt.Sprintf("the pipeline's publication must stay: a new pipeline creates it again (or CREATE PUBLICATION %s FOR TABLE …)", pub))
	}
	var missing []string
	if !cur.ins {
		missing = append(missing, "insert")
	}
	if !p.appendOnly && !cur.upd {
		missing = append(missing, "update")
	}
	if !p.appendOnly && !cur.del {
		missing = append(missing, "delete")
	}
	// TRUNCATE is needed for truncate: propagate (as Check says); one that was published and is no longer is
	// a narrowing the other modes would miss too.
	if !cur.trunc && (w.r.cfg.Truncate == config.TruncatePropagate || seen && prev.trunc) {
		missing = append(missing, "truncate")
	}
	publish := "insert, update, delete, truncate"
	if p.appendOnly {
		publish = "insert, truncate"
	}
	if len(missing) > 0 {
		return stop(fmt.Sprintf("no longer publishes %s (publish narrowed)", strings.Join(missing, ", ")),
			fmt.Sprintf("run ALTER PUBLICATION %s SET (publish = '%s')", pub, publish))
	}
	// A table captured by a pattern that was dropped is released, not a fault (patterns.go).
	dropped := func(t config.TableName) bool {
		if !w.r.byPattern(t) {
			return false
		}
		c := w.r.tables[t.String()]
		return c == nil || cur.oids[t.String()] != c.OID
	}
	var gone []string
	for _, t := range p.tables {
		if cur.members[t.String()] == "" && !dropped(t) {
			gone = append(gone, t.String())
		}
	}
	if len(gone) > 0 {
		return stop(fmt.Sprintf("no longer includes table %s (ALTER PUBLICATION … DROP TABLE, or the table was dropped)", strings.Join(gone, ", ")),
			fmt.Sprintf("run ALTER PUBLICATION %s ADD TABLE %s", pub, strings.Join(gone, ", ")))
	}
	if !seen {
		return nil
	}
	var again []string
	for _, t := range p.tables {
		if prev.members[t.String()] != "" && prev.members[t.String()] != cur.members[t.String()] && !dropped(t) {
			again = append(again, t.String())
		}
	}
	slices.Sort(again)
	if len(again) > 0 {
		return stop(fmt.Sprintf("lost and regained table %s (its membership row was replaced: dropped and added again, or SET TABLE)", strings.Join(again, ", ")),
			"keep the pipeline's tables in its publication")
	}
	if prev.version != cur.version {
		// A new row version with the same options now: the options may have been narrowed and restored in
		// between, which the catalog no longer shows. Stopping is the only answer that cannot lose a change;
		// an OWNER TO or a RENAME back costs a re-snapshot too.
		return stop("was altered (its catalog row was rewritten; it publishes every operation again now, but may not have in between)",
			"alter the pipeline's publication only while no pipeline streams through it")
	}
	return nil
}

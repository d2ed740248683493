package source

// Table patterns (`tables: ["shop.*", "public.orders_*"]`, config.Settings.Patterns). Logical decoding carries no
// DDL, so the source learns of a table created or dropped from the catalog: the processor polls it (patternPoll)
// between two transactions, beside the publication check (pubwatch.go), and
//
//   - adopts a new table that matches a pattern: it adds it to the pipeline's publication (ALTER PUBLICATION …
//     ADD TABLE when skippr created the publication; a publication made by hand must cover it already, e.g. FOR
//     TABLES IN SCHEMA or FOR ALL TABLES, or the Read stops with a config error naming the table and the
//     statement), and copies it while streaming with the re-snapshot machinery (resnapshot.go, plugin-sdk/dblog).
//     No row is lost: the publication includes the table from the commit A of the ALTER (or from its creation,
//     for a schema or all-tables publication) and pgoutput decodes each change with the catalog as of its
//     position, so every change committed after A comes through the slot; the copy's first chunk starts after
//     A, and each chunk reads the rows committed before its select, so a row written between the CREATE and A
//     is in a chunk. None is held twice: the watermarks drop from a chunk every row the log changed while the
//     chunk was in flight, and the begin and end marks make the destination keep exactly the rows the copy and
//     the log brought between them (the argument of `skippr resnapshot`, in dblog's package doc).
//   - releases a table captured by a pattern that is gone from the catalog (dropped, or dropped and created again
//     under the same name: another table): the catalog is ahead of the stream, so the table stays captured until
//     the stream has passed the server's WAL position at the poll that saw it gone — every change of it committed
//     before the drop has then been emitted — and only then leaves the capture set and the checkpoint, with a
//     warning. No truncate is sent: the destination's table keeps its rows. A table named exactly keeps the
//     publication check's behaviour (a resnapshot fault).
//
// At a restart the capture set is the checkpoint's tables that still exist, plus every table a pattern matches
// now, copied while streaming as any table added to tables (addResnapshots); during the initial snapshot, only the
// checkpoint's (a table created since is adopted once streaming starts). A table captured by a pattern and
// dropped while no Read streamed is released at the start; its changes between the checkpoint and its drop, still
// in the slot, are not emitted (the table is gone, its columns can no longer be read), as the log says.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/postgres/config"
)

// patternPoll is how often the processor looks for tables created or dropped: one catalog query, against a
// table's creation that a person waits for.
const patternPoll = 2 * time.Second

// catalogTables are the tables a pattern may match, with their oids: ordinary and partitioned tables that are not
// partitions (a partitioned table is published through its root), outside the system schemas.
func catalogTables(ctx context.Context, q querier) (map[config.TableName]uint32, string, error) {
	rows, err := q.Query(ctx, `SELECT n.nspname, c.relname, c.oid, pg_current_wal_insert_lsn()::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND n.nspname NOT IN ('pg_catalog', 'information_schema')
		AND n.nspname NOT LIKE 'pg\_toast%' AND n.nspname NOT LIKE 'pg\_temp\_%'`)
	if err != nil {
		return nil, "", fmt.Errorf("list the tables for the patterns of tables: %w", err)
	}
	defer rows.Close()
	out := map[config.TableName]uint32{}
	var wal string
	for rows.Next() {
		var tn config.TableName
		var oid uint32
		if err := rows.Scan(&tn.Schema, &tn.Name, &oid, &wal); err != nil {
			return nil, "", fmt.Errorf("list the tables for the patterns of tables: %w", err)
		}
		out[tn] = oid
	}
	return out, wal, rows.Err()
}

func names(m map[config.TableName]uint32) []config.TableName {
	out := make([]config.TableName, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	return out
}

// expandPatterns expands the settings' patterns as a first start does (Discover, Check).
func expandPatterns(ctx context.Context, q querier, cfg *config.Settings) error {
	if len(cfg.Patterns) == 0 {
		return nil
	}
	existing, _, err := catalogTables(ctx, q)
	if err != nil {
		return cfg.Explain(err)
	}
	return cfg.Expand(names(existing), true)
}

// expand sets a Read's capture set from the settings, the catalog and the checkpoint (pos, nil at a first start).
func (r *reader) expand(ctx context.Context, pos *Position) error {
	r.exact = slices.Clone(r.cfg.TableNames)
	if len(r.cfg.Patterns) == 0 {
		return nil
	}
	existing, _, err := catalogTables(ctx, r.pool)
	if err != nil {
		return r.cfg.Explain(err)
	}
	if pos == nil {
		if err := r.cfg.Expand(names(existing), true); err != nil {
			return err
		}
		r.log.Info("table patterns expanded", "tables", strings.Join(r.tableNames(), ", "))
		return nil
	}
	// The checkpoint's tables first, in its order, so that unchanged settings give its list exactly.
	var tables []config.TableName
	for _, n := range pos.Tables {
		tn, err := config.ParseTableName(pgQuote(n))
		if err != nil || !r.byPattern(tn) && !slices.Contains(r.exact, tn) {
			continue
		}
		if _, renamed := r.renamedAt[n]; renamed {
			tables = append(tables, tn)
			continue
		}
		if _, ok := existing[tn]; !ok && r.byPattern(tn) {
			r.released = append(r.released, n)
			r.log.Warn("table captured by a pattern of tables was dropped while the pipeline was stopped: released, no longer captured; its destination table keeps its rows, and its changes between the last checkpoint and the drop are not carried (its columns can no longer be read)",
				"table", n)
			continue
		}
		tables = append(tables, tn)
	}
	for _, tn := range r.exact {
		if !slices.Contains(tables, tn) {
			tables = append(tables, tn)
		}
	}
	r.cfg.TableNames = tables
	if pos.Phase == PhaseSnapshot && !pos.copiedAll() {
		// The initial snapshot copies the tables it began with; one created since is adopted once streaming
		// starts (followPatterns), as a table added to the settings now would be refused.
		return nil
	}
	return r.cfg.Expand(names(existing), false)
}

// pgQuote quotes a stream name's parts (schema.table, unquoted) so ParseTableName reads them back as they are.
func pgQuote(stream string) string {
	s, n, _ := strings.Cut(stream, ".")
	q := func(p string) string { return `"` + strings.ReplaceAll(p, `"`, `""`) + `"` }
	return q(s) + "." + q(n)
}

// byPattern says whether a captured table is captured by a pattern only (not named in tables).
func (r *reader) byPattern(tn config.TableName) bool {
	return !slices.Contains(r.exact, tn) && r.cfg.Matches(tn)
}

// patternWatch is the processor's side of the patterns: when it polls next, and the tables seen dropped, each
// released once the stream passes the WAL position given.
type patternWatch struct {
	next     time.Time
	dropping map[string]pglogrepl.LSN
	// sent: a checkpoint carried the capture set as it is now (capturedMetrics).
	sent bool
}

// followPatterns releases the dropped tables the stream has passed, and at most every patternPoll adopts the new
// tables that match and notes the ones gone. It runs between transactions only.
func (p *processor) followPatterns(ctx context.Context) error {
	r := p.r
	if len(r.cfg.Patterns) == 0 || p.inTx {
		return nil
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range p.pw.dropping {
			if !yield(n) {
				return
			}
		}
	}) {
		if at := p.pw.dropping[name]; p.pos >= at {
			p.releaseTable(name, at)
		}
	}
	if time.Now().Before(p.pw.next) {
		return nil
	}
	p.pw.next = time.Now().Add(patternPoll)
	existing, walNow, err := catalogTables(ctx, r.pool)
	if err != nil {
		return r.cfg.Explain(err)
	}
	at, err := pglogrepl.ParseLSN(walNow)
	if err != nil {
		return fmt.Errorf("the server's WAL position %q: %w", walNow, err)
	}
	for _, tn := range r.cfg.TableNames {
		name := tn.String()
		if _, ok := p.pw.dropping[name]; ok || !r.byPattern(tn) {
			continue
		}
		if oid, ok := existing[tn]; ok && (r.tables[name] == nil || oid == r.tables[name].OID) {
			continue
		}
		if c := r.tables[name]; c != nil && slices.Contains(slices.Collect(maps.Values(existing)), c.OID) {
			continue // renamed, not dropped: its next Relation message carries the new name (rename.go)
		}
		if p.pw.dropping == nil {
			p.pw.dropping = map[string]pglogrepl.LSN{}
		}
		p.pw.dropping[name] = at
		p.pub.forget(tn)
		r.log.Info("table captured by a pattern of tables is gone from the catalog: released once the stream passes the drop", "table", name, "lsn", at)
	}
	var added []config.TableName
	for _, tn := range slices.SortedFunc(func(yield func(config.TableName) bool) {
		for n := range existing {
			if !yield(n) {
				return
			}
		}
	}, func(a, b config.TableName) int { return strings.Compare(a.String(), b.String()) }) {
		if _, dropping := p.pw.dropping[tn.String()]; dropping || slices.Contains(r.cfg.TableNames, tn) || !r.cfg.Matches(tn) {
			continue
		}
		if p.capturedOID(existing[tn]) != "" {
			continue // a captured table renamed: followed at its Relation message, not copied (rename.go)
		}
		added = append(added, tn)
	}
	for _, tn := range added {
		if err := p.adopt(ctx, tn); err != nil {
			return err
		}
	}
	return nil
}

// adopt captures a table created while streaming: checked as at a start, added to the publication, copied while
// streaming.
func (p *processor) adopt(ctx context.Context, tn config.TableName) error {
	r := p.r
	name := tn.String()
	t, err := loadConfigured(ctx, r.pool, r.resolver, r.cfg, tn)
	if err != nil {
		return fmt.Errorf("table %s, created and matched by a pattern of tables: %w", name, r.cfg.Explain(err))
	}
	fix := fmt.Sprintf("do what the message says and restart the pipeline, or keep %s out of the patterns of tables", name)
	if pr := tableProblems(r.cfg, t); len(pr) > 0 {
		return fault.ConfigErr(fmt.Errorf("table %s, created and matched by a pattern of tables, cannot be captured: %w", name, pr), fix)
	}
	if err := r.cfg.Protect.Check(name, t.stream(r.cfg.Policy).Schema, t.Key, false); err != nil {
		return err
	}
	if pr, err := filterProblems(ctx, r.pool, r.cfg, []*table{t}); err != nil {
		return err
	} else if len(pr) > 0 {
		return fault.ConfigErr(fmt.Errorf("table %s, created and matched by a pattern of tables, cannot be captured: %w", name, pr), fix)
	}
	r.tables[name] = t
	r.cfg.TableNames = append(r.cfg.TableNames, tn)
	if err := r.publish(ctx, []string{name}); err != nil {
		return fmt.Errorf("table %s, created and matched by a pattern of tables: %w", name, err)
	}
	p.pub.watch(tn, t.Append)
	if t.Append {
		p.recopy[name] = RecopyProgress{}
	} else {
		p.rs.c.Add(name)
	}
	// A publication of the schema or of all tables may have sent the table's Relation message already.
	for _, rel := range p.rels {
		if rel.stream == name && rel.table == nil && rel.msg != nil {
			if err := p.relation(ctx, rel.msg); err != nil {
				return err
			}
		}
	}
	p.pw.sent = false
	r.log.Info("table created that matches a pattern of tables: captured, copying it while streaming", "table", name)
	return nil
}

// releaseTable takes a dropped table out of the capture set once the stream has passed at.
func (p *processor) releaseTable(name string, at pglogrepl.LSN) {
	r := p.r
	delete(p.pw.dropping, name)
	delete(r.tables, name)
	delete(p.lastCols, name)
	delete(p.recopy, name)
	r.cfg.TableNames = slices.DeleteFunc(r.cfg.TableNames, func(tn config.TableName) bool { return tn.String() == name })
	r.released = append(r.released, name)
	r.emitted = true // the next checkpoint's tables differ
	p.pw.sent = false
	r.log.Warn("table captured by a pattern of tables was dropped: released, no longer captured; its destination table keeps its rows",
		"table", name, "lsn", at)
}

// capturedMetrics are the gauges of the capture set, which `skippr status` lists: captured_table 1 for each table
// captured, 0 for each released (dropped) in this Read. The first stream checkpoint of a Read carries them, and the
// first after the set changed: the engine keeps the last ones seen.
func (p *processor) capturedMetrics() []serve.Metric {
	if p.pw.sent {
		return nil
	}
	p.pw.sent = true
	r := p.r
	var out []serve.Metric
	for _, tn := range r.cfg.TableNames {
		out = append(out, capturedMetric(tn.String(), r.byPattern(tn), 1))
	}
	for _, name := range r.released {
		out = append(out, capturedMetric(name, true, 0))
	}
	return out
}

func capturedMetric(stream string, byPattern bool, v float64) serve.Metric {
	via := "name"
	if byPattern {
		via = "pattern"
	}
	return serve.Metric{Name: "captured_table", Value: v, Labels: map[string]string{"table": stream, "via": via},
		Help: "1 for each table the source captures (via: name, listed in tables; pattern, matched by a pattern there), 0 for one captured by a pattern and released since (dropped at the source)."}
}

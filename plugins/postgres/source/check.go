package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugins/postgres/config"
	"github.com/skippr-dev/skippr/plugins/postgres/typemap"
)

// Problems is a failed check: every problem found, each saying what to do.
type Problems []string

func (p Problems) Error() string {
	if len(p) == 1 {
		return p[0]
	}
	return fmt.Sprintf("%d problems:\n  - %s", len(p), strings.Join(p, "\n  - "))
}

// Check tests the source settings against the server: connection, wal_level, the REPLICATION attribute,
// each table (exists, readable, has a key, replica identity fit for updates and TOAST), the publication (or
// the right to create it), the slot (or room for one) and a replication session. A check that passes leaves its
// sessions to the Read of the slot that follows (warm.go).
func (s *Source) Check(ctx context.Context, cfg config.Settings) error {
	tm := newSteps(slog.Default().With("slot", cfg.Slot), "check timing")
	defer tm.done()
	pool, err := newPool(cfg)
	if err != nil {
		return err
	}
	keep := false
	defer func() {
		if !keep {
			pool.Close()
		}
	}()
	// The replication session is a connection of its own (a server process, authentication): it is opened
	// while the ordinary one opens and the catalog queries below run, since an hourly job's start waits for
	// the check (issue #31). Only a role that may replicate is worth the attempt; that is known once the
	// ordinary session answers, so the session is opened at once and dropped when the role turns out not to.
	repl := dialReplication(ctx, cfg)
	replUsed := false
	defer func() {
		if !replUsed {
			go repl.discard()
		}
	}()
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return cfg.Explain(err)
	}
	defer pc.Release()
	conn := pc.Conn()
	tm.step("connect")
	var problems Problems
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	// The server's settings, the role and the slot in one round trip: none depends on the tables.
	var (
		walLevel            string
		canReplicate, super bool
		sr                  slotRow
	)
	if err := conn.QueryRow(ctx, `
		SELECT current_setting('wal_level'), r.rolreplication, r.rolsuper,
		       s.slot_name IS NOT NULL, coalesce(s.plugin, ''), coalesce(s.slot_type, ''), s.database, s.active_pid, s.wal_status,
		       (SELECT count(*) FROM pg_replication_slots), current_setting('max_replication_slots')::int,
		       (SELECT coalesce(array_agg(slot_name::text ORDER BY slot_name), '{}') FROM pg_replication_slots),
		       (SELECT count(*) FROM pg_stat_replication), current_setting('max_wal_senders')::int
		FROM pg_roles r LEFT JOIN pg_replication_slots s ON s.slot_name = $1
		WHERE r.rolname = current_user`, cfg.Slot).Scan(&walLevel, &canReplicate, &super,
		&sr.exists, &sr.plugin, &sr.slotType, &sr.database, &sr.pid, &sr.walStatus,
		&sr.used, &sr.max, &sr.names, &sr.senders, &sr.maxSenders); err != nil {
		return cfg.Explain(err)
	}
	if walLevel != "logical" {
		add("wal_level is %q but logical replication needs \"logical\": run ALTER SYSTEM SET wal_level = logical as a superuser, then restart the server", walLevel)
	}
	if !canReplicate && !super {
		add("role %q lacks the REPLICATION attribute that replication slots need: run ALTER ROLE %s REPLICATION as a superuser", cfg.User, pgx.Identifier{cfg.User}.Sanitize())
	}
	tm.step("role_slot")

	// Patterns are checked as the first start expands them: each must match a table, and each table it matches
	// is checked as a named one is.
	if err := expandPatterns(ctx, conn, &cfg); err != nil {
		add("%v", err)
	}
	if len(cfg.TableNames) == 0 && len(cfg.Patterns) == 0 {
		add("tables is empty: list the tables to replicate as schema.table")
	}
	resolver := typemap.NewResolver()
	var tables []*table
	for _, tn := range cfg.TableNames {
		t, err := loadConfigured(ctx, conn, resolver, cfg, tn)
		if errors.Is(err, errNoTable) {
			add("table %s does not exist in database %q (check the tables setting)", tn, cfg.Database)
			continue
		}
		if err != nil {
			add("%v", err)
			continue
		}
		tables = append(tables, t)
		problems = append(problems, tableProblems(cfg, t)...)
	}
	tm.step("tables")

	problems = append(problems, publicationProblems(ctx, conn, cfg, tables, true)...)
	fp, err := filterProblems(ctx, conn, cfg, tables)
	if err != nil {
		return err
	}
	problems = append(problems, fp...)
	tm.step("publication")
	var slot slotCheck
	problems = append(problems, slotProblems(cfg, sr, &slot)...)

	var replConn *pgconn.PgConn
	if canReplicate || super {
		var p string
		replConn, p = replicationProblem(ctx, cfg, repl)
		if p != "" {
			problems = append(problems, p)
		}
		replUsed = replConn != nil
	}
	tm.step("replication")
	if len(problems) > 0 {
		if replConn != nil {
			go readyReplication(replConn).discard()
		}
		return fault.ConfigErr(problems, "fix each problem listed (as a superuser where it says so), then run again")
	}
	if slot.lost != nil || slot.inUse != nil {
		if replConn != nil {
			go readyReplication(replConn).discard()
		}
		if slot.lost != nil {
			return slot.lost
		}
		return slot.inUse
	}
	pc.Release()
	keep = true
	s.warm.leave(cfg.Slot, &warmStart{conn: cfg.ConnKey(), pool: pool, repl: replConn})
	return nil
}

// replicationProblem waits for the replication session being opened and identifies the system: the open
// session when that works, else the problem.
func replicationProblem(ctx context.Context, cfg config.Settings, d *replDial) (*pgconn.PgConn, string) {
	repl, err := d.wait(ctx)
	if err != nil {
		return nil, fmt.Sprintf("cannot open a replication session: %v", err)
	}
	if _, err := pglogrepl.IdentifySystem(ctx, repl); err != nil {
		go readyReplication(repl).discard()
		return nil, fmt.Sprintf("replication session: %v", cfg.Explain(err))
	}
	return repl, ""
}

func tableProblems(cfg config.Settings, t *table) Problems {
	var out Problems
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if !t.CanSelect {
		add("role %q cannot read table %s: run GRANT SELECT ON %s TO %s", cfg.User, t.Name, t.Name.Quoted(), pgx.Identifier{cfg.User}.Sanitize())
	}
	out = append(out, t.keyColumnProblems()...)
	switch {
	case t.Append:
		// Inserts only: no key or replica identity is needed, since no update or delete is followed.
	case t.FullRow && t.HasPrimaryKey:
		add("table %s is in mode: full_row but has a primary key (%s), which matches its rows: remove mode: full_row from table_options.%s", t.Name, strings.Join(t.Key, ", "), t.Name)
	case t.FullRow:
		// Matched by the whole old row: REPLICA IDENTITY FULL, checked below.
	case len(t.Key) == 0:
		add("table %s has no primary key, so changes cannot be matched to rows: add one (ALTER TABLE %s ADD PRIMARY KEY (...)), make a unique index on NOT NULL columns its replica identity (ALTER TABLE %s REPLICA IDENTITY USING INDEX ...), name the columns that identify a row in table_options: {%s: {key_columns: [...]}} and run ALTER TABLE %s REPLICA IDENTITY FULL, or carry its inserts only with table_options: {%s: {mode: append}} (updates and deletes are then not carried)", t.Name, t.Name.Quoted(), t.Name.Quoted(), t.Name, t.Name.Quoted(), t.Name)
	case t.ExplicitKey && !t.IdentityIsKey:
		add("table %s is keyed on key_columns (%s), which its updates and deletes carry only under REPLICA IDENTITY FULL: run ALTER TABLE %s REPLICA IDENTITY FULL", t.Name, strings.Join(t.Key, ", "), t.Name.Quoted())
	case !t.IdentityIsKey:
		add("table %s has a replica identity index other than its primary key, so an update of the primary key could not be followed: run ALTER TABLE %s REPLICA IDENTITY DEFAULT (or FULL)", t.Name, t.Name.Quoted())
	}
	switch {
	case t.Append:
	case t.FullRow && t.ReplicaIdentity != "f":
		what := "ALTER TABLE " + t.Name.Quoted() + " REPLICA IDENTITY FULL"
		if t.Kind == "p" {
			what += " on each partition"
		}
		add("table %s is in mode: full_row, whose updates and deletes carry the whole old row only under REPLICA IDENTITY FULL: run %s", t.Name, what)
	case t.ReplicaIdentity == "n":
		add("table %s has REPLICA IDENTITY NOTHING, so deletes and key updates carry no key: run ALTER TABLE %s REPLICA IDENTITY DEFAULT", t.Name, t.Name.Quoted())
	case t.ReplicaIdentity == "mixed":
		add("the partitions of %s have different replica identities: give every partition the same one (ALTER TABLE <partition> REPLICA IDENTITY ...)", t.Name)
	}
	if cfg.UnchangedToast == config.ToastRequireFull && t.ReplicaIdentity != "f" && !t.Append {
		if cols := t.toastable(); len(cols) > 0 {
			what := "ALTER TABLE " + t.Name.Quoted() + " REPLICA IDENTITY FULL"
			if t.Kind == "p" {
				what += " on each partition"
			}
			add("table %s has columns PostgreSQL may store out of line (TOAST): %s. An update that leaves such a value unchanged does not carry it, and it must not be replaced by NULL: run %s so the old row carries it, or set unchanged_toast: fetch to read it from the table",
				t.Name, strings.Join(cols, ", "), what)
		}
	}
	if len(t.Generated) > 0 {
		slog.Warn("generated columns are not replicated (pgoutput does not send them before PostgreSQL 18)", "table", t.Name.String(), "columns", strings.Join(t.Generated, ","))
	}
	return out
}

// publicationProblems checks the publication of the tables that follow every change and, when some tables are
// in mode: append, the append publication (inserts and truncates only) that holds those. With added, a table
// missing from a publication this plugin created is no problem: a running pipeline's Read adds it (a table
// added to tables is copied while streaming); a new pipeline's start checks again without added.
func publicationProblems(ctx context.Context, conn typemap.Querier, cfg config.Settings, tables []*table, added bool) Problems {
	var full, appendOnly []*table
	for _, t := range tables {
		if t.Append {
			appendOnly = append(appendOnly, t)
		} else {
			full = append(full, t)
		}
	}
	out := onePublicationProblems(ctx, conn, cfg, false, full, added)
	if len(appendOnly) == 0 {
		return out
	}
	out = append(out, onePublicationProblems(ctx, conn, cfg, true, appendOnly, added)...)
	// In a publication that publishes updates and deletes, PostgreSQL refuses both on a table without a
	// replica identity: the source's own writes would fail.
	for _, t := range appendOnly {
		var inFull bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables pt JOIN pg_publication p USING (pubname)
			WHERE pt.pubname = $1 AND pt.schemaname = $2 AND pt.tablename = $3 AND (p.pubupdate OR p.pubdelete))`,
			cfg.Publication, t.Name.Schema, t.Name.Name).Scan(&inFull)
		if err != nil {
			out = append(out, fmt.Sprintf("read publication %s: %v", cfg.Publication, cfg.Explain(err)))
			continue
		}
		if inFull {
			out = append(out, fmt.Sprintf("table %s is in mode: append, but publication %q publishes its updates and deletes (PostgreSQL then refuses them on a table without a replica identity): run ALTER PUBLICATION %s DROP TABLE %s",
				t.Name, cfg.Publication, pgx.Identifier{cfg.Publication}.Sanitize(), t.Name.Quoted()))
		}
	}
	return out
}

// onePublicationProblems checks one publication: the main one (appendOnly false) or the append one.
func onePublicationProblems(ctx context.Context, conn typemap.Querier, cfg config.Settings, appendOnly bool, tables []*table, added bool) Problems {
	var out Problems
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	pubName := cfg.Publication
	if appendOnly {
		pubName = cfg.AppendPublication()
	}
	cfg.Publication = pubName // the messages below name the publication checked
	var allTables, viaRoot, ins, upd, del, trunc, ours bool
	err := conn.QueryRow(ctx, `SELECT puballtables, pubviaroot, pubinsert, pubupdate, pubdelete, pubtruncate, coalesce(obj_description(oid, 'pg_publication') = $2, false) FROM pg_publication WHERE pubname = $1`,
		cfg.Publication, publicationComment).Scan(&allTables, &viaRoot, &ins, &upd, &del, &trunc, &ours)
	if errors.Is(err, pgx.ErrNoRows) {
		var canCreate bool
		if err := conn.QueryRow(ctx, `SELECT has_database_privilege(current_database(), 'CREATE')`).Scan(&canCreate); err != nil {
			add("check the right to create publication %s: %v", cfg.Publication, err)
			return out
		}
		var notOwned []string
		for _, t := range tables {
			if !t.Owned {
				notOwned = append(notOwned, t.Name.String())
			}
		}
		if !canCreate || len(notOwned) > 0 {
			why := "it needs the CREATE privilege on the database"
			if len(notOwned) > 0 {
				why = "it needs to own the tables (" + strings.Join(notOwned, ", ") + ")"
			}
			add("publication %q does not exist and role %q cannot create it (%s): create it as the tables' owner: %s",
				cfg.Publication, cfg.User, why, createPublicationSQL(cfg.Publication, tables, appendOnly))
		}
		return out
	}
	if err != nil {
		add("read publication %s: %v", cfg.Publication, cfg.Explain(err))
		return out
	}
	switch {
	case appendOnly && (!ins || upd || del):
		add("publication %q holds the tables in mode: append and must publish inserts (and truncates) only: PostgreSQL refuses UPDATE and DELETE on a table without a replica identity in a publication that publishes them: run ALTER PUBLICATION %s SET (publish = 'insert, truncate')",
			cfg.Publication, pgx.Identifier{cfg.Publication}.Sanitize())
	case !appendOnly && (!ins || !upd || !del):
		add("publication %q does not publish every insert, update and delete: run ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate')",
			cfg.Publication, pgx.Identifier{cfg.Publication}.Sanitize())
	}
	if !trunc && cfg.Truncate == config.TruncatePropagate {
		publish := "insert, update, delete, truncate"
		if appendOnly {
			publish = "insert, truncate"
		}
		add("publication %q does not publish TRUNCATE, so truncate: propagate would miss them and the destination would keep rows the source no longer has: run ALTER PUBLICATION %s SET (publish = '%s'), or set truncate: ignore",
			cfg.Publication, pgx.Identifier{cfg.Publication}.Sanitize(), publish)
	}
	for _, t := range tables {
		if t.Kind == "p" && !viaRoot {
			add("publication %q must publish partitioned table %s through its root: run ALTER PUBLICATION %s SET (publish_via_partition_root = true)",
				cfg.Publication, t.Name, pgx.Identifier{cfg.Publication}.Sanitize())
			continue
		}
		var attnames []string
		// The row filter is compared with table_options where by filterProblems.
		err := conn.QueryRow(ctx, `SELECT attnames FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`,
			cfg.Publication, t.Name.Schema, t.Name.Name).Scan(&attnames)
		if errors.Is(err, pgx.ErrNoRows) && added && ours {
			continue
		}
		if errors.Is(err, pgx.ErrNoRows) {
			add("publication %q does not include table %s: run ALTER PUBLICATION %s ADD TABLE %s",
				cfg.Publication, t.Name, pgx.Identifier{cfg.Publication}.Sanitize(), t.Name.Quoted())
			continue
		}
		if err != nil {
			add("read publication %s: %v", cfg.Publication, err)
			continue
		}
		if attnames != nil && len(attnames) < len(t.Columns) {
			add("publication %q publishes only some columns of %s (%s), but the snapshot copies all of them: drop the column list (ALTER PUBLICATION %s SET TABLE ...)",
				cfg.Publication, t.Name, strings.Join(attnames, ", "), pgx.Identifier{cfg.Publication}.Sanitize())
		}
	}
	return out
}

// createPublicationSQL creates publication name for tables; an append publication publishes inserts and
// truncates only. A publication without tables (every table in mode: append) is valid and stays empty.
func createPublicationSQL(name string, tables []*table, appendOnly bool) string {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Name.Quoted() + t.publicationFilter()
	}
	with := "publish_via_partition_root = true"
	if appendOnly {
		with += ", publish = 'insert, truncate'"
	}
	forTables := ""
	if len(names) > 0 {
		forTables = " FOR TABLE " + strings.Join(names, ", ")
	}
	return fmt.Sprintf("CREATE PUBLICATION %s%s WITH (%s)", pgx.Identifier{name}.Sanitize(), forTables, with)
}

// slotCheck is what the check found about the slot that is not a problem of the settings: WAL lost (only a
// re-snapshot helps) or a session holding it (wait).
type slotCheck struct{ lost, inUse error }

// slotRow is what the check reads of the slot, the slots and the WAL senders.
type slotRow struct {
	exists              bool // the slot exists: the fields up to walStatus are its own
	plugin, slotType    string
	database            *string
	pid                 *int32
	walStatus           *string
	used, max           int // slots in use, max_replication_slots
	names               []string
	senders, maxSenders int // WAL senders in use, max_wal_senders
}

func slotProblems(cfg config.Settings, r slotRow, st *slotCheck) Problems {
	var out Problems
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	plugin, slotType, database, pid, walStatus := r.plugin, r.slotType, r.database, r.pid, r.walStatus
	switch {
	case !r.exists:
		used, max, names := r.used, r.max, r.names
		if used >= max {
			add("all %d replication slots are taken (max_replication_slots = %d; slots: %s): drop one that is no longer needed (SELECT pg_drop_replication_slot('name')) or raise max_replication_slots and restart the server",
				used, max, strings.Join(names, ", "))
		} else if used+1 >= max && slices.ContainsFunc(cfg.TableNames, cfg.Append) {
			// The exact copy of an append table (a resumed copy, a table added later) runs under a temporary slot.
			add("only one replication slot is free (max_replication_slots = %d; slots: %s), but a table in mode: append needs room for a second, temporary one while its copy is resumed or it is added to a running pipeline: raise max_replication_slots (and max_wal_senders) by one and restart the server, or drop a slot that is no longer needed (SELECT pg_drop_replication_slot('name'))",
				max, strings.Join(names, ", "))
		}
	default:
		if slotType != "logical" || plugin != "pgoutput" {
			add("replication slot %q exists but is a %s slot with plugin %q, not a logical pgoutput slot: choose another slot name", cfg.Slot, slotType, plugin)
		} else if database == nil || *database != cfg.Database {
			db := ""
			if database != nil {
				db = *database
			}
			add("replication slot %q belongs to database %q, not %q: choose another slot name", cfg.Slot, db, cfg.Database)
		}
		if walStatus != nil && *walStatus == "lost" {
			st.lost = fault.ResnapshotErr(fmt.Errorf("replication slot %q has lost WAL it needed (wal_status = lost, see max_slot_wal_keep_size) and cannot continue", cfg.Slot),
				fmt.Sprintf("drop the slot (SELECT pg_drop_replication_slot('%s')) and sync again from a snapshot", cfg.Slot))
		}
		if pid != nil {
			// A pipeline restarted right after a crash finds its old session still holding the slot until the
			// server notices; that passes, so it is not a failed check.
			st.inUse = fault.TransientErr(fmt.Errorf("replication slot %q is in use by server process %d (another pipeline, or one that has not stopped yet)", cfg.Slot, *pid))
		}
	}
	if r.senders >= r.maxSenders {
		add("all %d WAL senders are busy (max_wal_senders = %d): raise max_wal_senders and restart the server", r.senders, r.maxSenders)
	}
	return out
}

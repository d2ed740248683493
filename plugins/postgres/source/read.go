package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/mempool"
	"github.com/skippr-dev/skippr/plugin-sdk/protect"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/postgres/config"
	"github.com/skippr-dev/skippr/plugins/postgres/typemap"
)

// reader is one Read call.
type reader struct {
	cfg      config.Settings
	st       *slotState
	pool     *pgxpool.Pool
	out      serve.Emitter
	mem      memory.Allocator
	resolver *typemap.Resolver
	tables   map[string]*table // by stream name
	log      *slog.Logger
	// values applies on_unrepresentable to what the decoders cannot carry.
	values *values.Handler
	// announced holds the schema id last announced per stream (SchemaChange before the first batch that
	// needs it).
	announced map[string]string
	ids       protocol.SchemaIDs
	// emitted says data (batches or schema changes) went out since the last checkpoint.
	emitted bool
	// slot is what the heartbeat last read of the slot, for the metrics on checkpoints.
	slot slotFigures
	// messages asks pgoutput for logical decoding messages: a re-snapshot's watermarks (resnapshot.go).
	messages bool
	// exact are the tables named in the settings; cfg.TableNames adds those the patterns capture, and released
	// are the streams of those released in this Read (patterns.go).
	exact    []config.TableName
	released []string
	// renamedAt are the checkpoint's tables the catalog has under another name now (renamed while no Read ran),
	// by stream name: captured under the old name until the stream reaches the rename (rename.go).
	renamedAt map[string]config.TableName
	// chunkRead is Source.chunkRead.
	chunkRead func(ctx context.Context, table string, keys []string)
	// repl is the replication session opened for streaming (warm.go), nil when none was: startReplication
	// takes it.
	repl *replDial
	// steps times the Read up to streaming, logged at debug level when streaming starts (or the Read ends
	// before); nil once logged.
	steps *steps
}

// Read emits the snapshot (when the position is in it, or there is none) and then streams changes.
func (s *Source) Read(ctx context.Context, req serve.ReadRequest, out serve.Emitter) error {
	cfg, err := config.ParseSource(req.Settings)
	if err != nil {
		return err
	}
	if len(cfg.TableNames) == 0 && len(cfg.Patterns) == 0 {
		return errors.New("settings: tables is empty: list the tables to replicate as schema.table")
	}
	inner, _, err := protect.Unwrap(req.Checkpoint)
	if err != nil {
		return err
	}
	pos, err := DecodePosition(inner)
	if err != nil {
		return err
	}
	st, err := s.register(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.unregister(cfg.Slot, st)
	log := slog.Default().With("slot", cfg.Slot)
	tm := newSteps(log, "read timing")
	// The sessions of the check that just passed, or new ones (warm.go). A Read that resumes streaming opens
	// its replication session now, beside the catalog queries below, rather than after them.
	var pool *pgxpool.Pool
	var repl *replDial
	if w := s.warm.take(cfg); w != nil {
		pool = w.pool
		if w.repl != nil {
			repl = readyReplication(w.repl)
		}
		tm.step("warm")
	} else {
		if pos != nil && (pos.Phase == PhaseStream || pos.copiedAll()) {
			repl = dialReplication(ctx, cfg)
		}
		if pool, err = openPool(ctx, cfg); err != nil {
			if repl != nil {
				go repl.discard()
			}
			return err
		}
		tm.step("connect")
	}
	defer pool.Close()
	r := &reader{cfg: cfg, st: st, pool: pool, out: out, mem: mempool.New(), resolver: typemap.NewResolver(),
		tables: map[string]*table{}, announced: map[string]string{},
		log: log, chunkRead: s.chunkRead, repl: repl, steps: tm}
	defer func() {
		if r.repl != nil { // not used: the Read ended before streaming, or took the snapshot's path
			go r.repl.discard()
		}
		if r.steps != nil {
			r.steps.done()
		}
	}()
	r.values = values.NewHandler(cfg.Policy, r.log)
	if cfg.Protect != nil {
		r.values.Hide(cfg.Protect.Hides)
	}
	if err := r.findRenamed(ctx, pos); err != nil {
		return err
	}
	// Patterns become tables here, before anything compares the tables with the checkpoint's.
	if err := r.expand(ctx, pos); err != nil {
		return err
	}
	r.keepRenamed(pos)
	cfg = r.cfg
	tm.step("renamed_patterns")
	if len(req.Streams) > 0 {
		// The slot and the publication cover the configured tables; a subset would need its own slot.
		for _, name := range req.Streams {
			if !slices.ContainsFunc(cfg.TableNames, func(t config.TableName) bool { return t.String() == name }) {
				return fmt.Errorf("stream %s is not among the configured tables", name)
			}
		}
	}
	for _, tn := range cfg.TableNames {
		t, err := loadConfigured(ctx, pool, r.resolver, cfg, tn)
		if now, ok := r.renamedAt[tn.String()]; ok && errors.Is(err, errNoTable) {
			// Renamed while no Read ran: its columns are read under the new name (rename.go).
			if t, err = loadConfigured(ctx, pool, r.resolver, cfg, now); err == nil {
				t.Name = tn
			}
		}
		if err != nil {
			return cfg.Explain(err)
		}
		// What would stop the stream hours later (no key, an identity that carries no key, TOAST under
		// require_full without FULL) stops it now, before anything is read.
		if p := tableProblems(cfg, t); len(p) > 0 {
			return fault.ConfigErr(fmt.Errorf("refused at start: %w", p),
				"do what each problem says, then start again; skippr connect runs the same checks")
		}
		// A rule naming a column the table lacks, or its key, stops the Read before anything is emitted.
		if err := cfg.Protect.Check(tn.String(), t.stream(cfg.Policy).Schema, t.Key, pos != nil); err != nil {
			return err
		}
		r.tables[tn.String()] = t
	}
	tm.step("tables")
	wrapped := false
	if pos != nil {
		// Only a copy started now is taken under new rules: one in progress began under the old ones.
		var fresh []string
		for _, n := range req.Resnapshot {
			if _, ok := pos.Resnapshot[n]; !ok {
				fresh = append(fresh, n)
			}
		}
		if wrapped, err = cfg.Protect.Resume(req.Checkpoint, pos.Tables, fresh, r.log); err != nil {
			return err
		}
	}
	// A filter the server cannot apply, or one the publication does not have, stops the Read before anything
	// is read: the copy and the stream would disagree on which rows the destination holds.
	loaded := make([]*table, 0, len(r.tables))
	for _, tn := range cfg.TableNames {
		loaded = append(loaded, r.tables[tn.String()])
	}
	if p, err := filterProblems(ctx, pool, cfg, loaded); err != nil {
		return err
	} else if len(p) > 0 {
		return fault.ConfigErr(fmt.Errorf("refused at start: %w", p), "do what each problem says, then start again; skippr connect runs the same checks")
	}
	tm.step("filters")
	// Every batch, schema change and checkpoint of the Read (snapshot, stream, re-snapshot) leaves through it.
	r.out = cfg.Protect.Emitter(r.out, r.mem, r.tableNames(), wrapped)
	if pos != nil && pos.Phase == PhaseSnapshot && pos.copiedAll() {
		// A snapshot whose every table is durable is over, even when its closing checkpoint never became
		// durable (a `sync --once` that ended on it): streaming starts where that checkpoint would have put it,
		// and tables added to the settings since are copied while streaming, as after any snapshot.
		done := pos.streamPhase()
		pos = &done
	}
	if pos != nil {
		if err := r.validate(pos); err != nil {
			return err
		}
		if err := r.addResnapshots(ctx, pos, req.Resnapshot); err != nil {
			return err
		}
	}
	// Watermarks come out of the slot as messages, which pgoutput sends only when asked to.
	// With patterns, a table created later is copied by watermarks too (patterns.go).
	r.messages = pos != nil && len(pos.Resnapshot) > 0 || len(cfg.Patterns) > 0

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hbErr := make(chan error, 1)
	go func() { hbErr <- r.heartbeat(ctx) }()
	err = r.run(ctx, pos)
	cancel()
	if hb := <-hbErr; hb != nil && !errors.Is(hb, context.Canceled) && (err == nil || errors.Is(err, context.Canceled)) {
		return hb
	}
	return err
}

func (r *reader) run(ctx context.Context, pos *Position) error {
	var snap pgx.Tx
	if pos == nil {
		if err := r.ensurePublication(ctx); err != nil {
			return err
		}
		var err error
		pos, snap, err = r.start(ctx)
		if err != nil {
			return err
		}
	}
	if pos.Phase == PhaseSnapshot {
		var err error
		pos, err = r.snapshot(ctx, snap, pos)
		if err != nil {
			return err
		}
	} else {
		// A stream checkpoint handed to Read is the engine's last durable one.
		r.st.mu.Lock()
		r.st.base = pos.LSNValue()
		r.st.mu.Unlock()
	}
	// Nothing moves the slot past where streaming starts before that is durable: after a snapshot, its
	// last checkpoint must be acknowledged first.
	r.st.mu.Lock()
	r.st.dataCP = max(r.st.dataCP, pos.LSNValue())
	r.st.mu.Unlock()
	return r.stream(ctx, pos)
}

// validate refuses a checkpoint of another slot or of tables no longer configured: the slot holds changes of the
// tables it was started with. A table added since is copied while streaming (addResnapshots).
func (r *reader) validate(p *Position) error {
	if p.Slot != r.cfg.Slot {
		return fmt.Errorf("checkpoint belongs to slot %s, but the settings name slot %s", p.Slot, r.cfg.Slot)
	}
	var now []string
	for _, t := range r.cfg.TableNames {
		now = append(now, t.String())
	}
	// A table captured by a pattern and dropped since was released (patterns.go).
	if slices.ContainsFunc(p.Tables, func(t string) bool { return !slices.Contains(now, t) && !slices.Contains(r.released, t) }) {
		return fmt.Errorf("the tables changed since this pipeline started (checkpoint: %s; settings: %s): changing the table set of a running pipeline is not supported; start a new pipeline with its own slot",
			strings.Join(p.Tables, ", "), strings.Join(now, ", "))
	}
	return nil
}

func (r *reader) tableNames() []string {
	out := make([]string, len(r.cfg.TableNames))
	for i, t := range r.cfg.TableNames {
		out[i] = t.String()
	}
	return out
}

// ensurePublication creates the publication when it is missing, and the append publication too, even with no
// table in mode: append yet: a table added to the pipeline later can only come through a publication that existed
// at the slot's position (resnapshot.go publish). An existing one is used as it is (check says what it lacks).
func (r *reader) ensurePublication(ctx context.Context) error {
	var full, appendOnly []*table
	for _, tn := range r.cfg.TableNames {
		if t := r.tables[tn.String()]; t.Append {
			appendOnly = append(appendOnly, t)
		} else {
			full = append(full, t)
		}
	}
	existed := false
	for _, p := range []struct {
		name       string
		tables     []*table
		appendOnly bool
	}{{r.cfg.Publication, full, false}, {r.cfg.AppendPublication(), appendOnly, true}} {
		var exists bool
		if err := r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, p.name).Scan(&exists); err != nil {
			return r.cfg.Explain(err)
		}
		if exists {
			existed = true
			continue
		}
		pub := pgx.Identifier{p.name}.Sanitize()
		_, err := r.pool.Exec(ctx, createPublicationSQL(p.name, p.tables, p.appendOnly)+"; COMMENT ON PUBLICATION "+pub+" IS '"+publicationComment+"'")
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42710" {
			continue // created meanwhile by someone else
		}
		if err != nil && p.appendOnly && len(p.tables) == 0 {
			// Only for tables added later: a role that may not create it loses that, not the pipeline.
			r.log.Warn("cannot create the (empty) append publication: a table in mode: append cannot be added to this pipeline later", "publication", p.name, "error", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("create publication %s (run check for what is missing): %w", p.name, r.cfg.Explain(err))
		}
		r.log.Info("created publication", "publication", p.name)
	}
	if existed {
		// A publication made by hand must cover the tables, or their changes would silently never come.
		if p := publicationProblems(ctx, r.pool, r.cfg, append(full, appendOnly...), false); len(p) > 0 {
			return p
		}
	}
	return nil
}

// start begins a pipeline that has no checkpoint. A new slot exports its snapshot, which a REPEATABLE READ
// transaction imports, so the copy is exactly the state before the slot's first change. An existing slot
// (a crash before the first checkpoint was durable, or a slot made by hand) has no snapshot any more: the
// copy then reads the current state, and streaming from the slot's confirmed position replays every change
// since, so the destination converges (each change is an upsert or a delete by key).
func (r *reader) start(ctx context.Context) (*Position, pgx.Tx, error) {
	pos := &Position{V: positionVersion, Phase: PhaseStream, Slot: r.cfg.Slot, Tables: r.tableNames(), OIDs: r.oids()}
	if *r.cfg.Snapshot {
		pos.Phase = PhaseSnapshot
	}
	var (
		confirmed *string
		plugin    string
		database  *string
	)
	err := r.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text, coalesce(plugin, ''), database FROM pg_replication_slots WHERE slot_name = $1`,
		r.cfg.Slot).Scan(&confirmed, &plugin, &database)
	switch {
	case err == nil:
		if plugin != "pgoutput" || database == nil || *database != r.cfg.Database || confirmed == nil {
			return nil, nil, fmt.Errorf("replication slot %s exists but is not a pgoutput slot of database %s: choose another slot name", r.cfg.Slot, r.cfg.Database)
		}
		pos.LSN = *confirmed
		r.log.Info("replication slot exists: copying the current rows, then streaming from the slot's position", "lsn", pos.LSN)
		return pos, nil, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, nil, r.cfg.Explain(err)
	}

	repl, err := r.cfg.ConnectReplication(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer repl.Close(context.Background())
	action := "NOEXPORT_SNAPSHOT"
	if *r.cfg.Snapshot {
		action = "EXPORT_SNAPSHOT"
	}
	// No checkpoint exists yet to carry the wait to `skippr status`: the log says it.
	res, err := r.createSlot(ctx, repl, r.cfg.Slot,
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: action}, "to start the pipeline", nil)
	if err != nil {
		if fault.ClassOf(err) != fault.Unknown { // the wait's own verdict, or a cancelled Read
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("create replication slot %s (run check for what is missing): %w", r.cfg.Slot, r.cfg.Explain(err))
	}
	pos.LSN = res.ConsistentPoint
	r.log.Info("created replication slot", "lsn", pos.LSN)
	if !*r.cfg.Snapshot {
		return pos, nil, nil
	}
	// Import the snapshot now: it dies with the next command on the replication session.
	tx, err := r.beginSnapshot(ctx, res.SnapshotName)
	if err != nil {
		return nil, nil, err
	}
	return pos, tx, nil
}

// beginSnapshot opens the snapshot's transaction: the exported snapshot when there is one, else a fresh one.
func (r *reader) beginSnapshot(ctx context.Context, exported string) (pgx.Tx, error) {
	tx, err := r.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, r.cfg.Explain(err)
	}
	if exported != "" {
		if _, err := tx.Exec(ctx, `SET TRANSACTION SNAPSHOT '`+exported+`'`); err != nil {
			tx.Rollback(context.Background())
			return nil, fmt.Errorf("import snapshot %s: %w", exported, r.cfg.Explain(err))
		}
	}
	// Each table is one key-ordered query read to its end (snapshot.go). Without a LIMIT the planner could
	// prefer sorting the whole table before the first row, and a role's statement_timeout would cut a large
	// table short again and again. SET takes no snapshot, so it disturbs neither the imported one nor the
	// first statement of a resumed copy.
	if _, err := tx.Exec(ctx, `SET LOCAL enable_sort = off; SET LOCAL statement_timeout = 0`); err != nil {
		tx.Rollback(context.Background())
		return nil, fmt.Errorf("snapshot settings: %w", r.cfg.Explain(err))
	}
	return tx, nil
}

// emitBatch sends a batch, announcing the stream's schema first when it is new to this Read or changed.
func (r *reader) emitBatch(ctx context.Context, stream string, key []string, rec arrow.RecordBatch) error {
	id := r.ids.ID(stream, rec.Schema())
	if r.announced[stream] != id {
		if err := r.out.SchemaChange(ctx, serve.Stream{Name: stream, Schema: rec.Schema(), PrimaryKey: key,
			Modes: []serve.SyncMode{serve.ModeSnapshot, serve.ModeCDC}}); err != nil {
			return err
		}
		r.announced[stream] = id
	}
	r.emitted = true
	return r.out.Batch(ctx, stream, rec)
}

// heartbeat runs for the whole Read: it writes a WAL message (so the server's position moves and reaches
// the slot even when nothing else happens), warns when the slot holds back too much WAL, fails the Read when
// the slot has lost WAL, and lets the slot move over data-free WAL.
func (r *reader) heartbeat(ctx context.Context) error {
	every := r.cfg.HeartbeatEvery
	t := time.NewTicker(every)
	defer t.Stop()
	warned, emitFailed := false, false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var (
			retained  *int64
			walStatus *string
		)
		err := r.pool.QueryRow(qctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, wal_status FROM pg_replication_slots WHERE slot_name = $1`,
			r.cfg.Slot).Scan(&retained, &walStatus)
		if err == nil {
			r.slot.set(retained, walStatus)
		}
		if err == nil && walStatus != nil && *walStatus == "lost" {
			cancel()
			return fault.ResnapshotErr(fmt.Errorf("replication slot %s has lost WAL it needed (wal_status = lost, see max_slot_wal_keep_size): it cannot continue; drop it and sync again from a snapshot", r.cfg.Slot),
				"re-snapshot: run `skippr teardown PIPELINE`, then sync the pipeline under a new name and wal.url so its tables are copied again")
		}
		if err == nil && retained != nil {
			if *retained > r.cfg.MaxRetainedWALBytes && !warned {
				r.log.Warn("replication slot holds back more WAL than max_retained_wal_bytes", "retained_bytes", *retained, "max_retained_wal_bytes", r.cfg.MaxRetainedWALBytes)
				warned = true
			} else if *retained <= r.cfg.MaxRetainedWALBytes {
				warned = false
			}
		}
		if _, err := r.pool.Exec(qctx, `SELECT pg_logical_emit_message(false, 'skippr-heartbeat', '')`); err != nil && !emitFailed && ctx.Err() == nil {
			r.log.Warn("heartbeat: cannot write a WAL message; an idle database may hold WAL until the next change", "error", err)
			emitFailed = true
		}
		cancel()
		r.st.mu.Lock()
		r.st.mayIdle = true
		r.st.mu.Unlock()
		r.st.poke()
	}
}

// Package source is the PostgreSQL change source: a consistent snapshot of the configured tables, then
// logical replication (pgoutput, protocol version 1) from a replication slot. plugins/postgres/README.md
// describes the design; position.go the checkpoint format.
//
// Data is released only by Ack: the slot's confirmed flush position moves to an acknowledged checkpoint, so
// everything after the last durable checkpoint is still in the slot after a crash. The one exception is a
// stretch of WAL that carries no data for this pipeline: once everything emitted is acknowledged, the
// heartbeat lets the slot move over it, so an idle publication does not hold back the server's WAL.
package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protect"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/postgres/config"
	"github.com/skippr-dev/skippr/plugins/postgres/typemap"
)

// Source reads changes. One value serves a plugin process: Ack finds the Read it belongs to by slot name.
type Source struct {
	mu    sync.Mutex
	reads map[string]*slotState      // running Reads, by slot
	last  map[string]config.Settings // settings of the last Read of each slot, for an Ack after it ended
	// warm holds the sessions of passed checks for the Read that follows (warm.go).
	warm warmStarts
	// chunkRead, when set (by tests), runs between a re-snapshot chunk's select and its high watermark: the
	// window a change must fall in to make the chunk's row of it stale.
	chunkRead func(ctx context.Context, table string, keys []string)
}

// New returns a source.
func New() *Source {
	return &Source{reads: map[string]*slotState{}, last: map[string]config.Settings{}}
}

// CanResnapshot: the source copies tables again by the watermark method (resnapshot.go), so Serve announces
// the source.resnapshot service.
func (s *Source) CanResnapshot() bool { return true }

var _ serve.Resnapshotter = (*Source)(nil)

// Discover describes the configured tables as streams.
func (s *Source) Discover(ctx context.Context, raw json.RawMessage) ([]serve.Stream, error) {
	cfg, err := config.ParseSource(raw)
	if err != nil {
		return nil, err
	}
	if len(cfg.TableNames) == 0 && len(cfg.Patterns) == 0 {
		return nil, errors.New("settings: tables is empty: list the tables to replicate as schema.table")
	}
	conn, err := cfg.Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	if err := expandPatterns(ctx, conn, &cfg); err != nil {
		return nil, err
	}
	r := typemap.NewResolver()
	var out []serve.Stream
	for _, tn := range cfg.TableNames {
		t, err := loadConfigured(ctx, conn, r, cfg, tn)
		if err != nil {
			return nil, err
		}
		if len(t.Key) == 0 && !t.exact() {
			return nil, fault.ConfigErr(fmt.Errorf("table %s has no primary key or replica identity index", tn),
				fmt.Sprintf("add a primary key, name the columns that identify a row in table_options: {%s: {key_columns: [...]}} (with REPLICA IDENTITY FULL), or carry its inserts only with table_options: {%s: {mode: append}}", tn, tn))
		}
		st := t.stream(cfg.Policy)
		// Discover does not know whether the pipeline runs: a missing column is Read's to refuse at a first start.
		if err := cfg.Protect.Check(st.Name, st.Schema, t.Key, true); err != nil {
			return nil, err
		}
		out = append(out, cfg.Protect.Stream(st))
	}
	return out, nil
}

// slotState is shared by a running Read and Ack.
type slotState struct {
	mu        sync.Mutex
	acked     pglogrepl.LSN // highest acknowledged stream position
	sent      pglogrepl.LSN // flush position last reported to the server
	streaming bool
	// idle: everything before it is delivered, and nothing emitted after dataCP (the position of the last
	// checkpoint that covered data; at least where streaming started). When dataCP is durable (acknowledged,
	// or base: the checkpoint the Read started from, which the engine holds durably) the slot may move to
	// idle without losing anything.
	idle, dataCP, base pglogrepl.LSN
	// mayIdle is set by the heartbeat: the next status update may report idle instead of acked.
	mayIdle bool
	wake    chan struct{} // wakes the replication loop to report a new position
	sentCh  chan struct{} // closed (and replaced) whenever sent moves
	// cancelRecv interrupts the replication loop's wait for a message.
	cancelRecv func()
	done       chan struct{} // closed when the Read has ended
}

func newSlotState() *slotState {
	return &slotState{wake: make(chan struct{}, 1), sentCh: make(chan struct{}), done: make(chan struct{})}
}

// target is the flush position to report: the acknowledged one, or an idle one over data-free WAL.
func (st *slotState) target() (pglogrepl.LSN, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	t, usedIdle := st.acked, false
	if st.mayIdle && max(st.acked, st.base) >= st.dataCP && st.idle > t {
		t, usedIdle = st.idle, true
	}
	return t, usedIdle
}

func (st *slotState) markSent(lsn pglogrepl.LSN, usedIdle bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if usedIdle {
		st.mayIdle = false
	}
	if lsn > st.sent {
		st.sent = lsn
		close(st.sentCh)
		st.sentCh = make(chan struct{})
	}
}

func (st *slotState) poke() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
	st.mu.Lock()
	if st.cancelRecv != nil {
		st.cancelRecv()
	}
	st.mu.Unlock()
}

// register marks a Read of a slot as running; one Read per slot per process. A Read that was just cancelled
// may still be closing its sessions: the new one waits for it.
func (s *Source) register(ctx context.Context, cfg config.Settings) (*slotState, error) {
	wait := time.NewTimer(30 * time.Second)
	defer wait.Stop()
	for {
		s.mu.Lock()
		prev, ok := s.reads[cfg.Slot]
		if !ok {
			st := newSlotState()
			s.reads[cfg.Slot] = st
			s.last[cfg.Slot] = cfg
			s.mu.Unlock()
			return st, nil
		}
		s.mu.Unlock()
		select {
		case <-prev.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wait.C:
			return nil, fmt.Errorf("slot %s is already being read by this plugin process", cfg.Slot)
		}
	}
}

func (s *Source) unregister(slot string, st *slotState) {
	s.mu.Lock()
	if s.reads[slot] == st {
		delete(s.reads, slot)
	}
	s.mu.Unlock()
	st.mu.Lock()
	st.streaming = false
	close(st.sentCh)
	st.sentCh = make(chan struct{})
	st.mu.Unlock()
	close(st.done)
}

// Ack releases everything up to a checkpoint: the slot's confirmed flush position moves to its LSN. A
// snapshot checkpoint releases nothing (the slot stays at its consistent point until the snapshot is done).
// With a Read of the slot running, Ack returns once the server has been sent the new position.
func (s *Source) Ack(ctx context.Context, checkpoint []byte) error {
	inner, _, err := protect.Unwrap(checkpoint)
	if err != nil {
		return err
	}
	p, err := DecodePosition(inner)
	if err != nil {
		return err
	}
	if p == nil || p.Phase != PhaseStream {
		return nil
	}
	lsn := p.LSNValue()
	s.mu.Lock()
	st := s.reads[p.Slot]
	cfg, known := s.last[p.Slot]
	s.mu.Unlock()
	if st != nil {
		st.mu.Lock()
		if lsn > st.acked {
			st.acked = lsn
		}
		st.mu.Unlock()
		st.poke()
		for {
			st.mu.Lock()
			done, running, ch := st.sent >= lsn, st.streaming, st.sentCh
			st.mu.Unlock()
			if done {
				return nil
			}
			if !running {
				// Not streaming yet: the replication loop reports acked when it starts. Ended: fall through.
				s.mu.Lock()
				still := s.reads[p.Slot] == st
				s.mu.Unlock()
				if still {
					return nil
				}
				break
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if !known {
		return fmt.Errorf("ack of slot %s: no Read of this slot ran in this plugin process", p.Slot)
	}
	return advance(ctx, cfg, lsn)
}

// advance moves an idle slot's confirmed flush position forward, when no Read holds the slot.
func advance(ctx context.Context, cfg config.Settings, lsn pglogrepl.LSN) error {
	conn, err := cfg.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var confirmed pglogrepl.LSN
	if err := conn.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn, '0/0') FROM pg_replication_slots WHERE slot_name = $1`, cfg.Slot).Scan(&confirmed); err != nil {
		return fmt.Errorf("ack of slot %s: %w", cfg.Slot, cfg.Explain(err))
	}
	if lsn <= confirmed {
		return nil
	}
	for attempt := 0; ; attempt++ {
		_, err := conn.Exec(ctx, `SELECT pg_replication_slot_advance($1, $2)`, cfg.Slot, lsn.String())
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55006" && attempt < 100 {
			// Still held by the session of a Read that just ended.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("ack of slot %s: advance to %s: %w", cfg.Slot, lsn, cfg.Explain(err))
		}
		return nil
	}
}

// Drop removes the pipeline's replication slot, and its publication when this plugin created it (the
// publication's comment says so), and says what it removed. `skippr teardown` calls it (through the
// protocol's Teardown) when a pipeline is deleted; without it the slot keeps WAL forever.
func Drop(ctx context.Context, raw json.RawMessage) (released []string, err error) {
	cfg, err := config.Parse(raw)
	if err != nil {
		return nil, err
	}
	conn, err := cfg.Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	var pid *int32
	err = conn.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, cfg.Slot).Scan(&pid)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, cfg.Explain(err)
	case pid != nil:
		return nil, fmt.Errorf("slot %s is in use by server process %d: stop the pipeline first", cfg.Slot, *pid)
	default:
		if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, cfg.Slot); err != nil {
			return nil, fmt.Errorf("drop slot %s: %w", cfg.Slot, cfg.Explain(err))
		}
		slog.Info("dropped replication slot", "slot", cfg.Slot)
		released = append(released, "replication slot "+cfg.Slot)
	}
	for _, pub := range []string{cfg.Publication, cfg.AppendPublication()} {
		var ours bool
		err = conn.QueryRow(ctx, `SELECT coalesce(obj_description(oid, 'pg_publication') = $2, false) FROM pg_publication WHERE pubname = $1`,
			pub, publicationComment).Scan(&ours)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !ours) {
			continue
		}
		if err != nil {
			return released, cfg.Explain(err)
		}
		if _, err := conn.Exec(ctx, `DROP PUBLICATION `+pgx.Identifier{pub}.Sanitize()); err != nil {
			return released, fmt.Errorf("drop publication %s: %w", pub, cfg.Explain(err))
		}
		slog.Info("dropped publication", "publication", pub)
		released = append(released, "publication "+pub)
	}
	return released, nil
}

// publicationComment marks a publication this plugin created, so Drop removes only its own.
const publicationComment = "created by skippr"

// poolSize: the snapshot's readers, the heartbeat, and one for catalog reads and fetches beside them.
func poolSize(cfg config.Settings) int32 { return int32(cfg.SnapshotParallel) + 2 }

// newPool makes the Read's pool of ordinary sessions; it opens none (see openPool).
func newPool(cfg config.Settings) (*pgxpool.Pool, error) {
	cc, err := cfg.ConnConfig()
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, err
	}
	pc.ConnConfig = cc
	pc.MaxConns = poolSize(cfg)
	return pgxpool.NewWithConfig(context.Background(), pc)
}

// openPool is newPool with one session opened, so that a server out of reach fails here.
func openPool(ctx context.Context, cfg config.Settings) (*pgxpool.Pool, error) {
	pool, err := newPool(cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, cfg.Explain(err)
	}
	return pool, nil
}

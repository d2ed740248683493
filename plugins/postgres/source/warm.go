package source

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skippr-dev/skippr/plugins/postgres/config"
)

// An hourly job's start (`skippr sync --once`, issue #31: the source's first row within 300 ms of the command)
// is, for this source, mostly round trips to the server: the engine calls Check, then Read, in the same plugin
// process, and each opened its own sessions. A session costs the server a process and an authentication, the
// replication one a walsender too. So a Check that passes leaves its ordinary sessions (a pool) and its
// replication session, already identified, to the Read that follows; the Read opens what it was not left
// (warmStart.take), and opens its replication session while its catalog queries run.
//
// Only sessions are handed on, never what the check read through them: the Read reads the catalog, the
// publications and the slot again, so whatever changed between the two — a column or table added, a
// publication altered, a slot dropped — is seen by the Read exactly as without the hand-off. A session carries
// no state of its own that the Read relies on: the replication session has run IDENTIFY_SYSTEM only (no slot,
// no snapshot), and the pool's sessions hold only the session parameters every session of the plugin sets
// (typemap.SessionParams) and pgx's cached statements, which the server re-plans when the catalog changes.
// A session the server closed meanwhile fails its first use: pgxpool pings a session idle for over a second
// before handing it out, and a replication session that fails to start is replaced by a new one.

// warmKeep is how long a passed check's sessions wait for their Read. `skippr sync` reads right after its
// checks (and opening its WAL); `skippr connect` never reads, and the plugin exits after it anyway.
const warmKeep = 10 * time.Second

// warmStart is what a passed Check leaves for the Read of the same slot.
type warmStart struct {
	conn  string         // config.Settings.ConnKey of the sessions: a Read with other connection settings opens its own
	pool  *pgxpool.Pool  // sized by newPool for these settings
	repl  *pgconn.PgConn // nil when none
	timer *time.Timer    // closes them when no Read takes them in time
}

func (w *warmStart) close() {
	if w.repl != nil {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		w.repl.Close(cctx)
		cancel()
	}
	w.pool.Close()
}

// warmStarts holds, by slot, the sessions passed checks left.
type warmStarts struct {
	mu sync.Mutex
	by map[string]*warmStart
}

// leave keeps a passed check's sessions for the next Read of slot, closing those of an earlier check.
func (ws *warmStarts) leave(slot string, w *warmStart) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.by == nil {
		ws.by = map[string]*warmStart{}
	}
	if old := ws.by[slot]; old != nil {
		old.timer.Stop()
		go old.close()
	}
	w.timer = time.AfterFunc(warmKeep, func() {
		ws.mu.Lock()
		if ws.by[slot] != w {
			ws.mu.Unlock()
			return
		}
		delete(ws.by, slot)
		ws.mu.Unlock()
		w.close()
	})
	ws.by[slot] = w
}

// take returns the sessions a check left for cfg's slot, when they were opened with cfg's connection settings;
// nil otherwise. The caller owns what it gets.
func (ws *warmStarts) take(cfg config.Settings) *warmStart {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.by[cfg.Slot]
	if w == nil || !w.timer.Stop() {
		return nil
	}
	delete(ws.by, cfg.Slot)
	if w.conn != cfg.ConnKey() || w.pool.Config().MaxConns != poolSize(cfg) {
		go w.close()
		return nil
	}
	return w
}

// replDial is a replication session being opened beside other work.
type replDial struct {
	done    chan struct{}
	conn    *pgconn.PgConn
	err     error
	at      time.Time
	discard func() // closes the session once it is open, if it opened; once, however often called
}

// dialReplication starts opening a replication session; wait (or discard) collects it.
func dialReplication(ctx context.Context, cfg config.Settings) *replDial {
	d := newReplDial()
	go func() {
		defer close(d.done)
		d.conn, d.err = cfg.ConnectReplication(ctx)
	}()
	return d
}

// readyReplication is a session already open (a check's).
func readyReplication(c *pgconn.PgConn) *replDial {
	d := newReplDial()
	d.conn = c
	close(d.done)
	return d
}

// wait returns the session, or why it could not be opened.
func (d *replDial) wait(ctx context.Context) (*pgconn.PgConn, error) {
	select {
	case <-d.done:
		return d.conn, d.err
	case <-ctx.Done():
		go d.discard()
		return nil, ctx.Err()
	}
}

func newReplDial() *replDial {
	d := &replDial{done: make(chan struct{}), at: time.Now()}
	d.discard = sync.OnceFunc(func() {
		<-d.done
		if d.conn != nil {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			d.conn.Close(cctx)
			cancel()
		}
	})
	return d
}

// steps times the round trips of a start (Check, Read up to streaming) and logs them at debug level as one
// line: each step's milliseconds in order, and the total. `skippr --log-level debug sync` shows it beside the
// engine's own start phases (engine/run/startlog.go).
type steps struct {
	log         *slog.Logger
	msg         string
	start, last time.Time
	attrs       []any
}

func newSteps(log *slog.Logger, msg string) *steps {
	now := time.Now()
	return &steps{log: log, msg: msg, start: now, last: now}
}

// step ends the step name now.
func (s *steps) step(name string) {
	now := time.Now()
	s.attrs = append(s.attrs, name+"_ms", roundMS(now.Sub(s.last)))
	s.last = now
}

// add records a duration measured apart (a step that ran beside the others).
func (s *steps) add(name string, d time.Duration) { s.attrs = append(s.attrs, name+"_ms", roundMS(d)) }

func (s *steps) done() {
	s.log.Debug(s.msg, append(s.attrs, "total_ms", roundMS(time.Since(s.start)))...)
}

func roundMS(d time.Duration) float64 {
	return math.Round(float64(d)/float64(100*time.Microsecond)) / 10
}

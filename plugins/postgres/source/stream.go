package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/postgres/config"
	"github.com/skippr-dev/skippr/plugins/postgres/typemap"
)

const (
	// statusEvery keeps the walsender (wal_sender_timeout, 60 s by default) sure we are alive, even while
	// the engine applies backpressure.
	statusEvery = 10 * time.Second
	// quietAfter is how long without changes before the loop asks the server whether it is caught up.
	quietAfter = 200 * time.Millisecond
	// The replication loop hands decoded messages to the processor in runs of up to handOff messages or
	// handOffBytes, queueLen runs at most in flight (so memory stays bounded with large rows). A hand-off
	// per message cost more CPU than decoding it (a goroutine wake-up each: BENCHMARKS.md). A row waits
	// for the rest of its run only until its commit, a keepalive or a read timeout, and no checkpoint can
	// come before the commit anyway.
	handOff      = 256
	handOffBytes = 1 << 20
	queueLen     = 8
	// slotBusyWait bounds the wait for another walsender to leave the slot: Postgres's default
	// wal_sender_timeout (60 s) plus room for a server that checks late.
	slotBusyWait = 2 * time.Minute
)

// item is what the replication loop hands to the processor, in server order.
type item struct {
	walStart pglogrepl.LSN
	msg      pglogrepl.Message
	// A keepalive: the server has sent everything before walEnd. caughtUp: and it had reached the end of
	// the WAL as it was when we last had nothing to do.
	keepalive bool
	walEnd    pglogrepl.LSN
	caughtUp  bool
}

// stream runs logical replication from pos until ctx ends or something fails.
func (r *reader) stream(ctx context.Context, pos *Position) error {
	// The first check judges the publications as they are now (a table dropped from one while no pipeline
	// streamed is caught here); each later one compares with the one before (pubwatch.go).
	pub := newPubWatch(r)
	if err := pub.check(ctx, pos.LSNValue(), pos.LSNValue()); err != nil {
		return err
	}
	if r.steps != nil {
		r.steps.step("publications")
	}
	conn, err := r.startReplication(ctx, pos.LSNValue())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn.Close(cctx)
		cancel()
	}()
	r.st.mu.Lock()
	r.st.streaming = true
	r.st.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := make(chan []item, queueLen)
	ownDone := make(chan struct{})
	var ownErr error
	go func() {
		ownErr = r.own(ctx, conn, items)
		close(ownDone)
	}()
	p := &processor{r: r, rels: map[uint32]*relation{}, pos: pos.LSNValue(), lastCP: pos.LSNValue(), rows: pos.Rows, overlap: pos.OverlapValue(),
		copied: map[string]pglogrepl.LSN{}}
	p.rs = newResnapper(p, pos.Resnapshot)
	p.pub = pub
	for name, l := range pos.Copied {
		if _, again := pos.Recopy[name]; !again { // a copy to start over gets a new point
			p.copied[name], _ = pglogrepl.ParseLSN(l) // DecodePosition checked it
		}
	}
	p.recopy = maps.Clone(pos.Recopy)
	p.lastCols = maps.Clone(pos.Columns)
	if p.lastCols == nil {
		p.lastCols = map[string][]RelationColumn{}
	}
	if p.recopy == nil {
		p.recopy = map[string]RecopyProgress{}
	}
	defer p.release()
	defer p.rs.close()
	defer p.stopRecopy()
	err = p.run(ctx, items, ownDone)
	cancel()
	<-ownDone
	if errors.Is(err, errOwnerEnded) {
		return ownErr
	}
	return err
}

var errOwnerEnded = errors.New("replication loop ended")

// startReplication opens a replication session and starts streaming from lsn. A slot still held by a
// session that is going away (a Read that just ended) is waited for.
func (r *reader) startReplication(ctx context.Context, lsn pglogrepl.LSN) (*pgconn.PgConn, error) {
	var (
		confirmed *string
		walStatus *string
	)
	err := r.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text, wal_status FROM pg_replication_slots WHERE slot_name = $1`, r.cfg.Slot).Scan(&confirmed, &walStatus)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fault.ResnapshotErr(fmt.Errorf("replication slot %s does not exist (dropped?): the pipeline must start again from an empty checkpoint", r.cfg.Slot),
			"re-snapshot: run `skippr teardown PIPELINE`, then sync the pipeline under a new name and wal.url so its tables are copied again")
	}
	if err != nil {
		return nil, r.cfg.Explain(err)
	}
	if walStatus != nil && *walStatus == "lost" {
		return nil, fault.ResnapshotErr(fmt.Errorf("replication slot %s has lost WAL it needed (wal_status = lost, see max_slot_wal_keep_size): it cannot continue; drop it and sync again from a snapshot", r.cfg.Slot),
			"re-snapshot: run `skippr teardown PIPELINE`, then sync the pipeline under a new name and wal.url so its tables are copied again")
	}
	if c, err := parseLSN(confirmed); err == nil && c > lsn {
		// Only data-free WAL is skipped this way (see package doc); the server starts at its own position.
		r.log.Info("the slot is ahead of the checkpoint; streaming starts at the slot's position", "checkpoint", lsn.String(), "slot_position", c.String())
	}
	pubs := []string{pgx.Identifier{r.cfg.Publication}.Sanitize()}
	for _, tn := range r.cfg.TableNames {
		if r.cfg.Append(tn) { // the tables in mode: append come through their own, inserts-only publication
			pubs = append(pubs, pgx.Identifier{r.cfg.AppendPublication()}.Sanitize())
			break
		}
	}
	args := []string{"proto_version '1'", "publication_names '" + strings.ReplaceAll(strings.Join(pubs, ","), "'", "''") + "'"}
	if r.messages {
		args = append(args, "messages 'true'")
	}
	if r.steps != nil {
		r.steps.step("slot")
	}
	var busySince time.Time // when the slot was first found in use by another walsender
	for attempt := 0; ; attempt++ {
		conn, opened, err := r.replicationSession(ctx)
		if err != nil {
			return nil, err
		}
		if r.steps != nil {
			r.steps.step("replication_session")
		}
		err = pglogrepl.StartReplication(ctx, conn, r.cfg.Slot, lsn, pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: args})
		if err == nil {
			r.log.Debug("streaming", "from", lsn.String())
			if r.steps != nil {
				r.steps.step("start_replication")
				r.steps.done()
				r.steps = nil
			}
			config.CoalesceReads(conn)
			return conn, nil
		}
		conn.Close(context.Background())
		var pgErr *pgconn.PgError
		if !opened && !errors.As(err, &pgErr) && ctx.Err() == nil {
			// A session opened before (a check's, or beside the catalog queries) that the server or the
			// network closed meanwhile: the next attempt opens a new one.
			r.log.Debug("replication session opened before failed; opening a new one", "error", err)
			continue
		}
		if errors.As(err, &pgErr) && pgErr.Code == "55006" {
			// A slot admits one walsender. The previous reader's (a run that just ended, or a fleet worker
			// that lost the pipeline while cut off or paused) lasts until Postgres notices it is gone, at most
			// wal_sender_timeout: wait for it, saying so once, rather than fail and be restarted in a loop.
			if busySince.IsZero() {
				busySince = time.Now()
			}
			waited := time.Since(busySince)
			if waited < slotBusyWait {
				if attempt == 20 {
					r.log.Warn("replication slot is in use by another reader; waiting for it to go (a previous holder's walsender lasts until the server's wal_sender_timeout)",
						"slot", r.cfg.Slot, "waited", waited.Round(time.Millisecond), "wait_at_most", slotBusyWait)
				}
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			return nil, fmt.Errorf("start replication from slot %s at %s: still in use by another reader after %s (another pipeline on the same slot?): %w",
				r.cfg.Slot, lsn, waited.Round(time.Second), r.cfg.Explain(err))
		}
		return nil, fmt.Errorf("start replication from slot %s at %s: %w", r.cfg.Slot, lsn, r.cfg.Explain(err))
	}
}

// replicationSession returns the session opened before for streaming (warm.go) when there is one and it is
// young enough, else opens one (opened true). A session idle longer than warmKeep (a snapshot ran first) is
// not trusted: the server may have ended it (idle_session_timeout, a restart).
func (r *reader) replicationSession(ctx context.Context) (conn *pgconn.PgConn, opened bool, err error) {
	if d := r.repl; d != nil {
		r.repl = nil
		if time.Since(d.at) < warmKeep {
			c, err := d.wait(ctx)
			if err == nil {
				return c, false, nil
			}
			if ctx.Err() != nil {
				return nil, false, ctx.Err()
			}
			r.log.Debug("replication session opened before the catalog queries failed; opening a new one", "error", err)
		} else {
			go d.discard()
		}
	}
	conn, err = r.cfg.ConnectReplication(ctx)
	return conn, true, err
}

// owner is the only user of the replication session: it receives messages, hands them on in order, reports
// the flush position (the acknowledged one; see slotState.target) and answers the server. run is its loop; each
// kind of event (a message, a read timeout, a full hand-off queue) has a method of its own, and what they share
// between two messages is in the struct.
type owner struct {
	r       *reader
	st      *slotState
	conn    *pgconn.PgConn
	netConn net.Conn
	items   chan<- []item

	lastStatus  time.Time
	lastData    time.Time
	quietTarget pglogrepl.LSN
	asked       bool // a keepalive was requested since the last change
	reply       bool // the server asked for a status update
	askReply    bool // we want a keepalive
	armed       bool // the read deadline is set for the current wait

	// run is the hand-off being gathered, runBytes its WAL data's size.
	run      []item
	runBytes int
}

// own runs the owner of conn until ctx ends or the session fails.
func (r *reader) own(ctx context.Context, conn *pgconn.PgConn, items chan<- []item) error {
	o := &owner{r: r, st: r.st, conn: conn, netConn: conn.Conn(), items: items, lastData: time.Now()}
	return o.loop(ctx)
}

// loop receives until ctx ends or something fails.
func (o *owner) loop(ctx context.Context) error {
	st := o.st
	// Waits are bounded by the socket's read deadline rather than a context per message (pgx would start a
	// goroutine for each); an Ack, and the end of the Read, pull the deadline to now.
	st.mu.Lock()
	st.cancelRecv = o.interrupt
	st.mu.Unlock()
	defer func() {
		st.mu.Lock()
		st.cancelRecv = nil
		st.mu.Unlock()
	}()
	stop := context.AfterFunc(ctx, o.interrupt)
	defer stop()
	if err := o.sendStatus(ctx, true); err != nil {
		return err
	}
	for {
		select {
		case <-st.wake:
		default:
		}
		if err := o.sendStatus(ctx, false); err != nil {
			return err
		}
		if err := o.arm(); err != nil {
			return err
		}
		msg, err := o.conn.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				if err := o.timedOut(ctx); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("receive from replication slot %s: %w", o.r.cfg.Slot, o.r.cfg.Explain(err))
		}
		if err := o.receive(ctx, msg); err != nil {
			return err
		}
	}
}

// interrupt ends the wait for the next message now.
func (o *owner) interrupt() { _ = o.netConn.SetReadDeadline(time.Now()) }

// arm sets the read deadline for the next wait, unless it is set already: the next status update, or the end
// of a quiet spell when no keepalive was asked for since the last change.
func (o *owner) arm() error {
	if o.armed {
		return nil
	}
	deadline := o.lastStatus.Add(statusEvery)
	if !o.asked {
		if d := o.lastData.Add(quietAfter); d.Before(deadline) {
			deadline = d
		}
	}
	if err := o.netConn.SetReadDeadline(deadline); err != nil {
		return fmt.Errorf("replication session: %w", err)
	}
	o.armed = true
	// An Ack that came since the status update before it must not wait for the deadline.
	if len(o.st.wake) > 0 {
		o.interrupt()
	}
	return nil
}

// timedOut handles the end of a wait without a message: what was gathered goes on, and after a quiet spell the
// server is asked how far its WAL goes, to tell a caught-up stream from one still decoding.
func (o *owner) timedOut(ctx context.Context) error {
	o.armed = false
	if err := o.forward(ctx); err != nil {
		return err
	}
	if !o.asked && time.Since(o.lastData) >= quietAfter {
		w, err := o.r.serverFlushLSN(ctx)
		if err != nil {
			return err
		}
		o.quietTarget, o.asked, o.askReply = w, true, true
	}
	return nil
}

// receive handles one message of the session.
func (o *owner) receive(ctx context.Context, msg pgproto3.BackendMessage) error {
	switch m := msg.(type) {
	case *pgproto3.CopyData:
		if len(m.Data) == 0 {
			return nil
		}
		switch m.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			return o.keepalive(ctx, m.Data[1:])
		case pglogrepl.XLogDataByteID:
			return o.xlogData(ctx, m.Data[1:])
		}
	case *pgproto3.ErrorResponse:
		if m.Code == "42704" && strings.HasPrefix(m.Message, "publication ") {
			// DROP PUBLICATION mid-stream: pgoutput fails at the first change decoded past it, and every retry
			// from the slot meets the same change; a publication created again later does not help, because
			// the change is decoded with the catalog as of its position (PostgreSQL before 18).
			return fault.ResnapshotErr(fmt.Errorf("replication slot %s: %s (%s): the publication was dropped (and perhaps created again) after the slot's position, and the server cannot decode the slot's changes written while it was missing",
				o.r.cfg.Slot, m.Message, m.Where),
				"re-snapshot: run `skippr teardown PIPELINE`, then sync the pipeline under a new name and wal.url (a new pipeline creates its publication), so its tables are copied again")
		}
		return fmt.Errorf("replication slot %s: %w", o.r.cfg.Slot, o.r.cfg.Explain(pgconn.ErrorResponseToPgError(m)))
	case *pgproto3.CopyDone:
		return fmt.Errorf("replication slot %s: the server ended replication", o.r.cfg.Slot)
	}
	return nil
}

// keepalive handles a primary keepalive: it says whether the stream caught up with the point asked about, and
// goes on with what was gathered before it.
func (o *owner) keepalive(ctx context.Context, data []byte) error {
	pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(data)
	if err != nil {
		return fmt.Errorf("parse keepalive: %w", err)
	}
	if pkm.ReplyRequested {
		o.reply = true
	}
	caught := o.asked && o.quietTarget != 0 && pkm.ServerWALEnd >= o.quietTarget
	if o.asked && !caught {
		// Still decoding: ask again after another quiet spell.
		o.asked, o.lastData = false, time.Now()
	}
	o.run = append(o.run, item{keepalive: true, walEnd: pkm.ServerWALEnd, caughtUp: caught})
	return o.forward(ctx)
}

// xlogData decodes a pgoutput message into the run; a commit, or a full run, goes on.
func (o *owner) xlogData(ctx context.Context, data []byte) error {
	xld, err := pglogrepl.ParseXLogData(data)
	if err != nil {
		return fmt.Errorf("parse XLogData: %w", err)
	}
	lm, err := parseMessage(xld.WALData)
	if err != nil {
		return fmt.Errorf("decode pgoutput message at %s: %w", xld.WALStart, err)
	}
	o.lastData, o.asked, o.quietTarget = time.Now(), false, 0
	o.run = append(o.run, item{walStart: xld.WALStart, msg: lm})
	o.runBytes += len(xld.WALData)
	if _, commit := lm.(*pglogrepl.CommitMessage); commit || len(o.run) >= handOff || o.runBytes >= handOffBytes {
		return o.forward(ctx)
	}
	return nil
}

// sendStatus reports the flush position when it moved, when the last report is statusEvery old, when the server
// asked for one or we want a keepalive, or when forced.
func (o *owner) sendStatus(ctx context.Context, force bool) error {
	st := o.st
	t, usedIdle := st.target()
	st.mu.Lock()
	sent := st.sent
	st.mu.Unlock()
	if !force && t <= sent && time.Since(o.lastStatus) < statusEvery && !o.reply && !o.askReply {
		return nil
	}
	t = max(t, sent) // the server ignores a position that goes back; so do we
	err := pglogrepl.SendStandbyStatusUpdate(ctx, o.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: t, WALFlushPosition: t, WALApplyPosition: t, ReplyRequested: o.askReply})
	if err != nil {
		return fmt.Errorf("send standby status to the server: %w", err)
	}
	st.markSent(t, usedIdle)
	o.lastStatus, o.reply, o.askReply = time.Now(), false, false
	return nil
}

// forward hands the run gathered so far to the processor. While the queue is full it keeps the session alive
// (the engine is holding us back) and reports positions acknowledged meanwhile.
func (o *owner) forward(ctx context.Context) error {
	if len(o.run) == 0 {
		return nil
	}
	it := o.run
	o.runBytes = 0
	select {
	case o.items <- it:
		o.run = make([]item, 0, handOff)
		return nil
	default:
	}
	timer := time.NewTimer(time.Until(o.lastStatus.Add(statusEvery)))
	defer timer.Stop()
	for {
		select {
		case o.items <- it:
			o.run = make([]item, 0, handOff)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-o.st.wake:
			if err := o.sendStatus(ctx, false); err != nil {
				return err
			}
		case <-timer.C:
			// The engine is holding us back: keep the session alive meanwhile.
			if err := o.sendStatus(ctx, true); err != nil {
				return err
			}
			timer.Reset(statusEvery)
		}
	}
}

// serverFlushLSN is how far the server's WAL goes now.
func (r *reader) serverFlushLSN(ctx context.Context) (pglogrepl.LSN, error) {
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var s string
	if err := r.pool.QueryRow(qctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&s); err != nil {
		return 0, fmt.Errorf("read the server's WAL position: %w", r.cfg.Explain(err))
	}
	return pglogrepl.ParseLSN(s)
}

// relation is a table as the stream describes it.
type relation struct {
	id     uint32
	stream string
	table  *table // nil: not a configured table (a FOR ALL TABLES publication)
	// msg is the Relation message of a table that is not captured, kept for when a pattern adopts it (patterns.go).
	msg    *pglogrepl.RelationMessage
	cols   []column
	key    []string
	keyIdx []int
	schema *arrow.Schema
}

// processor turns pgoutput messages into batches and checkpoints.
type processor struct {
	r          *reader
	rels       map[uint32]*relation
	lastCols   map[string][]RelationColumn // each captured table's columns at its last Relation message (Position.Columns)
	inTx       bool
	xid        uint32 // the current transaction's
	commitTime time.Time
	cur        *relation
	b          *change.Builder
	row        values.Row // the changes on_unrepresentable made to the row being appended
	// pos: everything before it is delivered; lastCP: the last checkpoint's position.
	pos, lastCP pglogrepl.LSN
	lastIdle    bool
	rows        int64
	// overlap: inserts of transactions committed before it are sent as updates (see Position.Overlap);
	// upsert says the current transaction is one of them.
	overlap pglogrepl.LSN
	upsert  bool
	// copied: by stream, the consistent point of the exact snapshot an append table was copied under (exact.go);
	// finalLSN is the current transaction's commit LSN. The table's changes in transactions committed before
	// its point are in the copy and are dropped.
	copied   map[string]pglogrepl.LSN
	finalLSN pglogrepl.LSN
	// recopy: the append tables to copy while streaming; ac: the copy running (exact.go).
	recopy map[string]RecopyProgress
	ac     *recopy
	// rs copies tables again between the transactions it streams (resnapshot.go).
	rs *resnapper
	// pub stops the stream when a publication it reads through is altered or dropped (pubwatch.go).
	pub *pubWatch
	// pw follows the tables created and dropped that the patterns of tables match (patterns.go).
	pw patternWatch
	// ended: the gauges of the copies (re-snapshots, append tables) that ended since the last checkpoint, which
	// the next one carries once (copyMetrics).
	ended []serve.Metric
}

// position is the stream checkpoint at p.pos.
func (p *processor) position() Position {
	// Rows carries the count on (snapshot rows, then streamed ones): a run resumed from this checkpoint reports
	// the pipeline's progress, not zero until its first change.
	cp := Position{V: positionVersion, Phase: PhaseStream, Slot: p.r.cfg.Slot, LSN: p.pos.String(), Tables: p.r.tableNames(), Rows: p.rows, Resnapshot: p.rs.snapshot()}
	if p.pos < p.overlap {
		cp.Overlap = p.overlap.String()
	}
	if len(p.recopy) > 0 {
		cp.Recopy = maps.Clone(p.recopy)
	}
	if len(p.lastCols) > 0 {
		cp.Columns = maps.Clone(p.lastCols)
	}
	cp.OIDs = p.r.oids()
	for name, l := range p.copied {
		// Once streaming has passed l, no transaction it sends committed before l.
		if p.pos < l {
			if cp.Copied == nil {
				cp.Copied = map[string]string{}
			}
			cp.Copied[name] = l.String()
		}
	}
	return cp
}

// checkpoint sends cp with the figures a stream checkpoint carries: the copies running or just ended, the slot,
// and wait, the gauge of a wait outside the source (slotwait.go: waitMetric, or notWaiting).
func (p *processor) checkpoint(ctx context.Context, cp serve.Checkpoint, wait serve.Metric) error {
	cp.Metrics = slices.Concat(p.rs.metrics(), p.recopyMetrics(), p.ended, p.r.slot.metrics(p.r.cfg.Slot), p.capturedMetrics(), []serve.Metric{wait})
	if err := p.r.out.Checkpoint(ctx, cp); err != nil {
		return err
	}
	p.ended = nil
	return nil
}

// betweenTransactions sends the stream checkpoint at p.pos, between two transactions, covering what was emitted
// since the last one: the slot may move there once the engine has it durable.
func (p *processor) betweenTransactions(ctx context.Context, lagMS int64, wait serve.Metric) error {
	cp := p.position()
	if err := p.checkpoint(ctx, serve.Checkpoint{Position: cp.Encode(), RowsDone: p.rows, LagMS: lagMS}, wait); err != nil {
		return err
	}
	p.r.emitted = false
	p.lastCP, p.lastIdle = p.pos, false
	p.setIdle(p.pos, true)
	return nil
}

func (p *processor) release() {
	if p.b != nil {
		p.b.Release()
		p.b = nil
	}
}

func (p *processor) run(ctx context.Context, items <-chan []item, ownDone <-chan struct{}) error {
	for {
		if err := p.followPatterns(ctx); err != nil {
			return err
		}
		if err := p.rs.step(ctx); err != nil {
			return err
		}
		if err := p.startRecopy(ctx); err != nil {
			return err
		}
		select {
		case tc, ok := <-p.recopyChunks():
			if err := p.recopyChunk(ctx, tc, ok); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-ownDone:
			return errOwnerEnded
		case run := <-items:
			// Every run already received goes through one publication check before any of it is handled:
			// a checkpoint is sent only after a check that began once its position had arrived (pubwatch.go).
			// Under load the queue holds several runs, so the check costs one query per several transactions.
			runs := [][]item{run}
		more:
			for len(runs) < queueLen {
				select {
				case run := <-items:
					runs = append(runs, run)
				default:
					break more
				}
			}
			// Only a commit or a keepalive moves the position a checkpoint carries; the row messages of a large
			// transaction (4 000 runs for a million rows) need no check of their own.
			if movesPosition(runs) {
				if err := p.pub.check(ctx, lastPosition(runs), p.lastCP); err != nil {
					return err
				}
			}
			for _, run := range runs {
				for _, it := range run {
					if err := p.handle(ctx, it); err != nil {
						return err
					}
				}
			}
		}
	}
}

// movesPosition says whether runs hold a commit or a keepalive, the messages that move the stream's position.
func movesPosition(runs [][]item) bool {
	for _, run := range runs {
		for _, it := range run {
			if _, commit := it.msg.(*pglogrepl.CommitMessage); commit || it.keepalive {
				return true
			}
		}
	}
	return false
}

// lastPosition is the position of the last message of runs that carries one.
func lastPosition(runs [][]item) pglogrepl.LSN {
	var at pglogrepl.LSN
	for _, run := range runs {
		for _, it := range run {
			at = max(at, it.walStart, it.walEnd)
		}
	}
	return at
}

func (p *processor) setIdle(lsn pglogrepl.LSN, data bool) {
	st := p.r.st
	st.mu.Lock()
	if data {
		st.dataCP = max(st.dataCP, lsn)
	}
	st.idle = max(st.idle, lsn)
	st.mu.Unlock()
}

func (p *processor) handle(ctx context.Context, it item) error {
	r := p.r
	if it.keepalive {
		if p.inTx {
			return nil // a position inside a transaction says nothing about what is delivered
		}
		if it.walEnd > p.pos {
			p.pos = it.walEnd
			p.setIdle(p.pos, false)
		}
		if it.caughtUp && (!p.lastIdle || p.pos > p.lastCP) && !p.rs.active() && len(p.recopy) == 0 {
			cp := p.position()
			if err := p.checkpoint(ctx, serve.Checkpoint{Position: cp.Encode(), RowsDone: p.rows, Idle: true}, notWaiting); err != nil {
				return err
			}
			p.lastCP, p.lastIdle = p.pos, true
		}
		return nil
	}
	switch m := it.msg.(type) {
	case *pglogrepl.BeginMessage:
		p.inTx, p.commitTime, p.xid = true, m.CommitTime, m.Xid
		p.upsert = m.FinalLSN < p.overlap
		p.finalLSN = m.FinalLSN
	case *pglogrepl.CommitMessage:
		if err := p.flush(ctx); err != nil {
			return err
		}
		p.inTx = false
		end := m.TransactionEndLSN
		if end > p.pos {
			p.pos = end
		}
		if !r.emitted {
			// Nothing of ours in it: a later checkpoint carries the position on.
			p.setIdle(p.pos, false)
			return nil
		}
		if err := p.betweenTransactions(ctx, max(time.Since(m.CommitTime).Milliseconds(), 0), notWaiting); err != nil {
			return err
		}
	case *pglogrepl.RelationMessage:
		return p.relation(ctx, m)
	case *pglogrepl.TypeMessage:
		r.resolver.Forget()
	case *pglogrepl.LogicalDecodingMessage:
		return p.rs.message(ctx, m)
	case *pglogrepl.InsertMessage:
		rel, err := p.rel(m.RelationID)
		if err != nil || rel.table == nil {
			return err
		}
		if p.inCopy(rel.stream) {
			return nil
		}
		vals, err := tupleValues(rel, m.Tuple, nil)
		if err != nil {
			return fmt.Errorf("insert into %s at %s: %w", rel.stream, it.walStart, err)
		}
		op := change.OpInsert
		if p.upsert && !rel.table.exact() { // a stream without a key has no upsert: mode: append and full_row keep inserts (README)
			op = change.OpUpdate
		}
		return p.appendRow(ctx, rel, op, vals, it.walStart)
	case *pglogrepl.UpdateMessage:
		rel, err := p.rel(m.RelationID)
		if err != nil || rel.table == nil {
			return err
		}
		if rel.table.FullRow {
			return p.fullRowUpdate(ctx, rel, m, it.walStart)
		}
		return p.update(ctx, rel, m, it.walStart)
	case *pglogrepl.DeleteMessage:
		rel, err := p.rel(m.RelationID)
		if err != nil || rel.table == nil {
			return err
		}
		if rel.table.FullRow {
			return p.fullRowDelete(ctx, rel, m, it.walStart)
		}
		if m.OldTuple == nil {
			return fmt.Errorf("delete from %s at %s carries no key (REPLICA IDENTITY NOTHING?): run ALTER TABLE %s REPLICA IDENTITY DEFAULT", rel.stream, it.walStart, rel.table.Name.Quoted())
		}
		vals, err := keyValues(rel, m.OldTuple)
		if err != nil {
			return fmt.Errorf("delete from %s at %s: %w", rel.stream, it.walStart, err)
		}
		return p.appendRow(ctx, rel, change.OpDelete, vals, it.walStart)
	case *pglogrepl.TruncateMessage:
		var ours []string
		for _, id := range m.RelationIDs {
			if rel := p.rels[id]; rel != nil && rel.table != nil && !p.inCopy(rel.stream) {
				ours = append(ours, rel.stream)
			}
		}
		if len(ours) == 0 {
			return nil
		}
		switch r.cfg.Truncate {
		case config.TruncateIgnore:
			r.log.Warn("TRUNCATE skipped (truncate: ignore): the destination keeps the rows", "tables", strings.Join(ours, ","), "lsn", it.walStart.String())
			return nil
		case config.TruncatePropagate:
			// Rows of this transaction built before the TRUNCATE go out first: the order is the meaning.
			if err := p.flush(ctx); err != nil {
				return err
			}
			p.release()
			p.cur = nil
			for _, stream := range ours {
				if err := r.out.Truncate(ctx, stream); err != nil {
					return err
				}
			}
			r.emitted = true
			return nil
		}
		return fault.DataErr(fmt.Errorf("table %s was truncated (at %s); truncate: error stops here: set truncate: propagate to empty the destination's table too, or truncate: ignore to skip it (the destination keeps its rows)", strings.Join(ours, ", "), it.walStart),
			"set the source's truncate: propagate to empty the destination's table too, or truncate: ignore to skip it (the destination keeps its rows), or re-snapshot the table (`skippr teardown PIPELINE`, then a new pipeline name and wal.url)")
	}
	return nil
}

// inCopy says the current transaction's changes of stream are in the exact copy of an append table: it committed
// before the copy's snapshot (exact.go).
func (p *processor) inCopy(stream string) bool {
	if l, ok := p.copied[stream]; ok {
		return p.finalLSN < l
	}
	_, pending := p.recopy[stream] // its copy, yet to begin, will hold every change until then
	return pending
}

func (p *processor) rel(id uint32) (*relation, error) {
	rel := p.rels[id]
	if rel == nil {
		return nil, fmt.Errorf("change for relation %d before its Relation message", id)
	}
	return rel, nil
}

// relation handles a Relation message: the table's columns as of this point of the stream.
func (p *processor) relation(ctx context.Context, m *pglogrepl.RelationMessage) error {
	r := p.r
	name := m.Namespace + "." + m.RelationName
	renamedFrom, err := p.followRename(ctx, m.RelationID, name)
	if err != nil {
		return err
	}
	t := r.tables[name]
	if t != nil && m.RelationID != t.OID && r.byPattern(t.Name) {
		// Another table under a captured name (dropped and created again, in a publication of its schema or of all
		// tables): not captured until a pattern adopts it (patterns.go), which replays this message.
		t = nil
	}
	if p.cur != nil && p.cur.id == m.RelationID {
		if err := p.flush(ctx); err != nil {
			return err
		}
	}
	if t == nil {
		p.rels[m.RelationID] = &relation{id: m.RelationID, stream: name, msg: m}
		return nil
	}
	if p.inTx {
		if err := waitVisible(ctx, r.pool, p.xid); err != nil {
			return fmt.Errorf("table %s changed: %w", name, err)
		}
	}
	// The key comes from the catalog (a Relation message flags replica identity columns, which for REPLICA
	// IDENTITY FULL are all of them).
	fresh, err := loadConfigured(ctx, r.pool, r.resolver, r.cfg, t.Name)
	if errors.Is(err, errNoTable) && t.OID == m.RelationID && p.catalogHas(ctx, t.OID) {
		// Renamed since (the catalog is ahead of the stream): decoded with the definition last read; the
		// Relation message of the new name follows the rename (rename.go).
		fresh, err = t, nil
	}
	if (errors.Is(err, errNoTable) || err == nil && fresh.OID != t.OID) && r.byPattern(t.Name) {
		// Dropped since (the catalog is ahead of the stream): its last changes are decoded with the definition
		// last read, and the table is released once the stream passes its drop (patterns.go).
		fresh, err = t, nil
	}
	if err != nil {
		return fmt.Errorf("table %s changed: %w", name, err)
	}
	prev := p.rels[m.RelationID]
	rel := &relation{id: m.RelationID, stream: name, table: fresh, key: fresh.Key}
	// The catalog is as of now, the message as of its change: a column whose type differs was retyped since,
	// which (but for binary-coercible changes) rewrote the table and cleared every attmissingval.
	retyped := slices.ContainsFunc(m.Columns, func(c *pglogrepl.RelationMessageColumn) bool {
		i := slices.IndexFunc(fresh.Columns, func(fc column) bool { return fc.Name == c.Name })
		return i >= 0 && fresh.Columns[i].TypeOID != c.DataType
	})
	var before []column
	switch {
	case prev != nil && prev.table != nil:
		before = prev.cols
	case prev == nil:
		// The first Relation message of this Read: compare with the checkpoint's.
		for _, c := range p.lastCols[name] {
			before = append(before, column{Name: c.Name, TypeOID: c.TypeOID, Attnum: c.Attnum})
		}
	}
	for _, c := range m.Columns {
		typ, err := r.resolver.Resolve(ctx, r.pool, c.DataType, c.TypeModifier)
		if err != nil {
			return fmt.Errorf("table %s column %s: %w", name, c.Name, err)
		}
		col := column{Name: c.Name, TypeOID: c.DataType, Typmod: c.TypeModifier, Type: typ}
		// A column added with a default: the rows before it hold the default, which no change carries.
		if i := slices.IndexFunc(fresh.Columns, func(fc column) bool { return fc.Name == c.Name }); i >= 0 && fresh.Columns[i].TypeOID == c.DataType {
			col.Missing = fresh.Columns[i].Missing
			col.Attnum = fresh.Columns[i].Attnum
		}
		isNew := before == nil || !slices.ContainsFunc(before, func(pc column) bool { return pc.Name == c.Name })
		if col.Missing == nil && retyped && isNew {
			if col.Missing, err = defaultAfterRewrite(ctx, r.pool, r.log.With("table", name), fresh.OID, c.Name, c.DataType, c.TypeModifier); err != nil {
				return fmt.Errorf("table %s column %s: %w", name, c.Name, err)
			}
			if col.Missing != nil {
				r.log.Info("column added with a default before a rewrite of its table: the rows before it are taken to hold its current constant default",
					"table", name, "column", c.Name, "value", *col.Missing)
			}
		}
		rel.cols = append(rel.cols, col)
	}
	last := make([]RelationColumn, len(rel.cols))
	for i, c := range rel.cols {
		last[i] = RelationColumn{Name: c.Name, TypeOID: c.TypeOID, Attnum: c.Attnum}
	}
	p.lastCols[name] = last
	if before != nil {
		renamedColumns(before, rel.cols)
		for _, c := range rel.cols {
			if c.RenamedFrom != "" {
				r.log.Info("column renamed", "table", name, "from", c.RenamedFrom, "to", c.Name)
			}
		}
	}
	for _, k := range rel.key {
		i := slices.IndexFunc(rel.cols, func(c column) bool { return c.Name == k })
		if i < 0 {
			return fmt.Errorf("table %s: key column %s is not in the replicated columns", name, k)
		}
		rel.keyIdx = append(rel.keyIdx, i)
	}
	rel.schema = schema(rel.cols, rel.key, r.cfg.Policy, fresh.FullRow)
	rel.schema = change.MarkRenamedTable(rel.schema, renamedFrom)
	r.tables[name] = fresh
	p.rels[m.RelationID] = rel
	return nil
}

// visibleWait bounds waitVisible: a transaction's commit becomes visible microseconds after its commit record.
const visibleWait = 10 * time.Second

// waitVisible waits until transaction xid, whose changes are being decoded, is visible to a new snapshot.
// PostgreSQL writes a commit record before it makes the transaction visible, so the walsender can send a
// transaction that a catalog read on another connection does not see yet: an ADD COLUMN … DEFAULT and an
// INSERT in one transaction were read as a table without the column. (xid is 32 bits; the epoch is the current
// one unless xid is above the current counter's low bits.)
func waitVisible(ctx context.Context, q querier, xid uint32) error {
	deadline := time.Now().Add(visibleWait)
	for {
		var ok bool
		if err := q.QueryRow(ctx, `WITH s AS (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax)
			SELECT pg_visible_in_snapshot(((((xmax >> 32) - CASE WHEN $1::bigint > (xmax & 4294967295) THEN 1 ELSE 0 END) << 32) | $1::bigint)::text::xid8,
				pg_current_snapshot()) FROM s`, int64(xid)).Scan(&ok); err != nil {
			return fmt.Errorf("wait for transaction %d to be visible: %w", xid, err)
		}
		if ok || time.Now().After(deadline) {
			return nil // past the bound: read what the catalog has, as before
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// defaultAfterRewrite is the value the rows that existed before a column was added hold, when the table was
// rewritten since (an ALTER COLUMN … TYPE) and the catalog no longer records it (attmissingval): the column's
// default as the catalog has it now, if that is a constant, in the text form of the column's type as the
// change stream has it (typ, typmod). nil when the column has no default, or one that is not a constant (the
// rows hold values computed one by one, or the server's now(): nothing the source can read back; logged).
//
// The catalog is as of now, not as of the ADD COLUMN: a default changed since (SET DEFAULT, DROP DEFAULT), or set
// only after a column added without one, is what this reads. Only a column new to the stream in a relation
// that predates a type change of the table asks (processor.relation).
func defaultAfterRewrite(ctx context.Context, q querier, log *slog.Logger, rel uint32, name string, typ uint32, typmod int32) (*string, error) {
	var (
		isConst     bool
		expr, tname string
	)
	// A default holds no column and no subquery (PostgreSQL refuses them): it is a constant when its tree holds
	// only constants, casts and immutable functions.
	err := q.QueryRow(ctx, `WITH d AS (
			SELECT d.adbin::text AS bin, pg_get_expr(d.adbin, d.adrelid) AS expr
			FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
			WHERE a.attrelid = $1 AND a.attname = $2 AND NOT a.attisdropped)
		SELECT NOT EXISTS (SELECT 1 FROM regexp_matches(bin, '\{([A-Z_]+)', 'g') m
				WHERE m[1] NOT IN ('CONST', 'FUNCEXPR', 'OPEXPR', 'RELABELTYPE', 'COERCEVIAIO'))
			AND NOT EXISTS (SELECT 1 FROM regexp_matches(bin, ':(?:funcid|opfuncid) ([0-9]+)', 'g') m
				JOIN pg_proc p ON p.oid = m[1]::oid WHERE p.provolatile <> 'i'),
			expr, format_type($3, $4)
		FROM d`, rel, name, typ, typmod).Scan(&isConst, &expr, &tname)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read its default: %w", err)
	case !isConst:
		log.Warn("column added with a default that is not a constant, and its table rewritten since: the destination's rows from before it get NULL",
			"column", name, "default", expr)
		return nil, nil
	}
	// A constant: evaluating it reads nothing and changes nothing.
	var v *string
	if err := q.QueryRow(ctx, "SELECT CAST(("+expr+") AS "+tname+")::text").Scan(&v); err != nil {
		log.Warn("column added with a default that does not fit the type it was added with: the destination's rows from before it get NULL",
			"column", name, "default", expr, "type", tname, "error", err)
		return nil, nil
	}
	return v, nil
}

// tupleValues returns a tuple's values in text form (nil for NULL). Unchanged TOAST values come from old
// when it carries them; the others are listed in missing.
func tupleValues(rel *relation, tup *pglogrepl.TupleData, old *pglogrepl.TupleData) ([][]byte, error) {
	vals, _, err := tupleValuesMissing(rel, tup, old)
	if err != nil {
		return nil, err
	}
	return vals, nil
}

func tupleValuesMissing(rel *relation, tup *pglogrepl.TupleData, old *pglogrepl.TupleData) ([][]byte, []int, error) {
	if tup == nil || len(tup.Columns) != len(rel.cols) {
		return nil, nil, fmt.Errorf("tuple has %d columns, the relation %d", tupleLen(tup), len(rel.cols))
	}
	vals := make([][]byte, len(rel.cols))
	var missing []int
	for i, c := range tup.Columns {
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
		case pglogrepl.TupleDataTypeText:
			vals[i] = c.Data
		case pglogrepl.TupleDataTypeToast:
			if old != nil && i < len(old.Columns) {
				switch oc := old.Columns[i]; oc.DataType {
				case pglogrepl.TupleDataTypeText:
					vals[i] = oc.Data
					continue
				case pglogrepl.TupleDataTypeNull:
					continue
				}
			}
			missing = append(missing, i)
		default:
			return nil, nil, fmt.Errorf("column %s: unexpected tuple data kind %q", rel.cols[i].Name, c.DataType)
		}
	}
	return vals, missing, nil
}

func tupleLen(t *pglogrepl.TupleData) int {
	if t == nil {
		return 0
	}
	return len(t.Columns)
}

// keyValues returns a row holding only the key columns of an old tuple.
func keyValues(rel *relation, old *pglogrepl.TupleData) ([][]byte, error) {
	vals := make([][]byte, len(rel.cols))
	for _, i := range rel.keyIdx {
		if i >= len(old.Columns) || old.Columns[i].DataType != pglogrepl.TupleDataTypeText {
			return nil, fmt.Errorf("the old row has no value for key column %s", rel.cols[i].Name)
		}
		vals[i] = old.Columns[i].Data
	}
	return vals, nil
}

func (p *processor) update(ctx context.Context, rel *relation, m *pglogrepl.UpdateMessage, lsn pglogrepl.LSN) error {
	r := p.r
	vals, missing, err := tupleValuesMissing(rel, m.NewTuple, m.OldTuple)
	if err != nil {
		return fmt.Errorf("update of %s at %s: %w", rel.stream, lsn, err)
	}
	if len(missing) > 0 {
		if r.cfg.UnchangedToast != config.ToastFetch {
			names := make([]string, len(missing))
			for i, j := range missing {
				names[i] = rel.cols[j].Name
			}
			// Updates already in the slot were logged with the old identity: ALTER TABLE ... REPLICA IDENTITY FULL
			// helps only those written after it, so the way past this one is fetch or a new snapshot.
			return fault.ConfigErr(fmt.Errorf("update of %s at %s left %s unchanged (stored out of line, TOAST) and the old row does not carry the value, which must not be written as NULL",
				rel.stream, lsn, strings.Join(names, ", ")),
				fmt.Sprintf("set unchanged_toast: fetch to read the value from the table (the only way past updates already in the slot), or re-snapshot the table; ALTER TABLE %s REPLICA IDENTITY FULL then keeps later updates from needing either", rel.table.Name.Quoted()))
		}
		if err := p.fetch(ctx, rel, vals, missing); err != nil {
			return fmt.Errorf("update of %s at %s: %w", rel.stream, lsn, err)
		}
	}
	if m.OldTuple != nil {
		oldKey, err := keyValues(rel, m.OldTuple)
		if err != nil {
			return fmt.Errorf("update of %s at %s: %w", rel.stream, lsn, err)
		}
		for _, i := range rel.keyIdx {
			if !bytes.Equal(oldKey[i], vals[i]) {
				// The key changed: the old row goes away.
				if err := p.appendRow(ctx, rel, change.OpDelete, oldKey, lsn); err != nil {
					return err
				}
				break
			}
		}
	}
	return p.appendRow(ctx, rel, change.OpUpdate, vals, lsn)
}

// fetch reads the current values of columns an update left out (unchanged_toast: fetch). The value may be
// newer than the update; a later change of it follows in the stream, so the destination converges. A row
// that is gone has been deleted since, and that delete follows too.
func (p *processor) fetch(ctx context.Context, rel *relation, vals [][]byte, missing []int) error {
	r := p.r
	cols := make([]string, len(missing))
	for i, j := range missing {
		cols[i] = pgx.Identifier{rel.cols[j].Name}.Sanitize()
	}
	conds := make([]string, len(rel.keyIdx))
	args := make([][]byte, len(rel.keyIdx))
	for i, j := range rel.keyIdx {
		conds[i] = fmt.Sprintf("%s = $%d", pgx.Identifier{rel.cols[j].Name}.Sanitize(), i+1)
		args[i] = vals[j]
	}
	sql := fmt.Sprintf("SELECT %s FROM %s WHERE %s", strings.Join(cols, ", "), rel.table.Name.Quoted(), strings.Join(conds, " AND "))
	c, err := r.pool.Acquire(ctx)
	if err != nil {
		return r.cfg.Explain(err)
	}
	defer c.Release()
	rr := c.Conn().PgConn().ExecParams(ctx, sql, args, nil, nil, nil)
	for rr.NextRow() {
		for i, v := range rr.Values() {
			vals[missing[i]] = bytes.Clone(v)
		}
	}
	if _, err := rr.Close(); err != nil {
		return fmt.Errorf("fetch unchanged values: %w", r.cfg.Explain(err))
	}
	return nil
}

func (p *processor) appendRow(ctx context.Context, rel *relation, op change.Op, vals [][]byte, lsn pglogrepl.LSN) error {
	if p.cur != rel {
		if err := p.flush(ctx); err != nil {
			return err
		}
		p.release()
		p.cur, p.b = rel, change.NewBuilder(p.r.mem, rel.schema)
	}
	p.row.Reset()
	for i, c := range rel.cols {
		if vals[i] == nil {
			p.b.Field(i).AppendNull()
			continue
		}
		if err := typemap.Append(c.Type, p.b.Field(i), vals[i]); err != nil {
			if err := p.r.unrepresentable(rel.stream, rel.cols, rel.keyIdx, vals, i, p.b.Field(i), err, &p.row); err != nil {
				return fmt.Errorf("%s of %s at %s, column %s: %w", op, rel.stream, lsn, c.Name, err)
			}
		}
	}
	appendMeta(p.b, len(rel.cols), p.r.cfg.Policy, &p.row)
	p.b.RowAt(op, lsnText(lsn), p.commitTime) // the transaction's commit time, from its Begin message
	p.rs.saw(rel, vals)
	p.rows++
	if p.b.Len() >= p.r.cfg.BatchSize {
		return p.flush(ctx)
	}
	return nil
}

// flush emits the rows built so far. Within a transaction this keeps memory to one batch: the checkpoint
// that covers the batches comes only with the commit.
func (p *processor) flush(ctx context.Context) error {
	if p.b == nil || p.b.Len() == 0 {
		return nil
	}
	rec := p.b.NewBatch()
	defer rec.Release()
	return p.r.emitBatch(ctx, p.cur.stream, p.cur.key, rec)
}

func parseLSN(s *string) (pglogrepl.LSN, error) {
	if s == nil {
		return 0, errors.New("no LSN")
	}
	return pglogrepl.ParseLSN(*s)
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}

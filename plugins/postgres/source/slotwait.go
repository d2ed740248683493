package source

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/postgres/config"
)

// Watched slot creation.
//
// CREATE_REPLICATION_SLOT of a logical slot returns only once every transaction that held a transaction id when
// it began has ended, in any database of the server: the snapshot builder waits on each one's transactionid lock
// (pg_locks, wait_event transactionid). A session left "idle in transaction" after a write therefore holds the
// creation, silently and without limit. Both creations (the main slot at a pipeline's start, read.go; the
// temporary slot of an exact copy, exact.go) run through createSlot, which looks up, while it waits, which
// backends hold the transactions the slot's walsender waits for, says so in the log (and, through report, in
// `skippr status`), and gives up after snapshot_wait_timeout with a permanent error naming them.

// Intervals of the watch: short waits are normal (a busy server's own short transactions), so the first warning
// comes only after blockerWarnAfter; the lookup is cheap, but nobody needs it more often than blockerPoll.
const (
	blockerPoll      = 2 * time.Second
	blockerWarnAfter = 10 * time.Second
	blockerWarnEvery = time.Minute
	// cancelWait bounds the wait for the server to end a cancelled creation before its session is closed.
	cancelWait = 10 * time.Second
)

// blocker is a backend holding a transaction the slot's creation waits for.
type blocker struct {
	PID       int32 // 0: a prepared transaction, which has no backend
	XID       string
	User      string
	Database  string
	App       string
	Client    string
	State     string
	XactStart *time.Time
	Query     string
}

// String names the backend the way a person finds it again in pg_stat_activity.
func (b blocker) String() string {
	if b.PID == 0 {
		return fmt.Sprintf("prepared transaction %s (see pg_prepared_xacts)", b.XID)
	}
	parts := []string{fmt.Sprintf("pid %d", b.PID)}
	if b.App != "" {
		parts = append(parts, fmt.Sprintf("application %q", b.App))
	}
	if b.User != "" {
		parts = append(parts, "user "+b.User)
	}
	if b.Database != "" {
		parts = append(parts, "database "+b.Database)
	}
	if b.Client != "" {
		parts = append(parts, "client "+b.Client)
	}
	if b.State != "" {
		parts = append(parts, "state "+b.State)
	}
	if b.XactStart != nil {
		parts = append(parts, "transaction open since "+b.XactStart.UTC().Format(time.RFC3339))
	}
	if b.Query != "" {
		parts = append(parts, fmt.Sprintf("last query %q", b.Query))
	}
	return strings.Join(parts, ", ")
}

// blockersText lists blockers for a message.
func blockersText(bs []blocker) string {
	s := make([]string, len(bs))
	for i, b := range bs {
		s[i] = b.String()
	}
	return strings.Join(s, "; ")
}

// blockersFix is what a person does about bs.
func blockersFix(bs []blocker) string {
	var pids, prepared []string
	for _, b := range bs {
		if b.PID == 0 {
			prepared = append(prepared, b.XID)
		} else {
			pids = append(pids, fmt.Sprint(b.PID))
		}
	}
	var fix []string
	for _, p := range pids {
		fix = append(fix, "SELECT pg_terminate_backend("+p+")")
	}
	out := "end that transaction (COMMIT or ROLLBACK in its session)"
	if len(fix) > 0 {
		out += ", or " + strings.Join(fix, "; ")
	}
	if len(prepared) > 0 {
		out += "; a prepared transaction ends with COMMIT PREPARED or ROLLBACK PREPARED (transaction ids " + strings.Join(prepared, ", ") + ")"
	}
	return out
}

// slotBlockers are the holders of the transactionid locks backend pid waits for. A prepared transaction holds
// its lock without a backend (pid NULL).
func (r *reader) slotBlockers(ctx context.Context, pid uint32) ([]blocker, error) {
	rows, err := r.pool.Query(ctx, `
SELECT coalesce(h.pid, 0), h.transactionid::text, coalesce(a.usename::text, ''), coalesce(a.datname::text, ''), coalesce(a.application_name, ''),
       coalesce(host(a.client_addr), ''), coalesce(a.state, ''), a.xact_start, left(coalesce(a.query, ''), 60)
FROM pg_locks w
JOIN pg_locks h ON h.locktype = 'transactionid' AND h.transactionid = w.transactionid AND h.granted
LEFT JOIN pg_stat_activity a ON a.pid = h.pid
WHERE w.pid = $1 AND w.locktype = 'transactionid' AND NOT w.granted
ORDER BY 1`, int32(pid))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []blocker
	for rows.Next() {
		var b blocker
		if err := rows.Scan(&b.PID, &b.XID, &b.User, &b.Database, &b.App, &b.Client, &b.State, &b.XactStart, &b.Query); err != nil {
			return nil, err
		}
		b.Query = strings.Join(strings.Fields(b.Query), " ")
		out = append(out, b)
	}
	return out, rows.Err()
}

// slotReport tells `skippr status` what a slot creation waits for (waited so far, the blockers); called from
// the goroutine that called createSlot, so it may emit.
type slotReport func(ctx context.Context, waited time.Duration, bs []blocker) error

// createSlot runs CREATE_REPLICATION_SLOT on repl while watching what it waits for: after blockerWarnAfter it
// warns naming the blockers (again every blockerWarnEvery, or when they change) and calls report; after
// r.cfg.SnapshotWaitTimeout it cancels the creation and returns a permanent error naming them. purpose says
// what the slot is for ("before copying public.log").
func (r *reader) createSlot(ctx context.Context, repl *pgconn.PgConn, name string, opts pglogrepl.CreateReplicationSlotOptions, purpose string, report slotReport) (pglogrepl.CreateReplicationSlotResult, error) {
	type result struct {
		res pglogrepl.CreateReplicationSlotResult
		err error
	}
	// The creation runs under its own context: the replication session's context handler only closes the
	// socket, which a walsender waiting on a lock does not notice (it would create the slot once the blockers
	// end). A cancel request, sent first, ends the wait (abort).
	cctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		res, err := pglogrepl.CreateReplicationSlot(cctx, repl, name, "pgoutput", opts)
		done <- result{res, err}
	}()
	// abort ends the creation; it reports the slot made if the creation won the race with the cancel request.
	abort := func() (pglogrepl.CreateReplicationSlotResult, bool) {
		actx, acancel := context.WithTimeout(context.Background(), cancelWait)
		defer acancel()
		if err := repl.CancelRequest(actx); err != nil {
			r.log.Warn("cannot cancel the replication slot's creation; closing its session", "slot", name, "error", err)
		}
		defer cancel()
		select {
		case d := <-done:
			return d.res, d.err == nil
		case <-actx.Done():
			return pglogrepl.CreateReplicationSlotResult{}, false
		}
	}
	pid := repl.PID()
	start := time.Now()
	tick := time.NewTicker(blockerPoll)
	defer tick.Stop()
	timeout := r.cfg.SnapshotWaitTimeout
	if timeout <= 0 { // settings not made by config.Parse
		timeout = config.DefaultSnapshotWait
	}
	limit := time.NewTimer(timeout)
	defer limit.Stop()
	var (
		last     []blocker
		lastWarn time.Time
		warned   string
	)
	for {
		select {
		case d := <-done:
			if !lastWarn.IsZero() && d.err == nil {
				r.log.Info("replication slot created after waiting for open transactions", "slot", name, "waited", time.Since(start).Round(time.Second))
			}
			return d.res, d.err
		case <-ctx.Done():
			if res, made := abort(); made {
				return res, nil // the caller's next step notices ctx
			}
			return pglogrepl.CreateReplicationSlotResult{}, ctx.Err()
		case <-limit.C:
			qctx, qcancel := context.WithTimeout(ctx, blockerPoll)
			if bs, err := r.slotBlockers(qctx, pid); err == nil && len(bs) > 0 {
				last = bs
			}
			qcancel()
			if res, made := abort(); made {
				return res, nil // done as the bound passed: use it
			}
			waited := time.Since(start).Round(time.Second)
			if len(last) == 0 {
				return pglogrepl.CreateReplicationSlotResult{}, fault.ConfigErr(
					fmt.Errorf("create replication slot %s %s: not done after %s (snapshot_wait_timeout); the server waits for transactions that were open when it began (see pg_locks and pg_stat_activity of walsender pid %d)", name, purpose, waited, pid),
					"end the transactions that stay open on the server (pg_stat_activity, state 'idle in transaction'), or raise snapshot_wait_timeout, then start the pipeline again")
			}
			return pglogrepl.CreateReplicationSlotResult{}, fault.ConfigErr(
				fmt.Errorf("create replication slot %s %s: waited %s (snapshot_wait_timeout) for transactions that were open when it began, held by %s", name, purpose, waited, blockersText(last)),
				blockersFix(last)+", then start the pipeline again (or raise snapshot_wait_timeout)")
		case <-tick.C:
			qctx, qcancel := context.WithTimeout(ctx, blockerPoll)
			bs, err := r.slotBlockers(qctx, pid)
			qcancel()
			if err != nil {
				if ctx.Err() == nil {
					r.log.Debug("cannot look up what the replication slot's creation waits for", "slot", name, "error", err)
				}
				continue
			}
			if len(bs) == 0 {
				continue
			}
			last = bs
			waited := time.Since(start)
			if waited < blockerWarnAfter {
				continue
			}
			// Warn again when other transactions hold it back, not when the same ones run another query.
			var key []string
			for _, b := range bs {
				key = append(key, b.XID)
			}
			if k := strings.Join(key, ","); k != warned || time.Since(lastWarn) >= blockerWarnEvery {
				warned = k
				r.log.Warn("creating a replication slot waits for transactions that were open when it began: "+blockersText(bs),
					"slot", name, "purpose", purpose, "waited", waited.Round(time.Second), "gives_up_after", timeout,
					"fix", blockersFix(bs))
				lastWarn = time.Now()
			}
			if report != nil {
				if err := report(ctx, waited, bs); err != nil {
					abort() // a slot made meanwhile is temporary, or found by the next Read (start)
					return pglogrepl.CreateReplicationSlotResult{}, err
				}
			}
		}
	}
}

// waitMetric is the gauge a waiting slot creation puts on a checkpoint: the engine shows its reason in `skippr
// status` (engine/pipeline sourceProgress) until a checkpoint carries notWaiting instead.
func waitMetric(waited time.Duration, bs []blocker, purpose string) serve.Metric {
	return serve.Metric{Name: "waiting_seconds", Value: waited.Round(time.Second).Seconds(),
		Labels: map[string]string{"reason": "waiting for the transaction of " + blockersText(bs) + " to end, " + purpose + "; fix: " + blockersFix(bs)},
		Help:   waitingHelp}
}

// notWaiting is the gauge every other checkpoint carries: the engine replaces a source's series of a name only
// when a checkpoint names it, so without it a wait that ended would stay in the metrics.
var notWaiting = serve.Metric{Name: "waiting_seconds", Value: 0, Help: waitingHelp}

const waitingHelp = "Seconds the source has been waiting for something outside it (label reason: what, and the fix); 0 without a reason when it waits for nothing."

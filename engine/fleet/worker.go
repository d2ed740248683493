package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/skippr-dev/skippr/engine/shutdown"
)

// Member is a live worker's record, P/workers/<name>.
type Member struct {
	Name     string    `json:"name"`
	Version  string    `json:"version,omitempty"`
	Host     string    `json:"host,omitempty"`
	PID      int       `json:"pid"`
	Started  time.Time `json:"started"`
	Draining bool      `json:"draining,omitempty"`
	// Instance is random per process: a record with this process's instance under an older etcd lease is
	// this process's own, left from before it lost that lease, and not another worker of the same name.
	Instance string `json:"instance,omitempty"`
	// Pipelines are the ones it holds right now (won the election and runs).
	Pipelines []string `json:"pipelines"`
}

// Holding is a held pipeline's record, P/pipelines/<name>, written by its holder.
type Holding struct {
	Pipeline string    `json:"pipeline"`
	Holder   string    `json:"holder"`
	Epoch    uint64    `json:"epoch"`
	Since    time.Time `json:"since"`
}

// LastError is the last error a pipeline's run ended with, P/errors/<name>; it outlives the worker.
type LastError struct {
	Worker string    `json:"worker"`
	Error  string    `json:"error"`
	Time   time.Time `json:"time"`
}

// Progress is a held pipeline's WAL position as its holder last published it (see Worker.Progress).
type Progress struct {
	Committed uint64 `json:"committed"` // the newest committed WAL sequence
	Applied   uint64 `json:"applied"`   // what every destination applied
	// UnappliedBytes are the bytes of the entries some destination lacks; OldestUnapplied is the oldest one's
	// commit time (zero when the destinations are caught up).
	UnappliedBytes  int64     `json:"unapplied_bytes"`
	OldestUnapplied time.Time `json:"oldest_unapplied,omitzero"`
	// Started is when the holder's run read its log; FirstApply when it first applied new data: the end of
	// the takeover that gave it the pipeline (zero until then).
	Started    time.Time `json:"started"`
	FirstApply time.Time `json:"first_apply,omitzero"`
}

// progressRecord is P/progress/<worker>: its held pipelines' progress, rewritten at every heartbeat.
type progressRecord struct {
	Published time.Time           `json:"published"`
	Pipelines map[string]Progress `json:"pipelines"`
}

// Runner runs a pipeline as the holder of election epoch until ctx ends (a soft stop first: see
// shutdown.Draining) or the pipeline fails for good. engine/run's Runner is the one `skippr worker` uses.
type Runner interface {
	Run(ctx context.Context, pipeline string, epoch uint64) error
}

// RunFunc is a function as a Runner.
type RunFunc func(ctx context.Context, pipeline string, epoch uint64) error

// Run calls f.
func (f RunFunc) Run(ctx context.Context, pipeline string, epoch uint64) error {
	return f(ctx, pipeline, epoch)
}

// Worker is one `skippr worker` process.
type Worker struct {
	Client    *clientv3.Client
	Prefix    string // no trailing slash
	Name      string // unique in the fleet
	Version   string
	TTL       time.Duration // the etcd lease; rounded up to whole seconds
	Pipelines []Pipeline
	Runner    Runner
	Logger    *slog.Logger
	// StopTimeout bounds the soft stop of a pipeline handed to another worker (in-flight commits finish).
	StopTimeout time.Duration
	// RetryAfter is the pause before campaigning again after a pipeline's run failed.
	RetryAfter time.Duration
	// Progress, when set, reports a held pipeline's progress (ok false while it has none yet). The worker
	// publishes its pipelines' progress to etcd in one put every HeartbeatEvery, for `skippr fleet status`.
	Progress func(pipeline string) (p Progress, ok bool)

	instance string   // Member.Instance; set once by Serve
	joined   bool     // joined the fleet once: the process's start is over (claimName)
	holding  sync.Map // pipeline name → true while this worker runs it; read by Health
	elected  sync.Map // pipeline name → when this worker last won its election
}

// DefaultTTL is the etcd lease of a worker: how long a dead worker's pipelines wait before moving.
const DefaultTTL = 10 * time.Second

// ErrNameTaken: another live process is registered in the fleet under this worker's name.
var ErrNameTaken = errors.New("worker name taken")

// ErrLeaseLost ends a session whose etcd lease expired (or could not be kept alive for a TTL).
var ErrLeaseLost = errors.New("etcd lease lost")

func (w *Worker) log() *slog.Logger {
	if w.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Logger
}

func (w *Worker) ttlSeconds() int {
	ttl := w.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return int((ttl + time.Second - 1) / time.Second)
}

// Keys.
func workersKey(prefix string) string         { return prefix + "/workers/" }
func drainKey(prefix, name string) string     { return prefix + "/drain/" + name }
func electKey(prefix, pipeline string) string { return prefix + "/elect/" + pipeline }
func holdingKey(prefix, p string) string      { return prefix + "/pipelines/" + p }
func errorKey(prefix, p string) string        { return prefix + "/errors/" + p }
func progressKey(prefix, name string) string  { return prefix + "/progress/" + name }

// HeartbeatEvery is how often the worker publishes its pipelines' progress: a third of the lease TTL, the
// pace at which the etcd client keeps the lease alive, so status is at most that stale.
func (w *Worker) HeartbeatEvery() time.Duration {
	return time.Duration(w.ttlSeconds()) * time.Second / 3
}

// Serve runs the worker until ctx ends: joins the fleet, runs the pipelines it is elected for, and rejoins
// after losing its lease. When ctx's soft stop begins (SIGTERM) it drains: marks itself draining so the others
// take its share, stops its pipelines softly, resigns and leaves. It returns ErrNameTaken when another live
// process holds its name for two lease TTLs, at start or at a rejoin.
func (w *Worker) Serve(ctx context.Context) error {
	if w.Name == "" || strings.Contains(w.Name, "/") {
		return fmt.Errorf("fleet worker name %q: want a non-empty name without '/'", w.Name)
	}
	if w.instance == "" {
		var b [16]byte
		rand.Read(b[:])
		w.instance = hex.EncodeToString(b[:])
	}
	backoff := time.Second
	var takenSince time.Time // when the name was first found taken since this worker last joined
	for {
		joined, err := w.session(ctx)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if joined {
			takenSince = time.Time{}
		}
		if errors.Is(err, ErrNameTaken) {
			// claimName revokes this process's own old records, so this is another process of our name (or,
			// rarely, an old lease of ours that could not be revoked and expires within a TTL): a mistake to
			// report (at start) or a process that replaced this one while it was cut off (at a rejoin). Either
			// way one of the two must go, and it is this one; only a process that just died (a quick restart)
			// frees the name by itself, when its lease expires: wait that long, no longer, then give up.
			wait := 2 * time.Duration(w.ttlSeconds()) * time.Second
			if takenSince.IsZero() {
				takenSince = time.Now()
				w.log().Warn("fleet: worker name in use; waiting for its lease to expire in case its process died", "err", err, "wait_at_most", wait)
			}
			if time.Since(takenSince) > wait {
				w.log().Error("fleet: failed: another live worker has this worker's name; this worker stops", "worker", w.Name, "err", err)
				return err
			}
			if !sleep(ctx, 500*time.Millisecond) {
				return nil
			}
			continue
		}
		select {
		case <-shutdown.Draining(ctx):
			return nil
		default:
		}
		w.log().Error("fleet: not in the fleet; this worker runs no pipeline until it rejoins", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-shutdown.Draining(ctx):
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Duration(w.ttlSeconds())*time.Second)
	}
}

// holder is one pipeline this worker campaigns for or runs.
type holder struct {
	stop   func() // soft stop
	cancel context.CancelFunc
	done   chan struct{}
}

type session struct {
	w *Worker
	s *concurrency.Session
	// lease tells when the lease must be taken as lost; alive ends then, and with it every etcd call a
	// holder makes to clean up: the keys go with the lease, and a cut-off etcd would stall each call.
	lease    *leaseClock
	alive    context.Context
	markLost context.CancelFunc
	member   Member
	holders  map[string]*holder
	held     map[string]bool // won and running
	events   chan heldEvent
	members  map[string]Member
	draining bool // drain requested (fleet drain)
	joined   bool // registered under the worker's name
}

type heldEvent struct {
	pipeline string
	held     bool // true: won; false: gave up or ended
	ended    bool // the holder goroutine returned
}

// session is one membership of the fleet, under one etcd lease; joined reports whether it registered.
func (w *Worker) session(ctx context.Context) (joined bool, err error) {
	gctx, cancel := context.WithTimeout(ctx, time.Duration(w.ttlSeconds())*time.Second)
	asked := time.Now() // etcd starts the lease's TTL after this
	lease, err := w.Client.Grant(gctx, int64(w.ttlSeconds()))
	cancel()
	if err != nil {
		return false, fmt.Errorf("etcd lease grant: %w", err)
	}
	// The session's context is not ctx: a soft stop must still resign and leave through it.
	s, err := concurrency.NewSession(w.Client, concurrency.WithLease(lease.ID), concurrency.WithTTL(w.ttlSeconds()))
	if err != nil {
		return false, fmt.Errorf("etcd session: %w", err)
	}
	host, _ := os.Hostname()
	ss := &session{
		w: w, s: s,
		member: Member{Name: w.Name, Version: w.Version, Host: host, PID: os.Getpid(), Started: time.Now().UTC(),
			Instance: w.instance, Pipelines: []string{}},
		holders: map[string]*holder{}, held: map[string]bool{}, events: make(chan heldEvent, 64),
	}
	ss.alive, ss.markLost = context.WithCancel(context.WithoutCancel(ctx))
	defer ss.markLost()
	lctx, lcancel := context.WithCancel(ss.alive)
	defer lcancel()
	ss.lease = watchLease(lctx, w.Client, lease.ID, asked, time.Duration(lease.TTL)*time.Second)
	err = ss.run(ctx)
	return ss.joined, err
}

// claimName registers this worker under its name unless another live process is registered under it: two
// workers of one name would both take that name's share of the pipelines.
func (ss *session) claimName(ctx context.Context) error {
	w := ss.w
	key := workersKey(w.Prefix) + w.Name
	b, _ := json.Marshal(ss.member)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for revoked := clientv3.NoLease; ; {
		resp, err := w.Client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(b), clientv3.WithLease(ss.s.Lease()))).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return err
		}
		if resp.Succeeded {
			return nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // gone between the compare and the read: cannot happen in one transaction, but try again
		}
		var m Member
		json.Unmarshal(kvs[0].Value, &m)
		old := clientv3.LeaseID(kvs[0].Lease)
		if m.Instance != w.instance && old != revoked && !w.joined && predecessorDead(m) {
			// This process's predecessor under this name, on this host, is not running: a crash and a restart
			// (systemd, a container's restart policy). Waiting for its lease would not only cost a TTL: the others
			// would take its pipelines when it expires, and hand them back to this worker a moment later (the
			// assignment is by name), so every one of them would change hands twice. Take the record over in one
			// put (the others see the worker stay, not leave and come back, so none campaigns for its pipelines),
			// then revoke the old lease, which takes the dead process's election keys along.
			tr, err := w.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision)).
				Then(clientv3.OpPut(key, string(b), clientv3.WithLease(ss.s.Lease()))).Commit()
			if err != nil {
				return err
			}
			if !tr.Succeeded {
				continue // the record changed meanwhile: look again
			}
			if _, err := w.Client.Revoke(ctx, old); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				w.log().Warn("fleet: could not revoke the lease of this worker's previous process; its pipelines wait for it to expire", "lease", fmt.Sprintf("%x", int64(old)), "err", err)
			}
			w.log().Info("fleet: took over from this worker's previous process, which is not running", "worker", w.Name, "pid", m.PID, "started", m.Started.Format(time.RFC3339))
			return nil
		}
		if m.Instance != w.instance || old == revoked {
			return fmt.Errorf("%w: a live worker named %q is in fleet %s (host %s, pid %d, started %s): give this worker another --name, or stop that one; if it died, its etcd lease frees the name within %ds",
				ErrNameTaken, w.Name, w.Prefix, m.Host, m.PID, m.Started.Format(time.RFC3339), w.ttlSeconds())
		}
		// Our own record from an earlier session whose lease this process gave up on: etcd still keeps it
		// (a quorum loss stops lease expiry; the new leader then renews every lease for a full TTL). Revoke
		// that lease, which takes our stale election keys along, and register anew. A lease already gone is
		// fine; one that cannot be revoked leaves the name taken, which Serve waits out for a bounded time.
		if _, err := w.Client.Revoke(ctx, old); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("%w: by this process's previous etcd lease %x, which could not be revoked (%v); it expires within %ds",
				ErrNameTaken, int64(old), err, w.ttlSeconds())
		}
		w.log().Info("fleet: revoked this worker's lease from before it lost touch with etcd", "worker", w.Name, "lease", fmt.Sprintf("%x", int64(old)))
		revoked = old
	}
}

// predecessorDead reports whether the worker of record m, of another process instance, was on this host and
// is not running: its pid is gone, or is this process's own (a restarted container starts again with the same
// pid in a new pid namespace). Only checked at the process's start: at a rejoin a record of another instance
// is another live process (a duplicate name), which Serve waits out and reports.
func predecessorDead(m Member) bool {
	host, err := os.Hostname()
	if err != nil || m.Host == "" || m.Host != host || m.PID <= 0 {
		return false
	}
	if m.PID == os.Getpid() {
		return true
	}
	p, err := os.FindProcess(m.PID)
	if err != nil {
		return true
	}
	return errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone)
}

func (ss *session) putMember(ctx context.Context) error {
	ss.member.Pipelines = ss.member.Pipelines[:0]
	for p, h := range ss.held {
		if h {
			ss.member.Pipelines = append(ss.member.Pipelines, p)
		}
	}
	sort.Strings(ss.member.Pipelines)
	b, _ := json.Marshal(ss.member)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := ss.w.Client.Put(ctx, workersKey(ss.w.Prefix)+ss.w.Name, string(b), clientv3.WithLease(ss.s.Lease()))
	return err
}

func (ss *session) run(ctx context.Context) error {
	w, log := ss.w, ss.w.log()
	bg := context.WithoutCancel(ctx)
	err := ss.claimName(ctx)
	if err != nil {
		// Nothing of ours is in etcd yet: give the lease back rather than leave it to expire.
		rctx, cancel := context.WithTimeout(bg, 5*time.Second)
		ss.s.Orphan()
		w.Client.Revoke(rctx, ss.s.Lease())
		cancel()
		if errors.Is(err, ErrNameTaken) {
			return err
		}
		return fmt.Errorf("register worker %s: %w", w.Name, err)
	}
	ss.joined, w.joined = true, true
	log.Info("fleet: joined", "worker", w.Name, "lease_ttl_s", ss.w.ttlSeconds(), "prefix", w.Prefix)

	wctx, wcancel := context.WithCancel(bg)
	defer wcancel()
	members, rev, err := ss.readMembers(ctx)
	if err != nil {
		ss.s.Orphan()
		return err
	}
	ss.members = members
	dr, err := w.Client.Get(ctx, drainKey(w.Prefix, w.Name))
	if err != nil {
		ss.s.Orphan()
		return fmt.Errorf("read drain request: %w", err)
	}
	ss.setDraining(ctx, len(dr.Kvs) > 0)
	if w.Progress != nil {
		go ss.publishProgress(wctx)
	}
	mwatch := w.Client.Watch(clientv3.WithRequireLeader(wctx), workersKey(w.Prefix), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	dwatch := w.Client.Watch(clientv3.WithRequireLeader(wctx), drainKey(w.Prefix, w.Name), clientv3.WithRev(dr.Header.Revision+1))
	ss.reconcile(bg)

	// The loop's own etcd reads end when the lease is lost: with quorum gone each would wait out its timeout,
	// and the loop would reach the lease's case only after it.
	live, cancelLive := context.WithCancel(ctx)
	defer cancelLive()
	go func() {
		select {
		case <-ss.lease.Lost():
			cancelLive()
		case <-live.Done():
		}
	}()
	for {
		// A lost lease comes first: select picks at random among ready cases, and a watch failing over and
		// over (no etcd leader) is always ready.
		select {
		case <-ss.lease.Lost():
			return ss.leaseLost()
		default:
		}
		select {
		case <-ss.lease.Lost():
			return ss.leaseLost()
		case <-ss.s.Done(): // the client gave up on the lease; the clock above normally fires first
			return ss.leaseLost()
		case <-shutdown.Draining(ctx):
			log.Info("fleet: stopping: handing pipelines over after their in-flight commits", "worker", w.Name, "pipelines", ss.heldList())
			ss.member.Draining = true
			if err := ss.putMember(bg); err != nil {
				log.Warn("fleet: could not mark this worker draining", "err", err)
			}
			ss.stopAll(false)
			dctx, cancel := context.WithTimeout(bg, 5*time.Second)
			w.Client.Delete(dctx, workersKey(w.Prefix)+w.Name)
			cancel()
			ss.s.Close()
			log.Info("fleet: left", "worker", w.Name)
			return nil
		case <-ctx.Done():
			ss.stopAll(true)
			ss.s.Orphan()
			return nil
		case ev := <-ss.events:
			ss.apply(ctx, ev)
		case wr, ok := <-mwatch:
			if !ok || wr.Err() != nil {
				// Compaction or a lost leader: read everything again and watch from there.
				members, rev, err := ss.readMembers(live)
				if err != nil {
					log.Warn("fleet: re-reading members", "err", err)
					select {
					case <-time.After(time.Second):
					case <-live.Done():
					}
					mwatch = w.Client.Watch(clientv3.WithRequireLeader(wctx), workersKey(w.Prefix), clientv3.WithPrefix())
					continue
				}
				ss.members = members
				mwatch = w.Client.Watch(clientv3.WithRequireLeader(wctx), workersKey(w.Prefix), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
			} else {
				for _, ev := range wr.Events {
					name := strings.TrimPrefix(string(ev.Kv.Key), workersKey(w.Prefix))
					if ev.Type == clientv3.EventTypeDelete {
						delete(ss.members, name)
						continue
					}
					var m Member
					if json.Unmarshal(ev.Kv.Value, &m) == nil {
						ss.members[name] = m
					}
				}
			}
			ss.reconcile(bg)
		case wr, ok := <-dwatch:
			if !ok || wr.Err() != nil {
				// Without an etcd leader a new watch fails at once: pace the retries.
				select {
				case <-time.After(time.Second):
				case <-live.Done():
				}
				dwatch = w.Client.Watch(clientv3.WithRequireLeader(wctx), drainKey(w.Prefix, w.Name))
				continue
			}
			for _, ev := range wr.Events {
				ss.setDraining(bg, ev.Type == clientv3.EventTypePut)
			}
			ss.reconcile(bg)
		}
	}
}

// leaseLost stops every pipeline at once: no keep-alive answer for the lease's TTL (less a margin, see
// leaseClock), or etcd said it expired. etcd deletes our keys by now and another worker may be elected for our
// pipelines at once; the WAL fence stops whatever is still in flight. No etcd call stands between the
// pipelines' stop and the return (markLost ends the holders' cleanup calls): a cut-off etcd would stall each.
// The runner's hard stop kills the plugin processes at once and leaves the WAL lease to the successor's higher
// epoch (engine/run's runOnce), so the whole stop takes well under a second with etcd and S3 out of reach (the
// log line's took=).
func (ss *session) leaseLost() error {
	w, log := ss.w, ss.w.log()
	t0 := time.Now()
	log.Error("fleet: etcd lease expired; stopping every pipeline of this worker now", "worker", w.Name, "pipelines", ss.heldList(),
		"last_keepalive_answer", ss.lease.Last().UTC().Format(time.RFC3339Nano))
	ss.markLost()
	ss.stopAll(true)
	log.Info("fleet: every pipeline of this worker stopped", "worker", w.Name, "took", time.Since(t0).Round(time.Millisecond))
	// Stop renewing the lease should etcd answer again: the rejoin revokes it (claimName).
	ss.s.Orphan()
	return fmt.Errorf("worker %s: %w", w.Name, ErrLeaseLost)
}

// publishProgress puts the held pipelines' progress under this worker's lease at every heartbeat until ctx
// ends. One put per worker, not per pipeline: the cost stays at the lease keep-alive's pace.
func (ss *session) publishProgress(ctx context.Context) {
	w := ss.w
	tick := time.NewTicker(w.HeartbeatEvery())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rec := progressRecord{Published: time.Now().UTC(), Pipelines: map[string]Progress{}}
		for _, p := range w.Pipelines {
			if !w.Holds(p.Name) {
				continue
			}
			// A run from before this term (the pipeline came back to this worker) is not this holder's progress.
			since, _ := w.elected.Load(p.Name)
			if pr, ok := w.Progress(p.Name); ok && since != nil && !pr.Started.Before(since.(time.Time)) {
				rec.Pipelines[p.Name] = pr
			}
		}
		b, _ := json.Marshal(rec)
		pctx, cancel := context.WithTimeout(ctx, w.HeartbeatEvery())
		_, err := w.Client.Put(pctx, progressKey(w.Prefix, w.Name), string(b), clientv3.WithLease(ss.s.Lease()))
		cancel()
		if err != nil && ctx.Err() == nil {
			w.log().Debug("fleet: could not publish progress", "err", err)
		}
	}
}

func (ss *session) setDraining(ctx context.Context, on bool) {
	if ss.draining == on {
		return
	}
	ss.draining = on
	ss.member.Draining = on
	if on {
		ss.w.log().Info("fleet: drain requested: handing every pipeline to other workers", "worker", ss.w.Name)
	} else {
		ss.w.log().Info("fleet: drain cancelled: taking a share of pipelines again", "worker", ss.w.Name)
	}
	if err := ss.putMember(ctx); err != nil {
		ss.w.log().Warn("fleet: could not update this worker's record", "err", err)
	}
}

func (ss *session) readMembers(ctx context.Context) (map[string]Member, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := ss.w.Client.Get(ctx, workersKey(ss.w.Prefix), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("read fleet members: %w", err)
	}
	out := map[string]Member{}
	for _, kv := range resp.Kvs {
		var m Member
		if json.Unmarshal(kv.Value, &m) == nil {
			out[strings.TrimPrefix(string(kv.Key), workersKey(ss.w.Prefix))] = m
		}
	}
	return out, resp.Header.Revision, nil
}

// live are the members that take pipelines: alive and not draining.
func live(members map[string]Member) []string {
	var out []string
	for name, m := range members {
		if !m.Draining {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func (ss *session) reconcile(ctx context.Context) {
	w := ss.w
	var mine map[string]string
	if !ss.draining && !ss.member.Draining {
		workers := live(ss.members)
		if !slices.Contains(workers, w.Name) {
			workers = append(workers, w.Name) // our own record may not have come back through the watch yet
		}
		mine = Assign(w.Pipelines, workers)
	}
	for _, p := range w.Pipelines {
		h, running := ss.holders[p.Name]
		want := mine[p.Name] == w.Name
		switch {
		case want && !running:
			ss.start(ctx, p.Name)
		case !want && running && h.stop != nil:
			w.log().Info("fleet: pipeline assigned elsewhere; stopping it after its in-flight commits", "pipeline", p.Name, "to", mine[p.Name])
			h.stop()
			h.stop = nil // stopping; the holder reports when it has ended
		}
	}
}

func (ss *session) start(parent context.Context, name string) {
	grace := ss.w.StopTimeout
	if grace <= 0 {
		grace = shutdown.DefaultGrace
	}
	ctx, stop, cancel := shutdown.Child(parent, grace)
	h := &holder{stop: stop, cancel: cancel, done: make(chan struct{})}
	ss.holders[name] = h
	go func() {
		defer close(h.done)
		defer func() { ss.events <- heldEvent{pipeline: name, ended: true} }()
		ss.hold(ctx, name)
	}()
}

func (ss *session) apply(ctx context.Context, ev heldEvent) {
	if ev.ended {
		if h, ok := ss.holders[ev.pipeline]; ok {
			<-h.done
			h.cancel()
			delete(ss.holders, ev.pipeline)
		}
		ev.held = false
	}
	if ss.held[ev.pipeline] != ev.held {
		ss.held[ev.pipeline] = ev.held
		ss.w.holding.Store(ev.pipeline, ev.held)
		if err := ss.putMember(context.WithoutCancel(ctx)); err != nil {
			ss.w.log().Warn("fleet: could not update this worker's record", "err", err)
		}
	}
	if ev.ended {
		ss.reconcile(context.WithoutCancel(ctx)) // it may be ours again
	}
}

func (ss *session) heldList() []string {
	var out []string
	for p, h := range ss.held {
		if h {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// stopAll stops every pipeline: softly (in-flight commits finish) or at once, and waits for them.
func (ss *session) stopAll(hard bool) {
	for _, h := range ss.holders {
		if hard {
			h.cancel()
		} else if h.stop != nil {
			h.stop()
		}
	}
	for name, h := range ss.holders {
		for waiting := true; waiting; {
			select {
			case <-h.done:
				waiting = false
			case <-ss.events: // holders report as they end; nobody else reads them now
			}
		}
		h.cancel()
		delete(ss.holders, name)
		delete(ss.held, name)
		ss.w.holding.Delete(name)
	}
}

// hold campaigns for the pipeline and runs it while elected, until ctx ends.
func (ss *session) hold(ctx context.Context, name string) {
	w, log := ss.w, ss.w.log().With("pipeline", name)
	// Cleanup outlives the holder's context but not the lease: once it is lost, the keys go with it.
	bg := ss.alive
	e := concurrency.NewElection(ss.s, electKey(w.Prefix, name))
	// Our candidacy key can outlive a campaign that failed or was cancelled (the put may have landed after
	// the context ended), and a key of ours left in the election blocks every other candidate for as long as
	// this worker lives. Delete it whenever we stop campaigning.
	mine := fmt.Sprintf("%s/%x", electKey(w.Prefix, name), ss.s.Lease())
	withdraw := func() {
		dctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		if _, err := w.Client.Delete(dctx, mine); err != nil && bg.Err() == nil {
			log.Warn("fleet: could not withdraw from the election; the key goes with this worker's lease", "key", mine, "err", err)
		}
	}
	defer withdraw()
	// A soft stop ends a campaign at once (nothing is in flight yet); a running pipeline sees it itself.
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	go func() {
		select {
		case <-shutdown.Draining(ctx):
			ccancel()
		case <-cctx.Done():
		}
	}()
	for {
		t0 := time.Now()
		if err := e.Campaign(cctx, w.Name); err != nil {
			withdraw()
			if cctx.Err() != nil {
				return
			}
			log.Warn("fleet: campaign failed; retrying", "err", err)
			if !sleep(ctx, time.Second) {
				return
			}
			continue
		}
		epoch := uint64(e.Rev())
		w.elected.Store(name, time.Now())
		log.Info("fleet: elected; starting the pipeline", "worker", w.Name, "epoch", epoch, "waited", time.Since(t0).Round(time.Millisecond))
		hb, _ := json.Marshal(Holding{Pipeline: name, Holder: w.Name, Epoch: epoch, Since: time.Now().UTC()})
		pctx, cancel := context.WithTimeout(bg, 5*time.Second)
		if _, err := w.Client.Put(pctx, holdingKey(w.Prefix, name), string(hb), clientv3.WithLease(ss.s.Lease())); err != nil {
			log.Warn("fleet: could not record the holder", "err", err)
		}
		cancel()
		select {
		case ss.events <- heldEvent{pipeline: name, held: true}:
		case <-ctx.Done():
		}
		err := w.Runner.Run(ctx, name, epoch)
		// Stopped: Health says so now, not after the etcd calls below.
		w.holding.Store(name, false)
		// The holding record goes before the election key: once we resign the next holder writes its own.
		rctx, cancel := context.WithTimeout(bg, 5*time.Second)
		w.Client.Txn(rctx).If(clientv3.Compare(clientv3.Value(holdingKey(w.Prefix, name)), "=", string(hb))).
			Then(clientv3.OpDelete(holdingKey(w.Prefix, name))).Commit()
		if err != nil && cctx.Err() == nil {
			eb, _ := json.Marshal(LastError{Worker: w.Name, Error: err.Error(), Time: time.Now().UTC()})
			w.Client.Put(rctx, errorKey(w.Prefix, name), string(eb))
		}
		if rerr := e.Resign(rctx); rerr != nil && bg.Err() == nil {
			log.Warn("fleet: resign failed; the election key goes with this worker's lease", "err", rerr)
		}
		cancel()
		withdraw()
		select {
		case ss.events <- heldEvent{pipeline: name, held: false}:
		case <-ctx.Done():
		}
		if cctx.Err() != nil {
			log.Info("fleet: pipeline stopped and handed over", "worker", w.Name, "epoch", epoch)
			return
		}
		retry := w.RetryAfter
		if retry <= 0 {
			retry = 5 * time.Second
		}
		log.Error("fleet: pipeline ended; campaigning again", "epoch", epoch, "err", err, "retry_in", retry)
		if !sleep(ctx, retry) {
			return
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-shutdown.Draining(ctx):
		return false
	case <-time.After(d):
		return true
	}
}

// Holds reports whether this worker runs the pipeline right now.
func (w *Worker) Holds(pipeline string) bool {
	v, ok := w.holding.Load(pipeline)
	return ok && v.(bool)
}

// Health serves GET /fleet/pipelines/NAME: 200 on the worker that runs the pipeline, 503 on every other
// worker, 404 for a pipeline not in the config. A load balancer in front of every worker's push endpoint (the
// HTTP source) checks it to send traffic only to the holder.
func (w *Worker) Health() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /fleet/pipelines/{name}", func(rw http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if !slices.ContainsFunc(w.Pipelines, func(p Pipeline) bool { return p.Name == name }) {
			http.Error(rw, "no pipeline "+name+" in this worker's config", http.StatusNotFound)
			return
		}
		if !w.Holds(name) {
			http.Error(rw, "pipeline "+name+" is not held by worker "+w.Name, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(rw, "pipeline %s is held by worker %s\n", name, w.Name)
	})
	return mux
}

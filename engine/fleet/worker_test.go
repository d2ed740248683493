package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/skippr-dev/skippr/engine/shutdown"
	"github.com/skippr-dev/skippr/testkit/etcdtest"
)

// ledger records who runs what, and fails the test when two workers run one pipeline at once or an epoch
// does not grow.
type ledger struct {
	t       *testing.T
	mu      sync.Mutex
	running map[string]string // pipeline → worker
	epochs  map[string]uint64
	starts  int
}

func newLedger(t *testing.T) *ledger {
	return &ledger{t: t, running: map[string]string{}, epochs: map[string]uint64{}}
}

func (l *ledger) run(worker string) RunFunc {
	return func(ctx context.Context, p string, epoch uint64) error {
		l.mu.Lock()
		if other, ok := l.running[p]; ok {
			l.t.Errorf("pipeline %s started on %s while %s runs it", p, worker, other)
		}
		if epoch <= l.epochs[p] {
			l.t.Errorf("pipeline %s: epoch %d after %d", p, epoch, l.epochs[p])
		}
		l.running[p], l.epochs[p] = worker, epoch
		l.starts++
		l.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-shutdown.Draining(ctx):
		}
		l.mu.Lock()
		delete(l.running, p)
		l.mu.Unlock()
		return nil
	}
}

func (l *ledger) load() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, w := range l.running {
		out[w]++
	}
	return out
}

func (l *ledger) waitFor(t *testing.T, what string, timeout time.Duration, ok func(map[string]int) bool) time.Duration {
	t.Helper()
	t0 := time.Now()
	for {
		if ok(l.load()) {
			return time.Since(t0)
		}
		if time.Since(t0) > timeout {
			t.Fatalf("%s: not after %s; running: %v", what, timeout, l.load())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type testWorker struct {
	w      *Worker
	cancel context.CancelFunc
	stop   func()
	done   chan struct{}
}

func startWorker(t *testing.T, c *etcdtest.Cluster, prefix, name string, ps []Pipeline, l *ledger, opts ...func(*Worker)) *testWorker {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, stop, cancel := shutdown.Child(context.Background(), 30*time.Second)
	w := &Worker{Client: cli, Prefix: prefix, Name: name, TTL: 3 * time.Second, Pipelines: ps, Runner: l.run(name),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("w", name), RetryAfter: 200 * time.Millisecond}
	for _, o := range opts {
		o(w)
	}
	tw := &testWorker{w: w, cancel: cancel, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(tw.done)
		if err := w.Serve(ctx); err != nil {
			t.Errorf("worker %s: %v", name, err)
		}
	}()
	t.Cleanup(func() { cancel(); <-tw.done })
	return tw
}

func all(n int) func(map[string]int) bool {
	return func(m map[string]int) bool {
		sum := 0
		for _, v := range m {
			sum += v
		}
		return sum == n
	}
}

func balanced(n int, workers ...string) func(map[string]int) bool {
	return func(m map[string]int) bool {
		sum := 0
		for _, w := range workers {
			if m[w] > (n+len(workers)-1)/len(workers) || m[w] == 0 {
				return false
			}
			sum += m[w]
		}
		return sum == n
	}
}

func TestWorkersShareAndHandOver(t *testing.T) {
	c := etcdtest.New(t, 3)
	l := newLedger(t)
	ps := pipelines(12)
	ws := map[string]*testWorker{}
	for _, n := range []string{"a", "b", "c"} {
		ws[n] = startWorker(t, c, "/fleet-test", n, ps, l)
	}
	l.waitFor(t, "12 pipelines over 3 workers, 4 each", 60*time.Second, balanced(12, "a", "b", "c"))

	// A fourth worker takes its share.
	ws["d"] = startWorker(t, c, "/fleet-test", "d", ps, l)
	l.waitFor(t, "12 over 4, 3 each", 60*time.Second, balanced(12, "a", "b", "c", "d"))

	// A soft stop (SIGTERM) hands d's pipelines over.
	ws["d"].stop()
	<-ws["d"].done
	l.waitFor(t, "back to 3 workers", 60*time.Second, balanced(12, "a", "b", "c"))

	// A crash: the worker stops without resigning or revoking; its pipelines move when its lease expires.
	ws["c"].cancel()
	<-ws["c"].done
	took := l.waitFor(t, "c's pipelines on a and b", 60*time.Second, balanced(12, "a", "b"))
	t.Logf("takeover after a crash: %s (lease TTL 3s)", took)
	if took < time.Second {
		t.Fatalf("pipelines moved %s after the crash, before the lease could expire: the crashed worker's keys were not left to expire", took)
	}
}

func TestDrainRequest(t *testing.T) {
	c := etcdtest.New(t, 3)
	l := newLedger(t)
	ps := pipelines(6)
	wa := startWorker(t, c, "/fleet-drain", "a", ps, l).w
	wb := startWorker(t, c, "/fleet-drain", "b", ps, l).w
	l.waitFor(t, "6 over 2", 60*time.Second, balanced(6, "a", "b"))
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Drain(ctx, cli, "/fleet-drain", "a", true); err != nil {
		t.Fatal(err)
	}
	l.waitFor(t, "all on b", 60*time.Second, func(m map[string]int) bool { return m["b"] == 6 && m["a"] == 0 })
	for w, code := range map[*Worker]int{wa: http.StatusServiceUnavailable, wb: http.StatusOK} {
		rec := httptest.NewRecorder()
		w.Health().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/fleet/pipelines/p00", nil))
		if rec.Code != code {
			t.Fatalf("health of p00 on %s: %d %s, want %d", w.Name, rec.Code, rec.Body, code)
		}
	}
	rec := httptest.NewRecorder()
	wb.Health().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/fleet/pipelines/nope", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("health of an unknown pipeline: %d", rec.Code)
	}
	// A worker publishes what it holds after its runs start, so status may lag the ledger for a moment.
	var st *Status
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		st, err = ReadStatus(ctx, cli, "/fleet-drain", ps)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Workers) == 2 && st.Workers[0].Draining && st.Workers[0].Name == "a" && len(st.Workers[1].Pipelines) == 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status workers after 10s: %+v", st.Workers)
		}
	}
	for _, p := range st.Pipelines {
		if p.Holder != "b" || p.Epoch == 0 {
			t.Fatalf("status pipeline: %+v", p)
		}
	}
	if err := Drain(ctx, cli, "/fleet-drain", "a", false); err != nil {
		t.Fatal(err)
	}
	l.waitFor(t, "a takes its share again", 60*time.Second, balanced(6, "a", "b"))
	if l.starts < 6+3+3 {
		t.Fatalf("%d starts", l.starts)
	}
}

// TestStatusProgress: a holder publishes its pipelines' progress at its heartbeat, and status shows the lag of
// each from it; progress of a run older than the holder's election (a previous term) is not shown.
func TestStatusProgress(t *testing.T) {
	c := etcdtest.New(t, 3)
	l := newLedger(t)
	ps := pipelines(2)
	oldest := time.Now().Add(-time.Minute)
	startWorker(t, c, "/fleet-progress", "a", ps, l, func(w *Worker) {
		w.Progress = func(p string) (Progress, bool) {
			switch p {
			case "p00":
				return Progress{Committed: 9, Applied: 6, UnappliedBytes: 300, OldestUnapplied: oldest, Started: time.Now()}, true
			default:
				return Progress{Committed: 1, Started: time.Now().Add(-time.Hour)}, true
			}
		}
	})
	l.waitFor(t, "both on a", 60*time.Second, all(2))
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var st *Status
	for {
		if st, err = ReadStatus(ctx, cli, "/fleet-progress", ps); err != nil {
			t.Fatal(err)
		}
		if st.Pipelines[0].Progress != nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	p0, p1 := st.Pipelines[0], st.Pipelines[1]
	if p0.Progress == nil || p0.Progress.Applied != 6 || p0.LagEntries != 3 || p0.LagSeconds < 59 || p0.LagSeconds > 120 || p0.Published.IsZero() {
		t.Fatalf("p00's status: %+v progress %+v", p0, p0.Progress)
	}
	if age := time.Since(p0.Published); age > time.Minute {
		t.Fatalf("p00's progress is %s old", age)
	}
	if p1.Progress != nil || p1.LagEntries != 0 {
		t.Fatalf("p01 shows the progress of a run from before its election: %+v", p1.Progress)
	}
}

// newClient is a client of the test's own, as another process would have.
func newClient(t *testing.T, c *etcdtest.Cluster) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// liveLease grants a lease the test keeps alive until it ends: a process that does not die.
func liveLease(t *testing.T, ctx context.Context, cli *clientv3.Client) clientv3.LeaseID {
	t.Helper()
	l, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.KeepAlive(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	return l.ID
}

func putMember(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string, m Member, lease clientv3.LeaseID) {
	t.Helper()
	b, _ := json.Marshal(m)
	if _, err := cli.Put(ctx, workersKey(prefix)+m.Name, string(b), clientv3.WithLease(lease)); err != nil {
		t.Fatal(err)
	}
}

// TestRejoinNameTakenByAnother: a worker loses its lease (as after a link cut) and, while it was away, another
// live process registered under its name. It must stop with ErrNameTaken and the message that names the fix
// after waiting about two lease TTLs for that process to turn out dead — not retry as long as it lives.
func TestRejoinNameTakenByAnother(t *testing.T) {
	c := etcdtest.New(t, 3)
	l := newLedger(t)
	ps := pipelines(2)
	const prefix = "/fleet-rejoin"
	cli := newClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := &Worker{Client: newClient(t, c), Prefix: prefix, Name: "x", TTL: 3 * time.Second, Pipelines: ps, Runner: l.run("x"),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), RetryAfter: 200 * time.Millisecond}
	served := make(chan error, 1)
	go func() { served <- w.Serve(ctx) }()
	l.waitFor(t, "both pipelines on x", time.Minute, all(2))

	resp, err := cli.Get(ctx, workersKey(prefix)+"x")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("x's record: %v %v", resp, err)
	}
	// Another process takes the name under its own live lease (a plain put replaces x's record), then x's
	// lease goes as it would at etcd after a cut: x finds itself out of the fleet and rejoins.
	putMember(t, ctx, cli, prefix, Member{Name: "x", Host: "elsewhere", PID: 4242, Started: time.Now().UTC(), Instance: "another process"}, liveLease(t, ctx, cli))
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	select {
	case err := <-served:
		took := time.Since(t0)
		t.Logf("x stopped %s after losing its lease: %v", took.Round(time.Millisecond), err)
		if !errors.Is(err, ErrNameTaken) {
			t.Fatalf("x ended with %v, want ErrNameTaken", err)
		}
		for _, s := range []string{`a live worker named "x" is in fleet /fleet-rejoin`, "host elsewhere, pid 4242", "another --name"} {
			if !strings.Contains(err.Error(), s) {
				t.Fatalf("x's error lacks %q: %v", s, err)
			}
		}
		if took < 2*w.TTL {
			t.Fatalf("x gave up after %s, before the other process's lease could have expired had it died", took)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("x still retrying 60 s after losing its name to another live process (lease TTL 3 s)")
	}
	if n := l.load()["x"]; n != 0 {
		t.Fatalf("x still runs %d pipelines", n)
	}
	// The other process's record is untouched.
	resp, err = cli.Get(ctx, workersKey(prefix)+"x")
	if err != nil || len(resp.Kvs) != 1 || !strings.Contains(string(resp.Kvs[0].Value), "elsewhere") {
		t.Fatalf("the other process's record: %v %v", resp, err)
	}
}

// TestRejoinRevokesOwnOldLease: etcd still holds this process's record and election keys under a lease it
// gave up on (as after a quorum loss: etcd's new leader renews every lease). The worker revokes that lease at
// once — taking the stale election key that would block the pipeline along — rather than wait for a lease
// that, here, never expires.
func TestRejoinRevokesOwnOldLease(t *testing.T) {
	c := etcdtest.New(t, 3)
	l := newLedger(t)
	ps := pipelines(2)
	const prefix = "/fleet-own"
	cli := newClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	old := liveLease(t, ctx, cli)
	putMember(t, ctx, cli, prefix, Member{Name: "x", PID: os.Getpid(), Started: time.Now().UTC(), Instance: "this process"}, old)
	if _, err := cli.Put(ctx, fmt.Sprintf("%s/%x", electKey(prefix, "p00"), int64(old)), "x", clientv3.WithLease(old)); err != nil {
		t.Fatal(err)
	}
	startWorker(t, c, prefix, "x", ps, l, func(w *Worker) { w.instance = "this process" })
	took := l.waitFor(t, "both pipelines on x", 30*time.Second, all(2))
	t.Logf("x runs both pipelines %s after start", took.Round(time.Millisecond))
	ttl, err := cli.TimeToLive(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL != -1 {
		t.Fatalf("x's old lease still there, TTL %d s", ttl.TTL)
	}
}

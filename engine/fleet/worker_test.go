package fleet

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
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
	w := &Worker{Client: cli, Prefix: prefix, Name: name, TTL: 3 * time.Second, Pipelines: ps, Run: l.run(name),
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

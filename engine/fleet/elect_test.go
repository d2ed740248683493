package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/skippr-dev/skippr/engine/shutdown"
	"github.com/skippr-dev/skippr/testkit/etcdtest"
)

// TestElectionAfterCrashWithinLease crashes the worker that holds pipelines, several times over: its client goes
// away at once (as with SIGKILL: no resign, no revoke, no keep-alive), and each of its pipelines must run again
// within the lease TTL plus a margin for a loaded machine, each taken over once. Restarted only after its
// pipelines moved, the crashed worker's share runs on the others after the TTL. Restarted at once (systemd,
// a container's restart policy), it used to wait for its dead predecessor's lease; the others took its
// pipelines when the lease expired and handed them back to it a moment later (the assignment is by name), so
// each changed hands twice and the last election came a soft stop after the TTL — 11 s at a 5 s TTL when the
// soft stop waits for plugins. Now it revokes that lease at its start and takes its share back at once.
func TestElectionAfterCrashWithinLease(t *testing.T) {
	for _, tc := range []struct {
		name   string
		atOnce bool
	}{{"restarted after the takeover", false}, {"restarted at once", true}} {
		t.Run(tc.name, func(t *testing.T) { testElectionAfterCrash(t, tc.atOnce) })
	}
}

func testElectionAfterCrash(t *testing.T, restartAtOnce bool) {
	c := etcdtest.New(t, 3)
	const prefix, ttl = "/fleet-crash", 5 * time.Second
	ps := pipelines(6)
	var mu sync.Mutex
	runs := map[string]string{}       // pipeline → worker running it
	started := map[string]time.Time{} // pipeline → when its current run started
	starts := map[string]int{}        // pipeline → runs started
	run := func(name string) RunFunc {
		return func(ctx context.Context, p string, epoch uint64) error {
			mu.Lock()
			runs[p], started[p] = name, time.Now()
			starts[p]++
			mu.Unlock()
			select {
			case <-ctx.Done():
			case <-shutdown.Draining(ctx):
				// A soft stop lets in-flight commits and applies finish: it takes a while.
				select {
				case <-ctx.Done():
				case <-time.After(2 * time.Second):
				}
			}
			mu.Lock()
			if runs[p] == name {
				delete(runs, p)
			}
			mu.Unlock()
			return nil
		}
	}
	type proc struct {
		cli    *clientv3.Client
		cancel context.CancelFunc
		done   chan struct{}
	}
	procs := map[string]*proc{}
	start := func(name string) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop, cancel := shutdown.Child(context.Background(), 30*time.Second)
		_ = stop
		w := &Worker{Client: cli, Prefix: prefix, Name: name, TTL: ttl, Pipelines: ps, Runner: run(name), RetryAfter: 200 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("w", name)}
		p := &proc{cli: cli, cancel: cancel, done: make(chan struct{})}
		go func() { defer close(p.done); w.Serve(ctx) }()
		procs[name] = p
	}
	crash := func(name string) {
		p := procs[name]
		p.cli.Close() // etcd hears nothing more from it: its keys stay until the lease expires
		p.cancel()
		<-p.done
		delete(procs, name)
	}
	t.Cleanup(func() {
		for name := range procs {
			crash(name)
		}
	})
	held := func() map[string]string {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]string{}
		for p, w := range runs {
			out[p] = w
		}
		return out
	}
	waitBalanced := func(what string, workers ...string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			h := held()
			per := map[string]int{}
			for _, w := range h {
				per[w]++
			}
			ok := len(h) == len(ps)
			for _, w := range workers {
				ok = ok && per[w] == len(ps)/len(workers)
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after a minute: %v", what, h)
			}
		}
	}
	for _, n := range []string{"a", "b", "c"} {
		start(n)
	}
	waitBalanced("6 pipelines over a, b, c", "a", "b", "c")
	var worst time.Duration
	for i, victim := range []string{"a", "b", "c", "a"} {
		time.Sleep(time.Duration(300+700*i) * time.Millisecond) // a different point of the keep-alive cycle each time
		var moved []string
		for p, w := range held() {
			if w == victim {
				moved = append(moved, p)
			}
		}
		mu.Lock()
		before := map[string]int{}
		for _, p := range moved {
			before[p] = starts[p]
		}
		mu.Unlock()
		t0 := time.Now()
		crash(victim)
		if restartAtOnce {
			start(victim)
		}
		var last time.Duration
		for deadline := t0.Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			h := held()
			done := 0
			mu.Lock()
			for _, p := range moved {
				if w, ok := h[p]; ok && (w != victim || restartAtOnce) && started[p].After(t0) {
					done++
					last = max(last, started[p].Sub(t0))
				}
			}
			mu.Unlock()
			if done == len(moved) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("crash %d of %s: its pipelines %v not running elsewhere after a minute: %v", i+1, victim, moved, h)
			}
		}
		t.Logf("crash %d of %s: its %d pipelines running again after %s (lease TTL %s)", i+1, victim, len(moved), last.Round(time.Millisecond), ttl)
		worst = max(worst, last)
		if !restartAtOnce {
			start(victim)
		}
		waitBalanced(fmt.Sprintf("%s back", victim), "a", "b", "c")
		if restartAtOnce {
			mu.Lock()
			for _, p := range moved {
				if n := starts[p] - before[p]; n != 1 {
					t.Errorf("crash %d of %s, restarted at once: pipeline %s started %d times since, want once (no detour through another worker)", i+1, victim, p, n)
				}
			}
			mu.Unlock()
		}
	}
	// The lease TTL, plus etcd's expiry check (every 500 ms) and the campaign: 2 s of margin on a loaded machine.
	if worst > ttl+2*time.Second {
		t.Fatalf("a crashed worker's pipelines ran elsewhere after up to %s; want at most the lease TTL %s + 2s", worst, ttl)
	}
}

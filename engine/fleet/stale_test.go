package fleet

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/testkit/etcdtest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestStatusWhenEtcdUnreachable: with its quorum, status is etcd's and is cached on this host; with the quorum
// lost (2 of 3 members killed), a status answers within 2 s from the surviving member's copy, marked stale
// since the fleet's last heartbeat; with every member down, from this host's cache, stale since that read; with
// no cache either, an error that says so. Before, the status waited for its 15 s timeout and printed nothing.
func TestStatusWhenEtcdUnreachable(t *testing.T) {
	c := etcdtest.New(t, 3)
	l := newLedger(t)
	ps := pipelines(2)
	const prefix = "/fleet-stale"
	startWorker(t, c, prefix, "a", ps, l, func(w *Worker) {
		w.Progress = func(string) (Progress, bool) { return Progress{Committed: 5, Applied: 5, Started: time.Now()}, true }
	})
	l.waitFor(t, "both pipelines on a", time.Minute, all(2))
	cli := newClient(t, c)
	cache := filepath.Join(t.TempDir(), "fleet", "status.json")
	ctx := context.Background()
	read := func(what string, path string) (*Status, time.Duration, error) {
		t.Helper()
		t0 := time.Now()
		st, err := ReadStatusOrLast(ctx, cli, prefix, ps, path)
		took := time.Since(t0)
		t.Logf("%s: answered in %s", what, took.Round(time.Millisecond))
		if took > 2*time.Second {
			t.Fatalf("%s: status took %s, want at most 2s", what, took)
		}
		return st, took, err
	}
	// Healthy: wait until the holder's heartbeat shows, so the stale reads below have a heartbeat to date by.
	var st *Status
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var err error
		if st, _, err = read("quorum", cache); err != nil {
			t.Fatal(err)
		}
		if st.Stale != nil {
			t.Fatalf("a status read with the quorum is marked stale: %+v", st.Stale)
		}
		if st.Pipelines[0].Progress != nil && st.Pipelines[1].Progress != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat in the status after a minute: %+v", st.Pipelines)
		}
	}
	if _, err := os.Stat(cache); err != nil {
		t.Fatalf("the quorum read left no cache: %v", err)
	}

	// Quorum lost: the surviving member's copy, dated by the newest heartbeat (one every TTL/3 = 1 s).
	c.Kill(1)
	c.Kill(2)
	lostAt := time.Now()
	st, _, err := read("quorum lost", cache)
	if err != nil {
		t.Fatal(err)
	}
	if st.Stale == nil || !strings.Contains(st.Stale.Source, "etcd member's own copy") {
		t.Fatalf("status without the quorum: stale %+v, want the surviving member's copy", st.Stale)
	}
	if d := lostAt.Sub(st.Stale.Since); d < 0 || d > 10*time.Second {
		t.Fatalf("stale since %s, the quorum was lost at %s: want the last heartbeat before it", st.Stale.Since, lostAt)
	}
	for _, p := range st.Pipelines {
		if p.Holder != "a" || p.Progress == nil {
			t.Fatalf("the last state known lacks pipeline %s's holder or progress: %+v", p.Name, p)
		}
	}
	var b strings.Builder
	st.WriteText(&b, time.Now())
	if !strings.HasPrefix(b.String(), "STALE: etcd unreachable since "+st.Stale.Since.UTC().Format(time.RFC3339)) {
		t.Fatalf("the text does not open with the staleness:\n%s", b.String())
	}

	// Every member down: this host's cache of its last quorum read.
	cachedAt := st.Stale.Since
	c.Kill(0)
	st, _, err = read("every member down", cache)
	if err != nil {
		t.Fatal(err)
	}
	if st.Stale == nil || !strings.Contains(st.Stale.Source, cache) || st.Stale.Since.After(cachedAt.Add(10*time.Second)) || st.Pipelines[0].Holder != "a" {
		t.Fatalf("status with every member down: stale %+v, pipelines %+v; want this host's cache", st.Stale, st.Pipelines)
	}
	// No cache either: nothing to show, and the error says why.
	if _, _, err := read("every member down, no cache", filepath.Join(t.TempDir(), "none.json")); err == nil || !strings.Contains(err.Error(), "etcd unreachable") {
		t.Fatalf("status with nothing known: %v, want an error naming etcd unreachable", err)
	}
}

// TestUnreachable: what counts as etcd out of reach (show the last state) and what as a refusal (an error).
// The Unknown case is CI's: a member got the read but no quorum within the budget, and its answer carried
// its own deadline as code Unknown; taken for a refusal, `fleet status` failed while etcd recovered.
func TestUnreachable(t *testing.T) {
	for _, c := range []struct {
		name     string
		err      error
		timedOut bool
		want     bool
	}{
		{"client deadline", context.DeadlineExceeded, true, true},
		{"unavailable", status.Error(codes.Unavailable, "no leader"), false, true},
		{"server deadline", status.Error(codes.DeadlineExceeded, "deadline"), false, true},
		{"member's deadline as Unknown, budget spent", status.Error(codes.Unknown, "context deadline exceeded"), true, true},
		// CI again: the member's deadline (counted from the request's arrival) lapsed before the client's timer
		// fired, so the budget looked unspent.
		{"member's deadline as Unknown, budget not yet seen spent", status.Error(codes.Unknown, "context deadline exceeded"), false, true},
		{"Unknown within the budget", status.Error(codes.Unknown, "something else"), false, false},
		{"permission denied", rpctypes.ErrPermissionDenied, false, false},
	} {
		if got := unreachable(c.err, c.timedOut); got != c.want {
			t.Errorf("%s: unreachable(%v, %v) = %v, want %v", c.name, c.err, c.timedOut, got, c.want)
		}
	}
}

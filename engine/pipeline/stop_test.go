package pipeline_test

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/shutdown"
)

// watchedDestination is the real testdest plugin, slowed down, telling which applies began and which finished.
type watchedDestination struct {
	pipeline.Destination
	delay   time.Duration
	began   chan uint64
	mu      sync.Mutex
	applied []uint64
}

func (w *watchedDestination) ApplyRange(ctx context.Context, p string, first, seq uint64, items iter.Seq[pipeline.ApplyItem]) (pipeline.ApplyResult, error) {
	select {
	case w.began <- seq:
	default:
	}
	time.Sleep(w.delay)
	resp, err := w.Destination.ApplyRange(ctx, p, first, seq, items)
	if err == nil {
		w.mu.Lock()
		w.applied = append(w.applied, seq)
		w.mu.Unlock()
	}
	return resp, err
}

// A soft stop lets the apply in flight finish (a hard one would cut it off) and Run returns nil.
func TestSoftStopFinishesTheApplyInFlight(t *testing.T) {
	src, dst := start(t, "datagen"), start(t, "testdest")
	srcSettings := []byte(`{"seed": 3, "rows": 0, "rows_per_second": 2000, "batch_size": 200}`)
	w := &watchedDestination{Destination: plug(dst, []byte(fmt.Sprintf(`{"dir": %q}`, t.TempDir()))), delay: 700 * time.Millisecond, began: make(chan uint64, 1)}
	cfg := config("soft", src, srcSettings, w, openLog(t, t.TempDir()))
	cfg.Once = false
	ctx, release := shutdown.OnSignals(context.Background(), time.Minute, syscall.SIGUSR1)
	defer release()
	errc := make(chan error, 1)
	go func() { errc <- pipeline.Run(ctx, cfg) }()
	var inflight uint64
	select {
	case inflight = <-w.began:
	case err := <-errc:
		t.Fatalf("run ended before any apply: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("no apply began")
	}
	syscall.Kill(syscall.Getpid(), syscall.SIGUSR1)
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("run after a soft stop: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("run did not end after a soft stop")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.applied) == 0 || w.applied[len(w.applied)-1] < inflight {
		t.Fatalf("the apply of entry %d in flight at the stop did not finish; finished: %v", inflight, w.applied)
	}
}

// stuckDestination is the real testdest plugin whose applies hang until their context ends: a destination
// that cannot finish within any grace period.
type stuckDestination struct {
	pipeline.Destination
	began chan uint64
}

func (s stuckDestination) ApplyRange(ctx context.Context, p string, first, seq uint64, items iter.Seq[pipeline.ApplyItem]) (pipeline.ApplyResult, error) {
	select {
	case s.began <- seq:
	default:
	}
	<-ctx.Done()
	return pipeline.ApplyResult{}, ctx.Err()
}

// TestSoftStopEndsAtTheGracePeriod: an apply that does not finish holds a soft stop only until the grace
// period runs out; then the run ends at once, and the next run applies everything exactly once.
func TestSoftStopEndsAtTheGracePeriod(t *testing.T) {
	src, dst := start(t, "datagen"), start(t, "testdest")
	srcSettings := []byte(`{"seed": 12, "rows": 2000, "batch_size": 200}`)
	out := t.TempDir()
	dstSettings := []byte(fmt.Sprintf(`{"dir": %q}`, out))
	walDir := t.TempDir()
	log := openLog(t, walDir)
	stuck := stuckDestination{Destination: plug(dst, dstSettings), began: make(chan uint64, 1)}
	cfg := config("grace", src, srcSettings, stuck, log)
	cfg.Once = false
	const grace = 500 * time.Millisecond
	ctx, release := shutdown.OnSignals(context.Background(), grace, syscall.SIGUSR1)
	defer release()
	errc := make(chan error, 1)
	go func() { errc <- pipeline.Run(ctx, cfg) }()
	select {
	case <-stuck.began:
	case err := <-errc:
		t.Fatalf("run ended before any apply: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("no apply began")
	}
	stopped := time.Now()
	syscall.Kill(syscall.Getpid(), syscall.SIGUSR1)
	select {
	case <-errc:
	case <-time.After(time.Minute):
		t.Fatal("run did not end after the grace period")
	}
	if took := time.Since(stopped); took < grace || took > grace+20*time.Second {
		t.Fatalf("run ended %s after the soft stop; want the grace period (%s) and little more", took, grace)
	}
	// The cut-off apply committed nothing; the next run (a new handle on the log, as after a restart) carries on.
	log.Close()
	cfg = config("grace", src, srcSettings, plug(dst, dstSettings), openLog(t, walDir))
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pipeline.Run(rctx, cfg); err != nil {
		t.Fatalf("run after the stop: %v", err)
	}
	assertExactlyOnce(t, out, "grace", expected(t, src, srcSettings))
}

package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/engine/pipeline"
)

// TestStatusShowsTheLastApplyWhileIdle: status is published at most every StatusEvery, and the last change of a
// burst used to fall inside that interval and stay unpublished while the pipeline sat idle (a user saw an apply
// 7 entries behind and the source at 99% for 90 s after everything was applied). Once the destination has
// applied everything and the pipeline is idle, the status must say so within StatusEvery.
func TestStatusShowsTheLastApplyWhileIdle(t *testing.T) {
	src, dst := start(t, "datagen"), start(t, "testdest")
	srcSettings := []byte(`{"seed": 6, "rows": 3000, "batch_size": 100}`)
	dstSettings := []byte(fmt.Sprintf(`{"dir": %q}`, t.TempDir()))
	log := openLog(t, t.TempDir())
	cfg := config("p", src, srcSettings, plug(dst, dstSettings), log)
	cfg.Once = false
	// Long enough that the whole burst (3000 rows, a few dozen entries) falls inside one interval.
	cfg.StatusEvery = 2 * time.Second
	var (
		mu   sync.Mutex
		last struct {
			applied, committed uint64
			idle               bool
			at                 time.Time
		}
	)
	cfg.OnStatus = func(s pipeline.Status) {
		mu.Lock()
		defer mu.Unlock()
		last.committed, last.idle, last.at = s.WAL.LastCommitted, s.Source.Idle, time.Now()
		if len(s.Destinations) > 0 {
			last.applied = s.Destinations[0].LastApplied
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pipeline.Run(ctx, cfg) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	}()

	// Caught up: the destination holds the log's last entry, and it stays the last (the source sent its 3000
	// rows and is idle). Each step of the wait is progress the test can see; it fails only if the run stops.
	var applied uint64
	for same, prev := 0, uint64(0); same < 10; time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("pipeline stopped: %v", err)
		default:
		}
		head, err := log.Head(ctx)
		if err != nil {
			t.Fatal(err)
		}
		la, err := dst.LastApplied(ctx, dstSettings, "p")
		if err != nil {
			t.Fatal(err)
		}
		if la.Sequence == 0 || la.Sequence != head.LastSeq || la.Sequence != prev {
			same, prev = 0, la.Sequence
			continue
		}
		same++
		applied = la.Sequence
	}
	caughtUp := time.Now()
	for {
		mu.Lock()
		got := last
		mu.Unlock()
		if got.applied == applied && got.committed == applied && got.idle {
			t.Logf("status shows entry %d applied and the source idle %s after the destination had it", applied, got.at.Sub(caughtUp).Round(time.Millisecond))
			return
		}
		if time.Since(caughtUp) > 3*cfg.StatusEvery {
			t.Fatalf("%s after the destination applied entry %d (the last), the status still says applied %d, committed %d, source idle %v (published %s before)",
				time.Since(caughtUp).Round(time.Millisecond), applied, got.applied, got.committed, got.idle, time.Since(got.at).Round(time.Millisecond))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

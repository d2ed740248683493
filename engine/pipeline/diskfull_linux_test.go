package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/internal/smalldisk"
)

// syncBuffer is a log sink the pipeline's goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A WAL whose disk fills stops the reading, not the pipeline: apply and reclaim go on and free the space, the
// same entry is retried, and every row arrives exactly once — in one Run, with no restart.
func TestFullDiskPausesReadingUntilReclaimFreesSpace(t *testing.T) {
	disk := smalldisk.Mount(t, 2<<20)
	src, dst := start(t, "datagen"), start(t, "testdest")
	srcSettings := []byte(`{"seed": 21, "rows": 200000, "batch_size": 2000, "update_ratio": 0.2, "delete_ratio": 0.05}`)
	out := t.TempDir()
	cfg := config("full", src, srcSettings, slowDestination{plug(dst, []byte(fmt.Sprintf(`{"dir": %q}`, out))), 15 * time.Millisecond}, openLog(t, disk))
	cfg.MaxBatchBytes = 128 << 10
	cfg.StatusEvery = time.Nanosecond
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var (
		mu          sync.Mutex
		sawDiskFull bool
		state       string
	)
	cfg.OnStatus = func(s pipeline.Status) {
		mu.Lock()
		defer mu.Unlock()
		if s.DiskFull {
			sawDiskFull, state = true, s.State
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // 75 s alone on a loaded 2-core machine
	defer cancel()
	if err := pipeline.Run(ctx, cfg); err != nil {
		t.Fatalf("run: %v\n%s", err, logs.String())
	}
	assertExactlyOnce(t, out, "full", expected(t, src, srcSettings))
	mu.Lock()
	defer mu.Unlock()
	if !sawDiskFull {
		t.Fatalf("the WAL never filled its 2 MiB disk: the test proves nothing\n%s", logs.String())
	}
	if state != "backpressure: disk full" {
		t.Errorf("status state while the disk was full: %q", state)
	}
	full, back := strings.Count(logs.String(), "disk full: no room"), strings.Count(logs.String(), "disk full: space is back")
	if full == 0 || full != back {
		t.Errorf("want each disk-full episode logged once and its end once; got %d and %d", full, back)
	}
	t.Logf("%d disk-full episodes", full)
}

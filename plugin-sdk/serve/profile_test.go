package serve

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestHeapProfileOnSignal: with HeapProfileEnv set, SIGUSR1 writes a numbered heap profile and the exit
// function the final one, both named by the process id; unset, nothing is written.
func TestHeapProfileOnSignal(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "heap")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	t.Setenv(HeapProfileEnv, "")
	heapProfiles(ctx, log)()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("unset, it wrote %v", entries)
	}

	t.Setenv(HeapProfileEnv, prefix)
	atExit := heapProfiles(ctx, log)
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	first := fmt.Sprintf("%s.%d.1", prefix, os.Getpid())
	deadline := time.Now().Add(10 * time.Second)
	for {
		if fi, err := os.Stat(first); err == nil && fi.Size() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no profile at %s after SIGUSR1", first)
		}
		time.Sleep(20 * time.Millisecond)
	}
	atExit()
	if fi, err := os.Stat(fmt.Sprintf("%s.%d", prefix, os.Getpid())); err != nil || fi.Size() == 0 {
		t.Fatalf("exit profile: %v", err)
	}
}

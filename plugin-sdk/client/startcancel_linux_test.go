package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/client"
)

// Cancelling the context of a Start that waits for the plugin's handshake returns at once and leaves no plugin
// process: a fleet worker whose lease ran out must stop a pipeline whose plugins are (re)starting within 1 s.
// go-plugin holds its client's lock for the whole start (hashing the binary, exec, waiting up to StartTimeout
// for the handshake line), and its Kill takes that lock, so killing through it waited for the start to end.
func TestStartCancelled(t *testing.T) {
	bin := buildProbe(t)
	for _, tc := range []struct {
		name string
		sum  []byte
	}{
		{"verified", checksum(t, bin)},
		{"unverified local override", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info := filepath.Join(t.TempDir(), "probe-info")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type result struct {
				c   *client.Client
				err error
			}
			done := make(chan result, 1)
			go func() {
				c, err := client.Start(ctx, client.Config{Path: bin, SHA256: tc.sum, StartTimeout: time.Minute,
					Env: []string{"PROBE_INFO=" + info, "PROBE_START_DELAY=30s"}})
				done <- result{c, err}
			}()
			pid := probePid(t, info)
			defer syscall.Kill(pid, syscall.SIGKILL) // should the test fail with the plugin alive
			t0 := time.Now()
			cancel()
			var r result
			select {
			case r = <-done:
			case <-time.After(time.Minute):
				t.Fatal("Start did not return within a minute of its context's cancel")
			}
			took := time.Since(t0)
			if r.err == nil {
				r.c.Kill()
				t.Fatal("Start succeeded after its context was cancelled")
			}
			t.Logf("Start returned %s after the cancel: %v", took.Round(time.Millisecond), r.err)
			// Generous for a loaded host: the plugin's handshake comes after 30 s.
			// Milliseconds when it works; the handshake's 30 s when the kill waits for the start. 10 s tells the
			// two apart on any machine, however loaded.
			if took > 10*time.Second {
				t.Fatalf("Start returned %s after its context was cancelled: it waited for the handshake", took.Round(time.Millisecond))
			}
			if !errors.Is(r.err, context.Canceled) {
				t.Errorf("error %v does not wrap context.Canceled", r.err)
			}
			// Start has reaped the process it killed.
			if running(pid) {
				t.Fatalf("plugin %d still runs after the cancelled Start returned", pid)
			}
			// No test of this package runs in parallel, so every socket directory of this process is this start's.
			if dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), fmt.Sprintf("skippr-plugin-%d-*", os.Getpid()))); len(dirs) > 0 {
				t.Errorf("socket directories left behind: %v", dirs)
			}
		})
	}
}

// probePid waits for the probe plugin to write its pid to info.
func probePid(t *testing.T, info string) int {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		b, err := os.ReadFile(info)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			var pid, sig int
			if _, err := fmt.Sscan(string(b), &pid, &sig); err != nil {
				t.Fatalf("probe info %q: %v", b, err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatal("the probe plugin never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

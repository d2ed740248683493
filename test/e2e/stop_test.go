package e2e

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/test/harness"
)

// The first SIGTERM lets the WAL commit and the apply in flight finish and exits 0 with the log intact; a
// second one stops at once. Either way the next run carries on exactly once.
func TestSyncStopsSoftlyOnSIGTERM(t *testing.T) {
	for _, tc := range []struct {
		name    string
		signals int
	}{
		{"one signal finishes what is in flight", 1},
		{"a second signal stops at once", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := harness.NewEnv(t)
			gen := `{ seed: 5, rows: 30000, batch_size: 300, update_ratio: 0.2, delete_ratio: 0.05 }`
			out := filepath.Join(e.Dir, "out")
			config := func(gen string) {
				e.WriteConfig(harness.PipelineConfig(gen, out, "", "file://"+filepath.Join(e.Dir, "wal"), "      group_commit: { max_bytes: 64KiB, max_delay: 50ms }\n"))
			}
			// Paced, so the signal lands while rows flow.
			config(harness.Paced(gen, 3000))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := e.Cmd(ctx, "sync", "--stop-timeout", "1m")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			harness.WaitFor(t, time.Minute, func() bool { return strings.Contains(e.Run("status").Stdout, "running") })
			time.Sleep(2 * time.Second) // rows flowing: commits and applies under way
			stopped := time.Now()
			for range tc.signals {
				if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			err := cmd.Wait()
			took := time.Since(stopped)
			if err != nil {
				t.Fatalf("sync after SIGTERM: %v (want exit 0)\n%s", err, stderr.String())
			}
			logs := stderr.String()
			if !strings.Contains(logs, "stop requested") {
				t.Fatalf("no soft stop logged:\n%s", logs)
			}
			if tc.signals == 1 {
				// A soft stop ends nothing halfway: no commit with an unknown outcome, no apply cut off.
				for _, bad := range []string{"outcome unknown", "level=ERROR", "context canceled"} {
					if strings.Contains(logs, bad) {
						t.Fatalf("soft stop logged %q:\n%s", bad, logs)
					}
				}
			} else if took > 15*time.Second {
				t.Fatalf("a second SIGTERM took %s to stop sync", took)
			}
			t.Logf("stopped in %s", took.Round(time.Millisecond))
			e.MustRun("wal", "inspect", "file://"+filepath.Join(e.Dir, "wal"))
			// The rest unpaced: datagen makes each event from its index, so the events after the stop are the
			// same at any pace, and the paced rest took up to 8 s of each case.
			config(gen)
			e.MustRun("sync", "--once")
			harness.Compare(t, out, harness.Want(t, gen))
		})
	}
}

package chaos_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/engine/failpoint"
	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
	"github.com/skippr-dev/skippr/test/harness"
)

// TestCrashPoints kills `skippr sync --once` at each named crash point of the engine (engine/failpoint), on
// both WAL backends, and checks that a rerun without the point completes the destination row by row: nothing
// lost, nothing applied twice. Each point fires at its second hit, so the crash lands with entries already
// committed, applied and reclaimed behind it. The rerun must resume at the entry the destination holds (so an
// engine that forgot a destination's own record would fail here even though the destination skips a replayed
// range). The core is built with the failpoints tag; the release build
// carries none of this.
func TestCrashPoints(t *testing.T) {
	skippr := testplugins.BuildSkipprWithTags(t, "failpoints")
	gen := `{ seed: 27, rows: 3000, batch_size: 150, update_ratio: 0.2, delete_ratio: 0.05 }`
	w := harness.Want(t, gen)
	for _, backend := range []string{"local", "s3"} {
		for _, point := range failpoint.Points {
			t.Run(backend+"/"+point, func(t *testing.T) {
				e := harness.NewEnvBinary(t, skippr, "datagen", "testdest")
				walURL, walExtra := "file://"+filepath.Join(e.Dir, "wal"), ""
				if backend == "s3" {
					b := harness.Versity.Get(t).NewBucket(t)
					walURL = "s3://" + b.Name + "/crash"
					walExtra = fmt.Sprintf("      s3: { endpoint: %s, region: us-east-1, path_style: true }\n", b.Endpoint)
					e.ExtraEnv = []string{"AWS_ACCESS_KEY_ID=" + b.AccessKey, "AWS_SECRET_ACCESS_KEY=" + b.SecretKey}
				}
				// Small entries, one apply per entry: many commits, applies and reclaims, so every point is
				// hit more than once.
				out := filepath.Join(e.Dir, "out")
				e.WriteConfig(harness.PipelineConfig(gen, out, ", no_coalesce: true", walURL, walExtra+"      group_commit: { max_bytes: 8KiB, max_delay: 20ms }\n"))

				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				cmd := e.Cmd(ctx, "sync", "--once")
				cmd.Env = append(cmd.Env, failpoint.EnvVar+"="+point+"=2*exit")
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				err := cmd.Run()
				ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
				if err == nil || !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
					t.Fatalf("sync with %s armed did not die by SIGKILL (%v):\n%s", point, err, stderr.String())
				}
				if line := "failpoint " + point + " fired (hit 2): exit"; !strings.Contains(stderr.String(), line) {
					t.Fatalf("sync died without the line %q:\n%s", line, stderr.String())
				}

				// What the destination holds after the crash: the rerun must resume exactly there, learning it
				// from the destination (a range applied and not yet recorded by the engine included).
				held, err := filedest.Load(out)
				if err != nil {
					t.Fatal(err)
				}
				var last uint64
				if seqs := held.Sequences["orders"]; len(seqs) > 0 {
					last = seqs[len(seqs)-1]
				}

				// The rerun, without the point; on S3 it waits out the dead writer's lease.
				start := time.Now()
				r := e.MustRun("sync", "--once", "--wait-lock")
				m := regexp.MustCompile(`destination resumes.* applied=(\d+)`).FindStringSubmatch(r.Stderr)
				if m == nil || m[1] != strconv.FormatUint(last, 10) {
					t.Fatalf("the rerun resumed at %v, want applied=%d (the destination's last entry):\n%s", m, last, r.Stderr)
				}
				st := harness.Compare(t, out, w)
				t.Logf("%s on %s: the rerun took %s; %d WAL entries applied in all", point, backend, time.Since(start).Round(time.Millisecond), len(st.Sequences["orders"]))
			})
		}
	}
}

package chaos

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/test/harness"
)

// TestChaos SIGKILLs `skippr sync` (and sometimes only one of its plugin processes) at random moments, restarts
// it each time, and then checks the destination against the source row by row: nothing lost, nothing twice.
// SKIPPR_CHAOS_KILLS sets the SIGKILLs of skippr sync per WAL backend (default 20; `make chaos` runs 100).
func TestChaos(t *testing.T) {
	kills := 20
	if v := os.Getenv("SKIPPR_CHAOS_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("SKIPPR_CHAOS_KILLS=%q: %v", v, err)
		}
		kills = n
	}
	for _, backend := range []string{"local", "s3"} {
		t.Run(backend, func(t *testing.T) {
			e := harness.NewEnv(t)
			walURL, walExtra := "file://"+filepath.Join(e.Dir, "wal"), ""
			if backend == "s3" {
				b := harness.Versity.Get(t).NewBucket(t)
				walURL = "s3://" + b.Name + "/chaos"
				walExtra = fmt.Sprintf("      s3: { endpoint: %s, region: us-east-1, path_style: true }\n", b.Endpoint)
				e.ExtraEnv = []string{"AWS_ACCESS_KEY_ID=" + b.AccessKey, "AWS_SECRET_ACCESS_KEY=" + b.SecretKey}
			}
			// Small entries and a paced source, so kills land during reads, commits and applies alike.
			gen := `{ seed: 9, rows: 40000, rows_per_second: 8000, batch_size: 400, nested: true, update_ratio: 0.2, delete_ratio: 0.05 }`
			// Two destinations, one taking ranges and one an entry per apply, so they stand at different
			// entries and share segments through the apply loops' read cache across every kill.
			out, out2 := filepath.Join(e.Dir, "out"), filepath.Join(e.Dir, "out2")
			cfg := harness.PipelineConfig(gen, out, "", walURL, walExtra+"      group_commit: { max_bytes: 64KiB, max_delay: 50ms }\n")
			cfg = strings.Replace(cfg, "pipelines:\n", fmt.Sprintf("  out2:\n    plugin: testdest\n    version: \">= 0.1\"\n    settings: { dir: %s, no_coalesce: true }\npipelines:\n", out2), 1)
			cfg = strings.Replace(cfg, "destinations: [out]", "destinations: [out, out2]", 1)
			e.WriteConfig(cfg)
			seed := time.Now().UnixNano()
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			t.Logf("chaos seed %d", seed)
			syncKills, pluginKills := 0, 0
			for syncKills < kills {
				ctx, cancel := context.WithCancel(context.Background())
				cmd := e.Cmd(ctx, "sync", "--wait-lock")
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Duration(200+rng.IntN(1300)) * time.Millisecond)
				if rng.IntN(4) == 0 {
					// Kill one plugin process alone; the engine must notice, restart it and carry on.
					if pid := childPid(cmd.Process.Pid, rng); pid > 0 {
						syscall.Kill(pid, syscall.SIGKILL)
						pluginKills++
						time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
					}
				}
				if err := cmd.Process.Signal(syscall.SIGKILL); err == nil {
					syncKills++
				}
				cmd.Wait()
				cancel()
				if cmd.ProcessState != nil && cmd.ProcessState.Exited() && cmd.ProcessState.ExitCode() != 0 {
					t.Fatalf("sync exited by itself with %d before it was killed:\n%s", cmd.ProcessState.ExitCode(), stderr.String())
				}
			}
			r := e.MustRun("sync", "--once", "--wait-lock")
			w := harness.Want(t, gen)
			st := harness.Compare(t, out, w)
			harness.Compare(t, out2, w)
			t.Logf("%s: %d SIGKILLs of skippr sync, %d of a plugin alone; %d WAL entries applied, %d change rows applied in all",
				backend, syncKills, pluginKills, len(st.Sequences["orders"]), st.Rows)
			if strings.Contains(r.Stderr, "level=ERROR") && !strings.Contains(r.Stderr, "restarting") {
				t.Logf("final sync logged errors:\n%s", r.Stderr)
			}
		})
	}
}

// childPid picks one child process of pid (a plugin), or 0.
func childPid(pid int, rng *rand.Rand) int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state, ppid, ...
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, n)
		}
	}
	if len(kids) == 0 {
		return 0
	}
	return kids[rng.IntN(len(kids))]
}

package chaos

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/internal/smalldisk"
	"github.com/skippr-dev/skippr/test/harness"
)

// TestChaosFaults mixes the faults an unattended sync meets — SIGKILLs of sync, SIGKILLs of one plugin, and
// episodes of a full disk under the WAL (a 4 MiB tmpfs filled to the last page, then freed) — and then
// compares the destination with the source row by row. SKIPPR_CHAOS_FAULTS sets how many (`make chaos`: 100;
// the normal test run: 12).
func TestChaosFaults(t *testing.T) {
	faults := 12
	if v := os.Getenv("SKIPPR_CHAOS_FAULTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("SKIPPR_CHAOS_FAULTS=%q: %v", v, err)
		}
		faults = n
	}
	disk := smalldisk.Mount(t, 4<<20)
	e := harness.NewEnv(t)
	gen := `{ seed: 17, rows: 40000, rows_per_second: 8000, batch_size: 400, nested: true, update_ratio: 0.2, delete_ratio: 0.05 }`
	out := filepath.Join(e.Dir, "out")
	walURL := "file://" + filepath.Join(disk, "wal")
	e.WriteConfig(harness.PipelineConfig(gen, out, "", walURL, "      group_commit: { max_bytes: 64KiB, max_delay: 50ms }\n"))
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 11))
	t.Logf("fault seed %d", seed)
	var syncKills, pluginKills, diskFull, stalls, restarts int
	for syncKills+pluginKills+diskFull < faults {
		ctx, cancel := context.WithCancel(context.Background())
		cmd := e.Cmd(ctx, "sync", "--wait-lock")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		// One or two faults that a running sync must survive without a restart or with its own restart.
		for range 1 + rng.IntN(2) {
			switch rng.IntN(2) {
			case 0:
				filler, err := smalldisk.Fill(disk)
				if err != nil {
					t.Fatalf("fill the WAL's disk: %v", err)
				}
				time.Sleep(time.Duration(200+rng.IntN(1500)) * time.Millisecond)
				if err := os.Remove(filler); err != nil {
					t.Fatal(err)
				}
				diskFull++
			case 1:
				if pid := childPid(cmd.Process.Pid, rng); pid > 0 {
					syscall.Kill(pid, syscall.SIGKILL)
					pluginKills++
				}
			}
			time.Sleep(time.Duration(100+rng.IntN(600)) * time.Millisecond)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err == nil {
			syncKills++
		}
		cmd.Wait()
		cancel()
		stalls += strings.Count(stderr.String(), "disk full: no room")
		for _, line := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(line, "restarting from the last durable point") {
				restarts++
				t.Logf("restart: %s", line)
			}
		}
		if cmd.ProcessState != nil && cmd.ProcessState.Exited() && cmd.ProcessState.ExitCode() != 0 {
			t.Fatalf("sync exited by itself with %d before it was killed:\n%s", cmd.ProcessState.ExitCode(), stderr.String())
		}
	}
	e.MustRun("sync", "--once", "--wait-lock")
	st := harness.Compare(t, out, harness.Want(t, gen))
	t.Logf("%d SIGKILLs of skippr sync, %d of a plugin alone, %d full-disk episodes (%d times sync paused its reads for a full disk, %d pipeline restarts); %d WAL entries applied, %d change rows in all",
		syncKills, pluginKills, diskFull, stalls, restarts, len(st.Sequences["orders"]), st.Rows)
}

package harness

import (
	"bytes"
	"context"
	"math/rand/v2"
	"syscall"
	"time"
)

// KillSyncAtRandom starts `skippr sync --wait-lock` n times and SIGKILLs each run after a random time in
// [lo, hi).
func (e *Env) KillSyncAtRandom(n int, lo, hi time.Duration) {
	e.T.Helper()
	seed := time.Now().UnixNano()
	e.T.Logf("kill seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 13))
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		cmd := e.Cmd(ctx, "sync", "--wait-lock")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			e.T.Fatal(err)
		}
		time.Sleep(lo + time.Duration(rng.Int64N(int64(hi-lo))))
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		cancel()
		if cmd.ProcessState.Exited() {
			e.T.Fatalf("run %d: sync exited by itself (%d) before it was killed:\n%s", i, cmd.ProcessState.ExitCode(), stderr.String())
		}
	}
}

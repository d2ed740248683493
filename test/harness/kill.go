package harness

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// startSync starts `skippr sync --wait-lock` (ended by ctx), its stderr kept for the message of a failure.
func (e *Env) startSync(ctx context.Context) (*exec.Cmd, *bytes.Buffer) {
	e.T.Helper()
	cmd := e.Cmd(ctx, "sync", "--wait-lock")
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		e.T.Fatal(err)
	}
	return cmd, stderr
}

// KillSyncAtRandom starts `skippr sync --wait-lock` n times and SIGKILLs each run after a random time in
// [lo, hi). It returns what the runs logged (their stderr, one after the other), for a test whose oracle depends
// on what a run did, such as resuming a copy.
func (e *Env) KillSyncAtRandom(n int, lo, hi time.Duration) string {
	e.T.Helper()
	seed := time.Now().UnixNano()
	e.T.Logf("kill seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 13))
	var logs strings.Builder
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		cmd, stderr := e.startSync(ctx)
		time.Sleep(lo + time.Duration(rng.Int64N(int64(hi-lo))))
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		cancel()
		if cmd.ProcessState.Exited() {
			e.T.Fatalf("run %d: sync exited by itself (%d) before it was killed:\n%s", i, cmd.ProcessState.ExitCode(), stderr.String())
		}
		logs.Write(stderr.Bytes())
	}
	return logs.String()
}

// HeldWAL is the YAML of a pipeline's wal settings (six spaces in, under `wal:`) that holds the source back to
// the destinations' pace: what KillSyncInCopy needs for a kill that cannot miss the copy.
const HeldWAL = "group_commit: { max_bytes: 64KiB, max_delay: 50ms }\n      max_unapplied_bytes: 256KiB"

// KillSyncInCopy starts `skippr sync --wait-lock` and SIGKILLs it while the last checkpoint of the local WAL at
// walDir shows the snapshot's copy of table begun and not ended (WalState.Copying), so the next run finds that
// copy unfinished whatever the machine's speed: a kill at a random time, or once the destination shows rows,
// may land after the source's copy, which runs ahead of the destinations. The test fails when the copy is never
// seen under way or is over by the kill. For a kill that cannot miss, the pipeline's WAL holds back the source
// (HeldWAL: a small max_unapplied_bytes): the committed checkpoint then moves at the destinations' pace. It returns the
// WAL's state after the kill.
func (e *Env) KillSyncInCopy(walDir, table string) WalState {
	e.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd, stderr := e.startSync(ctx)
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	kill := func() {
		cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		st := LastCheckpoint(e.T, walDir)
		if st.Copying(table) {
			break
		}
		select {
		case <-exited:
			e.T.Fatalf("sync exited by itself (%d) before the copy of %s was seen:\n%s", cmd.ProcessState.ExitCode(), table, stderr.String())
		default:
		}
		if st.Phase == "stream" || time.Now().After(deadline) {
			kill()
			e.T.Fatalf("never saw the copy of %s under way in the WAL (last checkpoint %+v):\n%s", table, st, stderr.String())
		}
	}
	kill()
	st := LastCheckpoint(e.T, walDir)
	if !st.Copying(table) {
		e.T.Fatalf("the SIGKILL landed after the copy of %s (last checkpoint %+v)", table, st)
	}
	e.T.Logf("killed in the copy of %s, %d of its rows committed", table, st.Progress[table].Rows)
	return st
}

//go:build failpoints

package failpoint

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestHitFiresAtNthHitOnce(t *testing.T) {
	s, err := newArmedSet("pipeline.after-ack=3*error,pipeline.after-apply=sleep(50),wal.after-segment=2*exit")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	kills := 0
	kill := func() { kills++ }
	for i := 1; i <= 5; i++ {
		err := s.hit(PipelineAfterAck, &out, kill)
		if fired := errors.Is(err, ErrInjected); fired != (i == 3) {
			t.Errorf("hit %d of %s: %v", i, PipelineAfterAck, err)
		}
		if err != nil && !strings.Contains(err.Error(), PipelineAfterAck) {
			t.Errorf("the error does not name the point: %v", err)
		}
	}
	start := time.Now()
	if err := s.hit(PipelineAfterApply, &out, kill); err != nil || time.Since(start) < 50*time.Millisecond {
		t.Errorf("sleep(50): %v after %v", err, time.Since(start))
	}
	for range 3 {
		s.hit(WALAfterSegment, &out, kill)
	}
	if kills != 1 {
		t.Errorf("2*exit killed %d times in 3 hits, want once", kills)
	}
	if err := s.hit(PipelineApplySent, &out, kill); err != nil {
		t.Errorf("an unarmed point: %v", err)
	}
	want := "failpoint pipeline.after-ack fired (hit 3): error\n" +
		"failpoint pipeline.after-apply fired (hit 1): sleep(50)\n" +
		"failpoint wal.after-segment fired (hit 2): exit\n"
	if out.String() != want {
		t.Errorf("stderr lines:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestExitKills: exit is a SIGKILL of the process itself — the deferred line never prints — after the point's
// line; a misspelt point stops the process at start with status 2.
func TestExitKills(t *testing.T) {
	if os.Getenv("FAILPOINT_TEST_CHILD") != "" {
		defer os.Stdout.WriteString("deferred call ran\n")
		Hit(WALAfterSegment)
		os.Stdout.WriteString("went on after the point\n")
		return
	}
	run := func(spec string) (*exec.Cmd, string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestExitKills$")
		cmd.Env = append(os.Environ(), "FAILPOINT_TEST_CHILD=1", EnvVar+"="+spec)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return cmd, out.String(), err
	}
	cmd, out, err := run(WALAfterSegment + "=exit")
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if err == nil || !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child did not die by SIGKILL (%v):\n%s", err, out)
	}
	if !strings.Contains(out, "failpoint wal.after-segment fired (hit 1): exit\n") || strings.Contains(out, "deferred") || strings.Contains(out, "went on") {
		t.Fatalf("child output:\n%s", out)
	}
	cmd, out, _ = run("wal.after-segmnt=exit")
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(out, `unknown point "wal.after-segmnt"`) {
		t.Fatalf("a misspelt point: exit %d\n%s", cmd.ProcessState.ExitCode(), out)
	}
}

// TestWaitBlocksUntilFile: wait(file) holds the caller until the file exists, and only then returns.
func TestWaitBlocksUntilFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "go")
	s, err := newArmedSet(LakequeryAfterList + "=wait(" + file + ")")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- s.hit(LakequeryAfterList, &out, func() {}) }()
	select {
	case err := <-done:
		t.Fatalf("wait returned (%v) before the file existed", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("wait did not return after the file was created")
	}
}

//go:build unix

package serve

import (
	"bufio"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// scratchHelperEnv makes the test binary a plugin process that made its scratch directory and waits to be
// killed (TestScratchSweepsOnlyDeadProcesses).
const scratchHelperEnv = "SKIPPR_TEST_SCRATCH_PARENT"

func TestMain(m *testing.M) {
	if parent := os.Getenv(scratchHelperEnv); parent != "" {
		scratchDir(parent, "helper", slog.New(slog.NewTextHandler(io.Discard, nil)))
		os.Stdout.WriteString(os.Getenv("TMPDIR") + "\n")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A scratch directory is swept when its process is gone (SIGKILLed here, so nothing of its own removed it), and
// only then: not while the process lives, not while it is younger than scratchGrace, and nothing that is not
// a scratch directory.
func TestScratchSweepsOnlyDeadProcesses(t *testing.T) {
	parent := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	old := time.Now().Add(-2 * scratchGrace)
	mkdir := func(name string, mtime time.Time) string {
		dir := filepath.Join(parent, name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, scratchLockFile), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(dir, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	young := mkdir(scratchPrefix+"young-1-1", time.Now())
	other := mkdir("skippr-walcache-1", old)

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), scratchHelperEnv+"="+parent)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	alive := strings.TrimSpace(line)
	if filepath.Dir(alive) != parent || !strings.HasPrefix(filepath.Base(alive), scratchPrefix+"helper-") {
		t.Fatalf("the helper's TMPDIR is %q, want a scratch directory in %s", alive, parent)
	}
	if err := os.Chtimes(alive, old, old); err != nil {
		t.Fatal(err)
	}
	exists := func(dir string) bool { _, err := os.Stat(dir); return err == nil }

	sweepScratch(parent, log)
	for _, dir := range []string{alive, young, other} {
		if !exists(dir) {
			t.Fatalf("%s was swept while its process lives, or it is young, or not a scratch directory", dir)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	sweepScratch(parent, log)
	if exists(alive) {
		t.Fatalf("%s, the SIGKILLed process's scratch directory, was not swept", alive)
	}
	if !exists(young) || !exists(other) {
		t.Fatal("the second sweep took a young directory or one that is not a scratch directory")
	}
}

// The scratch directory is the process's TMPDIR while it serves; done removes it and puts TMPDIR back.
func TestScratchDirIsTMPDIR(t *testing.T) {
	parent := t.TempDir()
	t.Setenv("TMPDIR", "/somewhere/else")
	done := scratchDir(parent, "x/y", slog.New(slog.NewTextHandler(io.Discard, nil)))
	dir := os.TempDir()
	if filepath.Dir(dir) != parent || !strings.HasPrefix(filepath.Base(dir), scratchPrefix+"x-y-") {
		t.Fatalf("TMPDIR %q, want a scratch directory in %s", dir, parent)
	}
	f, err := os.CreateTemp("", "staged-*.parquet")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if filepath.Dir(f.Name()) != dir {
		t.Fatalf("a temp file went to %s, not the scratch directory", f.Name())
	}
	done()
	if got := os.Getenv("TMPDIR"); got != "/somewhere/else" {
		t.Fatalf("TMPDIR after done: %q", got)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("scratch directory still there after done: %v", err)
	}
}

package harness

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
)

// KillPluginAtRandom starts `skippr sync --wait-lock`, waits for its plugin process whose command line holds
// name, SIGKILLs it after a random time in [lo, hi), lets the engine carry on for a moment, then SIGKILLs the
// sync too.
func (e *Env) KillPluginAtRandom(name string, lo, hi time.Duration) {
	e.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd, stderr := e.startSync(ctx)
	pid := 0
	for end := time.Now().Add(30 * time.Second); pid == 0 && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		pid = ChildByName(cmd.Process.Pid, name)
	}
	if pid == 0 {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		e.T.Fatalf("sync started no %s process within 30s:\n%s", name, stderr.String())
	}
	time.Sleep(lo + time.Duration(rand.Int64N(int64(hi-lo))))
	syscall.Kill(pid, syscall.SIGKILL)
	time.Sleep(time.Duration(300+rand.IntN(700)) * time.Millisecond)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if cmd.ProcessState.Exited() && cmd.ProcessState.ExitCode() != 0 {
		e.T.Fatalf("sync exited by itself (%d) after its plugin %s was killed:\n%s", cmd.ProcessState.ExitCode(), name, stderr.String())
	}
}

// ChildByName returns the child process of pid whose command line contains name, or 0.
func ChildByName(pid int, name string) int {
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		n, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		if cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline")); err == nil && bytes.Contains(cmdline, []byte(name)) {
			return n
		}
	}
	return 0
}

// DumpDuckDB reads a table with the duckdb plugin binary's dump command, outside the engine, keyed by the
// first column's JSON text (the key comes first in every table here); a key held twice fails the test.
func DumpDuckDB(t *testing.T, settings, stream string) map[string]map[string]any {
	t.Helper()
	return PluginRows(t, "duckdb", "dump", settings, stream, "the DuckDB table", func(line []byte, _ map[string]any) string {
		first := line[bytes.IndexByte(line, ':')+1:]
		return strings.TrimSpace(string(first[:bytes.IndexAny(first, ",}")]))
	})
}

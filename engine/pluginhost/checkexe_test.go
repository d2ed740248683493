package pluginhost

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/skippr-dev/skippr/registry"
)

// A real process: checkExe accepts the file it runs and refuses any other identity, so a binary swapped or
// rewritten between its verification and exec is caught.
func TestCheckExe(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("sleep: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "skippr-plugin-x")
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	id, err := registry.StatID(bin)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	other, err := registry.StatID(sleep)
	if err != nil {
		t.Fatal(err)
	}
	changed := id
	changed.CtimeNs++
	for _, tc := range []struct {
		name string
		file registry.FileID
		pid  int
		ok   bool
	}{
		{"the verified file", id, cmd.Process.Pid, true},
		{"another file", other, cmd.Process.Pid, false},
		{"the same inode changed since", changed, cmd.Process.Pid, false},
		{"no process", id, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkExe(tc.pid, Binary{Path: bin, File: tc.file})
			if tc.ok != (err == nil) {
				t.Fatalf("checkExe: %v, want ok=%v", err, tc.ok)
			}
			if err != nil && tc.pid > 0 && !errors.Is(err, registry.ErrChecksum) {
				t.Fatalf("checkExe: %v, want registry.ErrChecksum (exit code 4)", err)
			}
		})
	}
}

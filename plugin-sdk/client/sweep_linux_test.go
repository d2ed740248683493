package client

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// The socket directories of engines that are gone are removed; a live engine's (this one's, pid 1's), a name
// without a pid and a file are left alone.
func TestSweepSocketDirs(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := strconv.Itoa(gone.Process.Pid)
	dir := t.TempDir()
	for _, name := range []string{
		socketDirPrefix + dead + "-1",
		socketDirPrefix + strconv.Itoa(os.Getpid()) + "-2",
		socketDirPrefix + "1-3",
		socketDirPrefix + "x-4",
	} {
		if err := os.MkdirAll(filepath.Join(dir, name, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, socketDirPrefix+dead+"-5")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sweepSocketDirs(dir)
	for name, want := range map[string]bool{
		socketDirPrefix + dead + "-1":                      false,
		socketDirPrefix + strconv.Itoa(os.Getpid()) + "-2": true,
		socketDirPrefix + "1-3":                            true,
		socketDirPrefix + "x-4":                            true,
		socketDirPrefix + dead + "-5":                      true,
	} {
		_, err := os.Stat(filepath.Join(dir, name))
		if got := err == nil; got != want {
			t.Errorf("%s: present %v, want %v (%v)", name, got, want, err)
		}
	}
}

// Package smalldisk mounts small tmpfs file systems for tests: real file systems that run out of space
// (ENOSPC) like a full disk, and can be filled and freed on purpose.
package smalldisk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Mount mounts a tmpfs of size bytes on a fresh directory, unmounted at the test's end. It skips the test
// when not root (mounting needs it; CI runs as root).
func Mount(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root (CI runs as root)")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs on %s: %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// Fill takes every free byte of the file system holding dir, in a file it returns; removing that file ends
// the episode.
func Fill(dir string) (string, error) {
	p := filepath.Join(dir, "smalldisk-filler")
	f, err := os.Create(p)
	if err != nil {
		return p, err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			return p, err
		}
	}
	// Less than a buffer may be left: take it in pages.
	for {
		if _, err := f.Write(buf[:4096]); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return p, nil
			}
			return p, err
		}
	}
}

//go:build unix

package serve

import (
	"fmt"
	"os"
	"syscall"
)

// lockScratch takes an exclusive, non-blocking flock on path (creating it), held until unlock or the
// process's end: the kernel drops it when the process dies, however it dies.
func lockScratch(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

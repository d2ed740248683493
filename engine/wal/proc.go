package wal

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// pidAlive reports whether a process with this pid exists on this host. A reused pid reads as alive, which
// only ever makes a caller wait, never take over from a live writer.
func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

func thisHost() string {
	h, _ := os.Hostname()
	return h
}

// deadOnThisHost reports whether a lease holder ran on this host and has exited.
func deadOnThisHost(host string, pid int) bool {
	return host != "" && host == thisHost() && pid > 0 && pid != os.Getpid() && !pidAlive(pid)
}

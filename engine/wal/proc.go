package wal

import (
	"errors"
	"fmt"
	"os"
	"strings"

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

// identity is who writes a lease: enough for a successor to tell whether that writer's pid can be checked
// from where the successor runs.
type identity struct {
	host string // for people reading the lease; proves nothing (containers share host names)
	// pidSpace names the kernel instance and PID namespace the pid belongs to: the boot id (new at every boot,
	// shared by every container of one kernel) and the PID namespace's inode. Two processes can compare pids
	// only when both match; empty when unknown, and then nobody takes a shortcut.
	pidSpace string
	pid      int
}

func thisProcess() identity {
	host, _ := os.Hostname()
	return identity{host: host, pidSpace: pidSpace(), pid: os.Getpid()}
}

func pidSpace() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return ""
	}
	return fmt.Sprintf("boot %s pidns %d", strings.TrimSpace(string(boot)), st.Ino)
}

// deadHere reports whether a lease holder ran in self's PID namespace on this boot of this kernel and has
// exited. A host name match is not enough: a holder in another container with the same host name has a pid
// that means nothing here (or names an unrelated live process), and taking its lease early would make two
// writers.
func (self identity) deadHere(holderSpace string, holderPID int) bool {
	return self.pidSpace != "" && holderSpace == self.pidSpace && holderPID > 0 && holderPID != self.pid && !pidAlive(holderPID)
}

package s3test

import "syscall"

// The server must not outlive a test binary that crashes before Cleanup.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

package client

import (
	"errors"
	"os/exec"
	"runtime"
	"syscall"
)

// dieWithHost asks the kernel to SIGKILL the plugin the moment the engine dies, even by SIGKILL, so old and new
// plugin processes never overlap at a restart (an HTTP source's old process would still hold its port).
// serve's parent watch stays as the fallback for hosts that start plugins some other way.
func dieWithHost(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// onStartThread runs start (which forks the plugin) locked to one OS thread. Linux sends the death signal
// when the *thread* that forked the child exits, not the process. The Go runtime ends a thread only when a
// goroutine locked to it exits still locked; this goroutine unlocks before it returns, so the thread goes back
// to the pool and lives as long as the process.
func onStartThread[T any](start func() (T, error)) (T, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return start()
}

// processGone says no process has pid (a signal 0 finds none; EPERM means one runs under another user).
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

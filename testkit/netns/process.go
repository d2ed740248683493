package netns

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is a program running inside a host (a worker, a server), started by Host.Start: its output is kept,
// and the fault tests' signals (SIGKILL, SIGSTOP/SIGCONT) reach the program itself.
type Process struct {
	Host *Host
	Pid  int

	out  *lockedBuffer
	done chan struct{}
	err  error // Wait's result, set before done closes
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Start runs a program inside the host with the test binary's environment plus env ("K=V"; later entries
// win), stdout and stderr kept together (Output). When the test ends the program is killed if it still runs,
// and its output is logged if the test failed. It dies with the test binary (Pdeathsig).
func (h *Host) Start(t testing.TB, env []string, name string, args ...string) *Process {
	t.Helper()
	cmd := h.Command(context.Background(), name, args...)
	cmd.Env = append(os.Environ(), env...)
	p := &Process{Host: h, out: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("netns: start %s in host %s: %v", name, h.Name, err)
	}
	p.Pid = cmd.Process.Pid
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.Kill()
		}
		if t.Failed() {
			t.Logf("netns: output of %s in host %s (%v):\n%s", name, h.Name, p.err, p.Output())
		}
	})
	return p
}

// Signal sends sig to the program (syscall.SIGSTOP freezes it, syscall.SIGCONT resumes it). For SIGSTOP it
// returns once the program is stopped (up to 10 s): the kernel delivers the signal after kill returns, and a
// test that checks the program is frozen must not race its last running moments.
func (p *Process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return fmt.Errorf("netns: signal %v to %d in host %s: the process has exited (%v)", sig, p.Pid, p.Host.Name, p.err)
	default:
	}
	if err := syscall.Kill(p.Pid, sig); err != nil {
		return fmt.Errorf("netns: signal %v to %d in host %s: %w", sig, p.Pid, p.Host.Name, err)
	}
	if sig != syscall.SIGSTOP {
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for !stopped(p.Pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("netns: process %d in host %s not stopped 10s after SIGSTOP", p.Pid, p.Host.Name)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// stopped reports whether every thread of pid is stopped (group stop ends thread by thread).
func stopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		if taskState(pid, task.Name()) != 'T' {
			return false
		}
	}
	return true
}

// taskState is the state letter of /proc/<pid>/task/<tid>/stat (R, S, T, Z…), or 0 when it cannot be read.
func taskState(pid int, tid string) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, tid))
	if err != nil {
		return 0
	}
	// The command name in parentheses may hold spaces and parentheses; the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// Kill sends SIGKILL and waits (up to 10 s) for the process to exit.
func (p *Process) Kill() error {
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("netns: process %d in host %s still runs 10s after SIGKILL", p.Pid, p.Host.Name)
	}
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits up to d for the process to exit and returns how it exited (exec.Cmd.Wait's error).
func (p *Process) Wait(d time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		return fmt.Errorf("netns: process %d in host %s still runs after %v", p.Pid, p.Host.Name, d)
	}
}

// Output is what the process printed so far.
func (p *Process) Output() string { return p.out.String() }

// WaitOutput waits up to d until the output contains s (a "ready" line, a log message).
func (p *Process) WaitOutput(s string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for !strings.Contains(p.Output(), s) {
		select {
		case <-p.done:
			if strings.Contains(p.Output(), s) {
				return nil
			}
			return fmt.Errorf("netns: process %d in host %s exited (%v) before printing %q; output:\n%s", p.Pid, p.Host.Name, p.err, s, p.Output())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netns: process %d in host %s did not print %q within %v; output:\n%s", p.Pid, p.Host.Name, s, d, p.Output())
		}
	}
	return nil
}

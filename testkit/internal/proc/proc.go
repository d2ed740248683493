// Package proc holds what the testkit's database harnesses share: running a server program as the OS user it
// insists on (PostgreSQL and MariaDB refuse root), waiting until it answers, stopping it, showing its log when
// it fails, and the one shared server per test binary that Main stops.
package proc

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RunAs returns the credential a server must run under: osUser's when we are root, none otherwise. pkg names
// the Debian package that creates the user, for the error.
func RunAs(osUser, pkg string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(osUser)
	if err != nil {
		return nil, fmt.Errorf("running as root, and the server refuses to run as root, but there is no %q OS user to run it as (the %s package creates it): %w", osUser, pkg, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Command is a command run as cred (nil: as we are) with exactly env as its environment, so the caller's
// locale and time zone do not leak into the server.
func Command(cred *syscall.Credential, env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	cmd.Env = env
	return cmd
}

// ChownAll gives dir and everything below it to cred's user (nothing to do without cred).
func ChownAll(dir string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
}

// FreePort is a TCP port on 127.0.0.1 that was free a moment ago. Another process can take it before the
// server binds it, so callers retry with Retry.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Retry calls start up to three times while its error contains one of portTaken's messages (a port taken
// between FreePort and bind); any other error ends it.
func Retry[S any](start func() (S, error), portTaken ...string) (S, error) {
	var s S
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if s, err = start(); err == nil {
			return s, nil
		}
		taken := false
		for _, m := range portTaken {
			taken = taken || strings.Contains(err.Error(), m)
		}
		if !taken {
			break
		}
	}
	return s, err
}

// Sanitize makes a test name into an identifier: lower-case letters, digits and '_', the last max of them.
func Sanitize(name string, max int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := b.String()
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return out
}

// Process is a running server program.
type Process struct {
	name    string // for messages: "postgres", "mariadbd"
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
}

// Start starts cmd, whose log is written to logPath (by the caller's redirection or by the server itself).
// If the test binary dies without stopping it, the server gets deathSig instead of lingering. (The signal
// follows the OS thread that started the server; Go ends threads only when a goroutine locked to one exits,
// which tests do not do.)
func Start(cmd *exec.Cmd, name, logPath string, deathSig syscall.Signal) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = deathSig
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// WaitReady calls ready every interval until it succeeds. When the server exits, ctx ends or timeout passes
// first, the server is killed and the error shows the end of its log.
func (p *Process) WaitReady(ctx context.Context, timeout, interval time.Duration, ready func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited during start-up (%v):\n%s", p.name, p.waitErr, p.LogTail(30))
		case <-ctx.Done():
			p.Kill()
			return ctx.Err()
		case <-time.After(interval):
		}
		if time.Now().After(deadline) {
			p.Kill()
			return fmt.Errorf("%s did not accept connections within %s: %v\n%s", p.name, timeout, err, p.LogTail(30))
		}
	}
}

// Kill kills the server and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Stop sends sig (the server's orderly shutdown) and kills the server if it is still running after grace.
func (p *Process) Stop(sig syscall.Signal, grace time.Duration) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("%s did not stop within %s of %v; killed", p.name, grace, sig)
	}
}

// Log returns the server log so far.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// LogTail returns the last n lines of the server log.
func (p *Process) LogTail(n int) string { return FileTail(p.logPath, n) }

// FileTail returns the last n lines of the file at path (nothing when it cannot be read), for an error.
func FileTail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

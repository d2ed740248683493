package proc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSanitize(t *testing.T) {
	for _, c := range []struct {
		name string
		max  int
		want string
	}{
		{"TestX/sub-case", 40, "testx_sub_case"},
		{"TestLongName", 4, "name"},
		{"Ünï", 10, "_n_"},
	} {
		if got := Sanitize(c.name, c.max); got != c.want {
			t.Errorf("Sanitize(%q, %d) = %q, want %q", c.name, c.max, got, c.want)
		}
	}
}

func TestRetry(t *testing.T) {
	for _, c := range []struct {
		name  string
		errs  []error
		calls int
		ok    bool
	}{
		{"first try", []error{nil}, 1, true},
		{"port taken once", []error{errors.New("bind: Address already in use"), nil}, 2, true},
		{"port always taken", []error{errors.New("Address already in use"), errors.New("Address already in use"), errors.New("Address already in use")}, 3, false},
		{"other error", []error{errors.New("no such file"), nil}, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			_, err := Retry(func() (int, error) {
				calls++
				return calls, c.errs[calls-1]
			}, "Address already in use")
			if calls != c.calls || (err == nil) != c.ok {
				t.Errorf("calls %d, err %v; want %d calls, ok %v", calls, err, c.calls, c.ok)
			}
		})
	}
}

// TestProcess runs a real program: a server that dies during start-up is reported with its log, one that
// answers is stopped by its signal.
func TestProcess(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "server.log")
	env := []string{"PATH=/usr/bin:/bin"}

	dying := Command(nil, env, "sh", "-c", "echo 'FATAL: cannot start' >"+logPath+"; exit 3")
	p, err := Start(dying, "dying", logPath, syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitReady(context.Background(), time.Minute, 10*time.Millisecond, func(context.Context) error { return errors.New("not yet") })
	if err == nil || !strings.Contains(err.Error(), "dying exited during start-up") || !strings.Contains(err.Error(), "FATAL: cannot start") {
		t.Fatalf("WaitReady on a dying server: %v", err)
	}

	marker := filepath.Join(dir, "ready")
	sleeping := Command(nil, env, "sh", "-c", "touch "+marker+"; exec sleep 600")
	p, err = Start(sleeping, "sleeping", logPath, syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	ready := func(context.Context) error { _, err := os.Stat(marker); return err }
	if err := p.WaitReady(context.Background(), time.Minute, 10*time.Millisecond, ready); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	select {
	case <-p.exited:
	default:
		t.Fatal("process still running after Stop")
	}
}

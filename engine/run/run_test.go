package run

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/redact"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/registry"
)

func TestRunning(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   *pipeline.Status
		want bool
	}{
		{"no status", nil, false},
		{"this process running", &pipeline.Status{State: "running", PID: os.Getpid()}, true},
		{"this process retrying", &pipeline.Status{State: pipeline.StateRetrying, PID: os.Getpid()}, true},
		{"stopped", &pipeline.Status{State: "stopped", PID: os.Getpid()}, false},
		{"failed", &pipeline.Status{State: pipeline.StateFailed, PID: os.Getpid()}, false},
		{"no pid", &pipeline.Status{State: "running"}, false},
	} {
		if got := Running(tc.st); got != tc.want {
			t.Errorf("%s: Running = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestStateStatus: the status file is keyed by name and WAL, the legacy file is read when it is the only one,
// and RemoveStatus removes both.
func TestStateStatus(t *testing.T) {
	home := t.TempDir()
	p := &config.Pipeline{Name: "orders", WAL: config.WALConfig{URL: "file:///tmp/wal/orders"}}
	other := &config.Pipeline{Name: "orders", WAL: config.WALConfig{URL: "file:///tmp/wal/other"}}
	s := StateOf(home, p)
	if s.StatusFile() == StateOf(home, other).StatusFile() {
		t.Fatalf("two WALs share status file %s", s.StatusFile())
	}
	if st, err := s.ReadStatus(); err != nil || st != nil {
		t.Fatalf("ReadStatus of nothing = %v, %v", st, err)
	}
	legacy := filepath.Join(home, "state", "orders", "status.json")
	if err := writeStatus(legacy, pipeline.Status{Pipeline: "orders", State: "legacy"}, redact.New()); err != nil {
		t.Fatal(err)
	}
	if st, err := s.ReadStatus(); err != nil || st == nil || st.State != "legacy" {
		t.Fatalf("ReadStatus with a legacy file = %+v, %v", st, err)
	}
	w := newStatusWriter(s, nil, redact.New())
	w.publish(pipeline.Status{Pipeline: "orders", State: "running", WAL: pipeline.WALStatus{LastCommitted: 7}})
	if st, err := s.ReadStatus(); err != nil || st == nil || st.State != "running" {
		t.Fatalf("ReadStatus after publish = %+v, %v", st, err)
	}
	if w.progress() != 7 {
		t.Errorf("progress = %d, want 7", w.progress())
	}
	s.RemoveStatus()
	if st, err := s.ReadStatus(); err != nil || st != nil {
		t.Fatalf("ReadStatus after RemoveStatus = %+v, %v", st, err)
	}
}

func TestCodeOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want Code
	}{
		{"plain", errors.New("x"), Failed},
		{"coded", fmt.Errorf("wrapped: %w", withCode(Locked, wal.ErrLocked)), Locked},
		{"outermost code wins", withCode(Refused, withCode(Locked, errors.New("x"))), Refused},
		{"start not found", startErr(registry.ErrNotFound), NotFound},
		{"start checksum", startErr(registry.ErrChecksum), Unverified},
		{"start other", startErr(errors.New("exec failed")), Failed},
		{"identity", fmt.Errorf("x: %w", connector.ErrIdentity), Unverified},
		{"settings", fmt.Errorf("x: %w", connector.ErrSettings), Refused},
		{"kind", fmt.Errorf("x: %w", connector.ErrKind), Refused},
		{"registry error outside a start", fmt.Errorf("x: %w", registry.ErrNotFound), Failed},
	} {
		if got := CodeOf(tc.err); got != tc.want {
			t.Errorf("%s: CodeOf = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func startErr(err error) error { return errors.Join(err, connector.ErrStart) }

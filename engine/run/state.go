package run

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/redact"
	"github.com/skippr-dev/skippr/engine/resnapshot"
)

// State is a pipeline's state directory on this host (see the package doc for the layout).
type State struct {
	home string
	name string
	dir  string
}

// StateOf returns the state directory of pipeline p under home ($SKIPPR_HOME).
func StateOf(home string, p *config.Pipeline) State {
	sum := sha256.Sum256([]byte(p.WAL.URL))
	return State{home: home, name: p.Name, dir: filepath.Join(home, "state", p.Name+"-"+hex.EncodeToString(sum[:6]))}
}

// StatusFile is where the pipeline's status is written.
func (s State) StatusFile() string { return filepath.Join(s.dir, "status.json") }

// legacyStatusFile is where releases before the WAL-keyed name wrote the status; read it once after an upgrade.
func (s State) legacyStatusFile() string {
	return filepath.Join(s.home, "state", s.name, "status.json")
}

// Resnapshots is the pipeline's re-snapshot request store, beside its status file.
func (s State) Resnapshots() resnapshot.Store {
	return resnapshot.Store{Dir: filepath.Join(s.dir, "resnapshot")}
}

// ReadStatus reads the pipeline's status file, falling back to the legacy location; nil when there is none.
func (s State) ReadStatus() (*pipeline.Status, error) {
	for _, path := range []string{s.StatusFile(), s.legacyStatusFile()} {
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var st pipeline.Status
		if err := json.Unmarshal(b, &st); err != nil {
			return nil, fmt.Errorf("status file %s: %w", path, err)
		}
		return &st, nil
	}
	return nil, nil
}

// RemoveStatus removes the status files (after a teardown: a later sync starts over).
func (s State) RemoveStatus() {
	os.Remove(s.StatusFile())
	os.Remove(s.legacyStatusFile())
}

// Running is the one rule for "the pipeline runs on this host": its status names a live process and a state
// other than stopped or failed.
func Running(st *pipeline.Status) bool {
	return st != nil && st.State != "stopped" && st.State != pipeline.StateFailed && processAlive(st.PID)
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}

// statusWriter keeps the pipeline's last published status, so a fault reported between runs keeps its figures.
type statusWriter struct {
	path   string
	log    *slog.Logger
	redact *redact.Redactor
	mu     sync.Mutex
	last   pipeline.Status
	prog   atomic.Uint64
}

func newStatusWriter(s State, log *slog.Logger, red *redact.Redactor) *statusWriter {
	w := &statusWriter{path: s.StatusFile(), log: log, redact: red, last: pipeline.Status{Pipeline: s.name}}
	if st, err := s.ReadStatus(); err == nil && st != nil {
		w.last = *st
		w.last.Fault = nil
	}
	return w
}

// progress grows with every commit and apply: the WAL's last sequence plus each destination's applied one.
func (w *statusWriter) progress() uint64 { return w.prog.Load() }

func (w *statusWriter) publish(st pipeline.Status) {
	p := st.WAL.LastCommitted
	for _, d := range st.Destinations {
		p += d.LastApplied
	}
	if p > w.prog.Load() {
		w.prog.Store(p)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = st
	w.write(st)
}

func (w *statusWriter) fault(state string, f pipeline.Fault) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.last
	st.State, st.Fault, st.PID, st.Updated = state, &f, os.Getpid(), time.Now()
	w.write(st)
}

func (w *statusWriter) write(st pipeline.Status) {
	if st.Fault != nil {
		// Before encoding: JSON escaping would hide a value with quotes from the redaction of the whole file.
		f := *st.Fault
		f.Message, f.Fix = w.redact.String(f.Message), w.redact.String(f.Fix)
		st.Fault = &f
	}
	if err := writeStatus(w.path, st, w.redact); err != nil {
		w.log.Warn("write status", "err", err)
	}
}

// writeStatus replaces the status file atomically; it is advisory, so no fsync.
func writeStatus(path string, st pipeline.Status, red *redact.Redactor) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	b = []byte(red.String(string(b)))
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

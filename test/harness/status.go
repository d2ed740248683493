package harness

import (
	"encoding/json"
	"strings"
	"time"
)

// StatusRow is what the fault tests read of `status --json`.
type StatusRow struct {
	Pipeline string `json:"pipeline"`
	State    string `json:"state"`
	Fault    *struct {
		Message string    `json:"message"`
		Class   string    `json:"class"`
		Fix     string    `json:"fix"`
		Since   time.Time `json:"since"`
		Attempt int       `json:"attempt"`
		Entry   uint64    `json:"entry"`
		Segment string    `json:"segment"`
	} `json:"fault"`
}

// SyncFails runs `sync --once`, which must stop within seconds with exit 1, no retry, the message and a fix;
// then `status` must show the same, exit 1, as text and as JSON.
func (e *Env) SyncFails(class, fix string, message ...string) StatusRow {
	e.T.Helper()
	return e.syncStops(1, class, fix, message...)
}

// SyncRefused is syncFails for a pipeline refused at start (a failed check, a type a destination cannot
// hold): sync exits 2, the code of bad configuration.
func (e *Env) SyncRefused(fix string, message ...string) StatusRow {
	e.T.Helper()
	return e.syncStops(2, "config", fix, message...)
}

func (e *Env) syncStops(code int, class, fix string, message ...string) StatusRow {
	t := e.T
	t.Helper()
	start := time.Now()
	r := e.Run("sync", "--once")
	took := time.Since(start)
	if r.Code != code {
		t.Fatalf("sync --once: exit %d, want %d\n%s", r.Code, code, r.Stderr)
	}
	if strings.Contains(r.Stderr, "restarting") {
		t.Fatalf("sync --once retried a permanent fault:\n%s", r.Stderr)
	}
	// Plugin start-up dominates; a retry would add at least the 0.5+1+2+4 s of backoff.
	if took > 20*time.Second {
		t.Fatalf("sync --once took %s to fail", took)
	}
	for _, s := range append(message, "fix: "+fix, "("+class+")") {
		if !strings.Contains(r.Stderr, s) {
			t.Fatalf("sync --once stderr lacks %q:\n%s", s, r.Stderr)
		}
	}
	rt := e.Run("status")
	if rt.Code != 1 || !strings.Contains(rt.Stdout, "orders: failed: ") || !strings.Contains(rt.Stdout, "(since ") ||
		!strings.Contains(rt.Stdout, "class: "+class) || !strings.Contains(rt.Stdout, "fix: "+fix) {
		t.Fatalf("status: exit %d, want 1 showing the failure\n%s%s", rt.Code, rt.Stdout, rt.Stderr)
	}
	rj := e.Run("status", "--json")
	var rows []StatusRow
	if err := json.Unmarshal([]byte(rj.Stdout), &rows); err != nil {
		t.Fatalf("status --json: %v\n%s", err, rj.Stdout)
	}
	if rj.Code != 1 || len(rows) != 1 || rows[0].State != "failed" || rows[0].Fault == nil || rows[0].Fault.Class != class ||
		!strings.Contains(rows[0].Fault.Fix, fix) || time.Since(rows[0].Fault.Since) > 5*time.Minute {
		t.Fatalf("status --json: exit %d, %s", rj.Code, rj.Stdout)
	}
	for _, s := range message {
		if !strings.Contains(rows[0].Fault.Message, s) {
			t.Fatalf("status --json message lacks %q: %s", s, rows[0].Fault.Message)
		}
	}
	return rows[0]
}

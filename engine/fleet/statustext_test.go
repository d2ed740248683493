package fleet

import (
	"strings"
	"testing"
	"time"
)

// WriteText: one row per worker, then per pipeline; a pipeline without holder shows "-" and counts as unheld,
// the lag shows with its age, the last error with its worker and time.
func TestStatusWriteText(t *testing.T) {
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	st := &Status{
		Workers: []Member{{Name: "w1", Version: "1.0", Host: "h", PID: 42, Started: now, Pipelines: []string{"a"}}, {Name: "w2", Draining: true, Started: now}},
		Pipelines: []PipelineStatus{
			{Name: "a", Holder: "w1", Epoch: 7, Since: now, Assigned: "w1", Progress: &Progress{}, Published: now.Add(-1500 * time.Millisecond), LagEntries: 3, LagSeconds: 2.26},
			{Name: "b", Assigned: "w2", LastError: &LastError{Error: "boom", Worker: "w2", Time: now}},
		},
	}
	var b strings.Builder
	if err := st.WriteText(&b, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	for i, want := range [][]string{
		{"WORKER", "STATE", "PIPELINES", "VERSION", "HOST", "PID", "STARTED"},
		{"w1", "alive", "1", "1.0", "h", "42", "2026-05-06T07:08:09Z"},
		{"w2", "draining", "0", "0", "2026-05-06T07:08:09Z"},
		{},
		{"PIPELINE", "HOLDER", "EPOCH", "SINCE", "ASSIGNED", "LAG", "AS", "OF", "LAST", "ERROR"},
		{"a", "w1", "7", "2026-05-06T07:08:09Z", "w1", "3", "entries,", "2.3s", "1.5s", "ago"},
		{"b", "-", "w2", "-", "-", "boom", "(w2,", "2026-05-06T07:08:09Z)"},
	} {
		if i >= len(lines) || strings.Join(strings.Fields(lines[i]), " ") != strings.Join(want, " ") {
			t.Fatalf("line %d: want fields %q in:\n%s", i, want, b.String())
		}
	}
	if n := st.Unheld(); n != 1 {
		t.Fatalf("Unheld() = %d, want 1", n)
	}
}

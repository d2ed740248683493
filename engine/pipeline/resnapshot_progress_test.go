package pipeline

import (
	"testing"
)

// TestResnapshotStateFromGauges walks the status of one stream through what a source sends: re-snapshot marks
// (keyed copies) and checkpoints with the copy's gauges (every copy; the only signal of a copy without a key, such
// as a postgres table in mode: append re-snapshotted or added to a running pipeline).
func TestResnapshotStateFromGauges(t *testing.T) {
	const table = "public.a"
	gauges := func(rows, total int64, copying ...float64) step {
		ms := []SourceMetric{
			{Name: "resnapshot_rows", Value: float64(rows), Labels: map[string]string{"table": table}},
			{Name: "resnapshot_rows_total", Value: float64(total), Labels: map[string]string{"table": table}},
		}
		for _, c := range copying {
			ms = append(ms, SourceMetric{Name: "resnapshot_copying", Value: c, Labels: map[string]string{"table": table}})
		}
		return step{metrics: ms}
	}
	// other is a checkpoint without this table's gauges: a slot's, and another table's copy.
	other := step{metrics: []SourceMetric{
		{Name: "slot_retained_wal_bytes", Value: 7, Labels: map[string]string{"slot": "s"}},
		{Name: "resnapshot_rows", Value: 5, Labels: map[string]string{"table": "public.b"}},
	}}
	requested := step{request: true}
	begin, end := step{mark: "begin"}, step{mark: "end"}
	for _, tc := range []struct {
		name  string
		steps []step
		want  []ResnapshotStatus // the status after each step (Since aside); State "" is no entry
	}{
		{"append table re-snapshotted: gauges only",
			[]step{requested, gauges(0, 2000, 1), gauges(300, 2000, 1), other, gauges(2300, 2300, 0), other},
			[]ResnapshotStatus{{State: "requested"}, {State: "copying", Total: 2000}, {State: "copying", Rows: 300, Total: 2000},
				{State: "copying", Rows: 300, Total: 2000}, {State: "done", Rows: 2300, Total: 2300}, {State: "done", Rows: 2300, Total: 2300}}},
		{"append table added to a running pipeline: no request",
			[]step{other, gauges(500, 400000, 1), gauges(400100, 400100, 0)},
			[]ResnapshotStatus{{}, {State: "copying", Rows: 500, Total: 400000}, {State: "done", Rows: 400100, Total: 400100}}},
		{"keyed re-snapshot: marks and gauges",
			[]step{requested, gauges(0, 0, 1), begin, gauges(250, 20000, 1), end, gauges(20001, 20001, 0), other},
			[]ResnapshotStatus{{State: "requested"}, {State: "copying"}, {State: "copying"}, {State: "copying", Rows: 250, Total: 20000},
				{State: "done"}, {State: "done", Rows: 20001, Total: 20001}, {State: "done", Rows: 20001, Total: 20001}}},
		{"a source without resnapshot_copying: the end mark ends the copy",
			[]step{requested, begin, gauges(10, 100), other, end, other},
			[]ResnapshotStatus{{State: "requested"}, {State: "copying"}, {State: "copying", Rows: 10, Total: 100},
				{State: "copying", Rows: 10, Total: 100}, {State: "done"}, {State: "done"}}},
		{"copied again after done",
			[]step{gauges(9, 9, 0), requested, gauges(1, 9, 1)},
			[]ResnapshotStatus{{State: "done", Rows: 9, Total: 9}, {State: "requested"}, {State: "copying", Rows: 1, Total: 9}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &runner{}
			var since ResnapshotStatus
			for i, s := range tc.steps {
				switch {
				case s.request:
					r.setResnapshot(table, ResnapshotStatus{State: "requested"})
				case s.mark != "":
					state := map[string]string{"begin": "copying", "end": "done"}[s.mark]
					r.setResnapshot(table, ResnapshotStatus{State: state})
				default:
					r.resnapshotProgress(&SourceCheckpoint{Metrics: s.metrics})
				}
				got, ok := r.status.Resnapshot[table]
				if !ok && tc.want[i].State != "" {
					t.Fatalf("step %d: no status for %s, want %+v", i, table, tc.want[i])
				}
				if got.State != "" && got.Since.IsZero() {
					t.Fatalf("step %d: %+v has no since", i, got)
				}
				if got.State == since.State && got.Since != since.Since {
					t.Fatalf("step %d: state %s stayed but its since moved from %v to %v", i, got.State, since.Since, got.Since)
				}
				since = got
				got.Since = tc.want[i].Since
				if got != tc.want[i] {
					t.Fatalf("step %d: status %+v, want %+v", i, got, tc.want[i])
				}
			}
		})
	}
}

// step is one thing a source sends, or a request: a re-snapshot mark ("begin", "end") or a checkpoint's gauges.
type step struct {
	request bool
	mark    string
	metrics []SourceMetric
}

// TestSourceWaitingFromGauge: a checkpoint's gauge waiting_seconds (label reason) shows in the status as what the
// source waits for; the next checkpoint without it clears it (a wait has no end mark of its own).
func TestSourceWaitingFromGauge(t *testing.T) {
	wait := SourceMetric{Name: "waiting_seconds", Value: 12, Labels: map[string]string{"reason": "waiting for the transaction of pid 7 to end"}}
	slot := SourceMetric{Name: "slot_retained_wal_bytes", Value: 7, Labels: map[string]string{"slot": "s"}}
	r := &runner{cfg: Config{Observer: noObserver{}}}
	for i, s := range []struct {
		metrics []SourceMetric
		want    string
		seconds int64
	}{
		{[]SourceMetric{slot}, "", 0},
		{[]SourceMetric{slot, wait}, wait.Labels["reason"], 12},
		{[]SourceMetric{slot}, "", 0},
		{[]SourceMetric{{Name: "waiting_seconds", Value: 3}}, "", 0}, // no reason: nothing to show
	} {
		r.sourceProgress(&SourceCheckpoint{Position: []byte("p"), Metrics: s.metrics})
		if got := r.status.Source; got.Waiting != s.want || got.WaitingSeconds != s.seconds {
			t.Fatalf("step %d: source status %+v, want waiting %q (%d s)", i, got, s.want, s.seconds)
		}
	}
}

package source

import (
	"sync"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// walStatuses are the values of pg_replication_slots.wal_status. Each is reported, 1 for the current one, so an
// alert on wal_status="lost" (or "unreserved") is a plain comparison.
var walStatuses = []string{"reserved", "extended", "unreserved", "lost"}

// slotFigures is what the heartbeat last read of the slot; every checkpoint carries it to the engine's metrics.
type slotFigures struct {
	mu        sync.Mutex
	known     bool
	retained  int64
	walStatus string
}

func (f *slotFigures) set(retained *int64, walStatus *string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.known = true
	f.retained = 0
	if retained != nil {
		f.retained = *retained
	}
	f.walStatus = ""
	if walStatus != nil {
		f.walStatus = *walStatus
	}
}

// metrics are the slot's figures (once the heartbeat read them) as serve metrics.
func (f *slotFigures) metrics(slot string) []serve.Metric {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.known {
		return nil
	}
	out := []serve.Metric{{Name: "slot_retained_wal_bytes", Value: float64(f.retained), Labels: map[string]string{"slot": slot},
		Help: "WAL the replication slot holds back on the server (pg_current_wal_lsn() - restart_lsn), as of the last heartbeat."}}
	for _, s := range walStatuses {
		v := 0.0
		if s == f.walStatus {
			v = 1
		}
		out = append(out, serve.Metric{Name: "slot_wal_status", Value: v, Labels: map[string]string{"slot": slot, "wal_status": s},
			Help: "1 for the replication slot's wal_status (reserved, extended, unreserved, lost; lost cannot continue), as of the last heartbeat."})
	}
	return out
}

// snapshotMetrics are each table's copied rows and its expected rows (the planner's estimate until the table is
// done, then what was copied).
func (r *reader) snapshotMetrics(next *Position) []serve.Metric {
	var out []serve.Metric
	for _, name := range next.Tables {
		p := next.Progress[name]
		total := p.Rows
		if t := r.tables[name]; t != nil && !p.Done {
			total = max(t.Estimate, p.Rows)
		}
		labels := map[string]string{"table": name}
		out = append(out,
			serve.Metric{Name: "snapshot_rows_done", Value: float64(p.Rows), Labels: labels, Help: "Rows of the table the initial snapshot has copied."},
			serve.Metric{Name: "snapshot_rows_total", Value: float64(total), Labels: labels, Help: "Rows the initial snapshot expects to copy from the table (the planner's estimate until the table is done)."})
	}
	return append(append(out, r.slot.metrics(r.cfg.Slot)...), notWaiting)
}

// copyMetrics are the gauges of a table copied while streaming (a re-snapshot, or the copy of a table in mode:
// append): rows copied, rows expected, and resnapshot_copying — 1 while the copy runs, 0 in the one checkpoint
// after it ended (processor.ended). The engine shows the copy in `skippr status` from these: "copying" while
// they come, "done" at the 0. That 0 is the explicit end an append table's copy has, since it sends no re-snapshot
// marks (they need a key), and a checkpoint merely lacking the gauges says nothing.
func copyMetrics(table string, rows, total int64, copying bool) []serve.Metric {
	labels := map[string]string{"table": table}
	on := 0.0
	if copying {
		on = 1
	}
	return []serve.Metric{
		{Name: "resnapshot_rows", Value: float64(rows), Labels: labels, Help: "Rows of the table the re-snapshot (or copy of an added table) in progress has copied; its final count once it ended."},
		{Name: "resnapshot_rows_total", Value: float64(max(total, rows)), Labels: labels, Help: "Rows the re-snapshot (or copy of an added table) expects to copy from the table (the planner's estimate when it began)."},
		{Name: "resnapshot_copying", Value: on, Labels: labels, Help: "1 while the table is being copied again while streaming (a re-snapshot, or the copy of an added table), 0 once that copy ended."},
	}
}

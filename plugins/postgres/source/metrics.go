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
	return append(out, r.slot.metrics(r.cfg.Slot)...)
}

package lakequery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/skippr-dev/skippr/engine/wal"
	sdk "github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

// TableFreshness is how current one lake table's answers are: the lake's snapshot and what the WAL holds for
// the table beyond it (committed, not yet applied to the lake).
type TableFreshness struct {
	Pipeline string
	// Name is "namespace.table" as the query engine names the table (schema.view).
	Name       string
	Stream     string
	SnapshotID int64
	// SnapshotTime is the lake snapshot's commit time (zero: no snapshot yet, or the plugin does not say).
	SnapshotTime time.Time
	// WALEntries and WALRows count the WAL entries after the table's fence that hold rows of its stream.
	WALEntries int
	WALRows    int64
	// WALOldest is the commit time of the oldest of those entries (zero: none).
	WALOldest time.Time
}

// Freshness reports each lake table's freshness. It lists the WAL's commit records only (no segment is
// read) and plans each lake once, as a statement does.
func (q *Querier) Freshness(ctx context.Context) ([]TableFreshness, error) {
	var err error
	recs := map[string][]wal.CommitRecord{} // by pipeline
	var out []TableFreshness
	for i, l := range q.lakes {
		rs, ok := recs[l.p.Name]
		if !ok {
			if rs, err = q.commitRecords(ctx, l.p.Name, l); err != nil {
				return nil, err
			}
			recs[l.p.Name] = rs
		}
		var streams []string
		for _, r := range rs {
			for st := range r.Rows {
				if !slices.Contains(streams, st) {
					streams = append(streams, st)
				}
			}
		}
		slices.Sort(streams)
		fetch, err := q.lakeFetchDir(i)
		if err != nil {
			return nil, err
		}
		plan, err := l.plugin.LakePlan(ctx, sdk.PlanRequest{Pipeline: l.p.Name, Streams: streams, FetchDir: fetch})
		if err != nil {
			return nil, fmt.Errorf("plan lake of connection %s: %w", l.conn, err)
		}
		for _, tp := range plan.Tables {
			f := TableFreshness{Pipeline: l.p.Name, Name: plan.Namespace + "." + tp.Table, Stream: tp.Stream, SnapshotID: tp.SnapshotID}
			if tp.SnapshotTimeMs > 0 {
				f.SnapshotTime = time.UnixMilli(tp.SnapshotTimeMs).UTC()
			}
			for _, r := range rs {
				n, ok := r.Rows[tp.Stream]
				if !ok || r.Seq <= tp.Fence {
					continue
				}
				if f.WALEntries == 0 || r.Time.Before(f.WALOldest) {
					f.WALOldest = r.Time.UTC()
				}
				f.WALEntries++
				f.WALRows += n
			}
			out = append(out, f)
		}
	}
	return out, nil
}

// commitRecords lists a pipeline's committed, unreclaimed entries (their records only).
func (q *Querier) commitRecords(ctx context.Context, pipeline string, l lake) ([]wal.CommitRecord, error) {
	log, err := q.openWAL(ctx, l.p)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		h, err := log.Head(ctx)
		if err != nil {
			return nil, headErr(pipeline, err)
		}
		rs, err := log.Entries(ctx, h.ReclaimedThrough)
		if errors.Is(err, wal.ErrReclaimed) && attempt < tailAttempts {
			continue // reclaimed between Head and Entries: look again
		}
		if errors.Is(err, wal.ErrReclaimed) {
			return nil, fmt.Errorf("pipeline %s: %w: %w", pipeline, err, ErrRetry)
		}
		if err != nil {
			return nil, fmt.Errorf("pipeline %s: %w", pipeline, err)
		}
		return rs, nil
	}
}

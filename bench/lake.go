package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/wal"
)

// lakeResult is one Postgres → Iceberg snapshot run.
type lakeResult struct {
	pgResult
	applies   int // Iceberg snapshots of the table
	pluginRSS int64
}

// snapshotToLake runs the Postgres snapshot of the table through a local WAL into the embedded Iceberg lake
// (the iceberg plugin, SQL catalog on local files) and stops the clock when the lake holds every row: when
// the apply that brings the rows applied to the table's count has committed (the Iceberg snapshot and the
// pipeline's completion marker), which is when `skippr query --as-of-lake` would count them all. limits are
// the lake's apply limits: coalesced ranges, or MaxEntries 1 for one Iceberg snapshot per WAL entry.
func (pg *pgBench) snapshotToLake(ctx context.Context, icebergBin, slot string, limits pipeline.ApplyLimits) (lakeResult, error) {
	dir, err := os.MkdirTemp("", "skippr-bench-lake-")
	if err != nil {
		return lakeResult{}, err
	}
	defer os.RemoveAll(dir)
	l, err := wal.Open(ctx, "file://"+filepath.Join(dir, "wal"), wal.Options{})
	if err != nil {
		return lakeResult{}, fmt.Errorf("open WAL: %w", err)
	}
	defer l.Close()
	if err := l.Acquire(ctx); err != nil {
		return lakeResult{}, fmt.Errorf("acquire WAL: %w", err)
	}
	src, dst := startPlugin(ctx, pg.bin), startPlugin(ctx, icebergBin)
	defer src.Kill()
	defer dst.Kill()
	lakeSettings, _ := json.Marshal(map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(dir, "lake")}, "namespace": "bench"})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu   sync.Mutex
		last pipeline.Status
		seen = make(chan struct{}, 1)
	)
	done := make(chan error, 1)
	start, cpu0 := time.Now(), selfCPU()
	go func() {
		done <- pipeline.Run(rctx, pipeline.Config{
			Name:         "bench-lake",
			Source:       pipeline.Endpoint[pipeline.Source]{Name: "pg", Plugin: connector.Attach(src, pg.settings("public.snap", slot, "bench_snap", true))},
			Destinations: []pipeline.Endpoint[pipeline.Destination]{{Name: "lake", Plugin: connector.Attach(dst, lakeSettings), Apply: limits}},
			Log:          l, ExactlyOnce: true,
			StatusEvery: time.Nanosecond,
			OnStatus: func(s pipeline.Status) {
				mu.Lock()
				last = s
				mu.Unlock()
				select {
				case seen <- struct{}{}:
				default:
				}
			},
		})
	}()
	deadline := time.After(2 * time.Hour)
	for {
		mu.Lock()
		applied := last.RowsApplied
		mu.Unlock()
		if applied >= pg.opts.rows {
			break
		}
		select {
		case <-seen:
		case err := <-done:
			return lakeResult{}, fmt.Errorf("pipeline ended after %d of %d rows in the lake: %v (iceberg: %s)", applied, pg.opts.rows, err, dst.StderrTail())
		case <-deadline:
			return lakeResult{}, fmt.Errorf("only %d of %d rows in the lake after 2h", applied, pg.opts.rows)
		case <-ctx.Done():
			return lakeResult{}, ctx.Err()
		}
	}
	res := lakeResult{pgResult: pgResult{rows: pg.opts.rows, dur: time.Since(start)}}
	res.engineCPU = selfCPU() - cpu0
	res.pluginCPU = procCPU(dst.Pid())
	res.pluginRSS = procPeakRSS(dst.Pid())
	mu.Lock()
	res.entries = last.WAL.LastCommitted
	mu.Unlock()
	cancel()
	<-done
	res.applies, err = icebergSnapshots(filepath.Join(dir, "lake"))
	return res, err
}

// icebergSnapshots counts the snapshots of the one table under warehouse, from its newest metadata file.
func icebergSnapshots(warehouse string) (int, error) {
	files, err := filepath.Glob(filepath.Join(warehouse, "*", "*", "metadata", "*.metadata.json"))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("no table metadata under %s (%v)", warehouse, err)
	}
	slices.Sort(files) // one table; named NNNNN-uuid, so the newest sorts last
	b, err := os.ReadFile(files[len(files)-1])
	if err != nil {
		return 0, err
	}
	var md struct {
		Snapshots []json.RawMessage `json:"snapshots"`
	}
	if err := json.Unmarshal(b, &md); err != nil {
		return 0, fmt.Errorf("%s: %w", files[len(files)-1], err)
	}
	return len(md.Snapshots), nil
}

// lakeBench runs the snapshot into the lake coalesced (default apply limits) and one entry per apply,
// alternating repeat times so that the machine's drifting load hits both, and prints the medians beside the
// COPY baseline cp of the same run.
func (pg *pgBench) lakeBench(ctx context.Context, binDir string, cp pgResult) error {
	bin := filepath.Join(binDir, "skippr-plugin-iceberg")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%w (run `make build` first, or -pg-lake=false)", err)
	}
	variants := []struct {
		name   string
		limits pipeline.ApplyLimits
		runs   []lakeResult
	}{
		{name: "coalesced (default apply limits: up to 256 MiB of WAL per Iceberg commit)", limits: pipeline.ApplyLimits{}},
		{name: "one Iceberg commit per WAL entry (`apply: {max_entries: 1}`)", limits: pipeline.ApplyLimits{MaxEntries: 1}},
	}
	for i := range max(pg.opts.repeat, 1) {
		for j := range variants {
			v := &variants[j]
			slot := fmt.Sprintf("bench_lake_%d_%d", i, j)
			r, err := pg.snapshotToLake(ctx, bin, slot, v.limits)
			if err != nil {
				return err
			}
			if err := pg.dropSlot(ctx, slot); err != nil {
				return err
			}
			v.runs = append(v.runs, r)
		}
	}
	for _, v := range variants {
		slices.SortFunc(v.runs, func(a, b lakeResult) int { return cmp.Compare(a.dur, b.dur) })
		r := v.runs[len(v.runs)/2]
		var snaps []string
		for _, x := range v.runs {
			snaps = append(snaps, fmt.Sprintf("%d/%d", x.applies, x.entries))
		}
		row("Postgres snapshot → WAL → Iceberg (local), until the lake holds every row: "+v.name, r.rows, 0, r.dur,
			fmt.Sprintf("median of %d; **%.0f%% of COPY**; Iceberg snapshots/WAL entries per run: %s; CPU µs/row: engine %.1f, iceberg plugin %.1f; iceberg plugin peak RSS %s",
				len(v.runs), 100*rate(r.pgResult)/rate(cp), strings.Join(snaps, ", "), perRow(r.engineCPU, r.rows), perRow(r.pluginCPU, r.rows), mib(r.pluginRSS)))
	}
	return nil
}

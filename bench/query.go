package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// queryBench measures `skippr query` end to end (the skippr process: WAL read, the iceberg plugin's plan, the
// duckdb plugin's answer) over a lake table of rows rows with walRows more changes committed to the WAL and
// not applied, beside the same query on the lake alone (--as-of-lake) in the same run.
func queryBench(ctx context.Context, binDir string, rows, walRows int64, runs int) {
	ql := buildQueryLake(ctx, binDir, rows, walRows)
	defer os.RemoveAll(ql.dir)
	run, load := ql.run, ql.load
	queries := []struct{ name, sql string }{
		{"point lookup", fmt.Sprintf("SELECT * FROM bench.events WHERE id = %d", rows/2)},
		{"full aggregate", "SELECT count(*), sum(amount), count(DISTINCT name), max(ts) FROM bench.events"},
	}
	fmt.Printf("\n`skippr query` over a %d-row lake table (built in %s) with %d events unapplied in the WAL; p50 of %d runs, wall time of the whole command:\n\n",
		rows, load.Round(time.Second), walRows, runs)
	fmt.Println("| query | lake + WAL: p50 | lake alone (baseline): p50 | ratio | answers differ |")
	fmt.Println("|---|---:|---:|---:|---|")
	for _, q := range queries {
		var merged, lake []time.Duration
		var mergedOut, lakeOut string
		for i := 0; i < runs; i++ {
			// Alternate, so drift in the machine's load touches both alike.
			out, d := run("query", "--format", "csv", q.sql)
			merged, mergedOut = append(merged, d), out
			out, d = run("query", "--format", "csv", "--as-of-lake", q.sql)
			lake, lakeOut = append(lake, d), out
		}
		m, _ := percentiles(merged)
		l, _ := percentiles(lake)
		fmt.Printf("| %s | %s | %s | %.2f× | %v |\n", q.name, m.Round(time.Millisecond), l.Round(time.Millisecond),
			m.Seconds()/l.Seconds(), mergedOut != lakeOut)
	}
}

// queryLake is a lake table of rows rows, built by skippr sync from datagen's inserts, with walRows more
// events (20% updates and 5% deletes of earlier ids, the rest inserts) committed to the WAL and not applied:
// what the query and serve benchmarks read. The caller removes dir.
type queryLake struct {
	ctx    context.Context
	dir    string
	skippr string
	load   time.Duration // the first sync, which built the table
}

func buildQueryLake(ctx context.Context, binDir string, rows, walRows int64) *queryLake {
	dir, err := os.MkdirTemp("", "skippr-bench-query-")
	if err != nil {
		log.Fatal(err)
	}
	skippr, err := filepath.Abs(filepath.Join(binDir, "skippr"))
	if err != nil {
		log.Fatal(err)
	}
	plugin := func(name string) string {
		p, err := filepath.Abs(filepath.Join(binDir, "skippr-plugin-"+name))
		if err != nil {
			log.Fatal(err)
		}
		return p
	}
	ql := &queryLake{ctx: ctx, dir: dir, skippr: skippr}
	// The first run builds the table from inserts only; the second adds walRows events with apply paused, so
	// they stay in the WAL.
	config := func(total int64, changes, paused bool) {
		upd, del := 0.0, 0.0
		if changes {
			upd, del = 0.2, 0.05
		}
		cfg := fmt.Sprintf(`connections:
  gen:
    plugin: datagen
    path: %s
    settings: { seed: 3, rows: %d, batch_size: 65536, update_ratio: %g, delete_ratio: %g }
  lake:
    plugin: iceberg
    path: %s
    settings: { catalog: { warehouse: %s }, namespace: bench }
  query:
    plugin: duckdb
    path: %s
pipelines:
  events:
    source: gen
    destinations: [lake]
    delivery: exactly-once
    apply: { paused: %v }
    wal: { url: file://%s }
`, plugin("datagen"), total, upd, del, plugin("iceberg"), filepath.Join(dir, "lake"), plugin("duckdb"), paused, filepath.Join(dir, "wal"))
		if err := os.WriteFile(filepath.Join(dir, "skippr.yml"), []byte(cfg), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	config(rows, false, false)
	_, ql.load = ql.run("sync", "--once")
	config(rows+walRows, true, true)
	ql.run("sync", "--once")
	return ql
}

// cmd is skippr with args, run in the lake's directory.
func (ql *queryLake) cmd(args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ql.ctx, ql.skippr, append([]string{"--log-level", "error"}, args...)...)
	cmd.Dir = ql.dir
	cmd.Env = append(os.Environ(), "SKIPPR_HOME="+filepath.Join(ql.dir, "home"))
	return cmd
}

// run runs skippr with args and returns its stdout and wall time; a failure ends the benchmark.
func (ql *queryLake) run(args ...string) (string, time.Duration) {
	cmd := ql.cmd(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		log.Fatalf("skippr %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), time.Since(start)
}

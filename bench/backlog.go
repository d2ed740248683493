package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/testkit/bigquerytest"
	"github.com/skippr-dev/skippr/testkit/pgtest"
	"github.com/skippr-dev/skippr/testkit/s3test"
	"github.com/skippr-dev/skippr/testkit/snowflaketest"
)

// backlogDests are the destinations -backlog-dest names, in the order they run.
var backlogDests = []string{"testdest", "postgres", "duckdb", "iceberg", "snowflake", "bigquery"}

// backlogTarget is one destination of the backlog benchmark, set up for one run.
type backlogTarget struct {
	plugin   string // binary: skippr-plugin-<plugin>
	settings []byte
	note     string
	cleanup  func()
}

// backlogServers are the servers the destinations of one benchmark share, started when first needed.
type backlogServers struct {
	tmp string
	// icebergMemory and duckdbMemory are those plugins' memory_limit settings; "": their defaults.
	icebergMemory, duckdbMemory string
	pg                          *pgtest.Server
	s3                          *s3test.Server
	dbs                         int
}

func (s *backlogServers) postgres(ctx context.Context) (*pgtest.Server, error) {
	if s.pg != nil {
		return s.pg, nil
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// A 1 GiB backlog is one transaction of tens of millions of upserts: room for its WAL keeps checkpoints
	// out of the measured apply.
	srv, err := pgtest.Start(sctx, pgtest.Options{Settings: map[string]string{"max_wal_size": "16GB"}})
	if err != nil {
		return nil, fmt.Errorf("start postgres (apt-get install -y %s): %w", pgtest.AptPackage, err)
	}
	s.pg = srv
	return srv, nil
}

// database creates a fresh database on the shared Postgres server.
func (s *backlogServers) database(ctx context.Context, prefix string) (*pgtest.Server, string, error) {
	srv, err := s.postgres(ctx)
	if err != nil {
		return nil, "", err
	}
	s.dbs++
	name := fmt.Sprintf("%s_%d", prefix, s.dbs)
	pg := &pgBench{srv: srv}
	if err := pg.admin(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, "", err
	}
	return srv, name, nil
}

func (s *backlogServers) close() {
	if s.s3 != nil {
		s.s3.Stop()
	}
	if s.pg != nil {
		if err := s.pg.Stop(); err != nil {
			log.Printf("stop postgres: %v", err)
		}
		pgtest.RemoveTemplate()
	}
}

// target sets up destination name for one run in dir.
func (s *backlogServers) target(ctx context.Context, name, dir string) (backlogTarget, error) {
	mustJSON := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		return b
	}
	nothing := func() {}
	switch name {
	case "testdest":
		out := filepath.Join(dir, "out")
		return backlogTarget{plugin: "testdest", settings: mustJSON(map[string]any{"dir": out}), cleanup: nothing}, nil
	case "postgres":
		srv, db, err := s.database(ctx, "backlog_pg")
		if err != nil {
			return backlogTarget{}, err
		}
		return backlogTarget{plugin: "postgres", cleanup: nothing,
			note:     "PostgreSQL 15 on 127.0.0.1 (testkit/pgtest, fsync=off); RSS excludes the server",
			settings: mustJSON(map[string]any{"host": srv.Host, "port": srv.Port, "user": "postgres", "database": db, "sslmode": "disable"})}, nil
	case "duckdb":
		settings, limit := map[string]any{"path": filepath.Join(dir, "bench.duckdb")}, "default memory_limit"
		if s.duckdbMemory != "" {
			settings["memory_limit"] = s.duckdbMemory
			limit = "memory_limit " + s.duckdbMemory
		}
		return backlogTarget{plugin: "duckdb", cleanup: nothing, note: "embedded: RSS includes DuckDB; " + limit,
			settings: mustJSON(settings)}, nil
	case "iceberg":
		if s.s3 == nil {
			if err := os.MkdirAll(filepath.Join(s.tmp, "s3"), 0o755); err != nil {
				return backlogTarget{}, err
			}
			srv, err := s3test.Start(ctx, filepath.Join(s.tmp, "s3"))
			if err != nil {
				return backlogTarget{}, fmt.Errorf("start versitygw (run `make tools`, or set $VERSITYGW): %w", err)
			}
			s.s3 = srv
		}
		bucket := fmt.Sprintf("backlog-%d", time.Now().UnixNano())
		if err := s.s3.CreateBucket(ctx, bucket); err != nil {
			return backlogTarget{}, err
		}
		settings := map[string]any{"catalog": map[string]any{"warehouse": "s3://" + bucket + "/lake", "path": filepath.Join(dir, "catalog.db")},
			"namespace": "bench", "s3": map[string]any{"endpoint": s.s3.Endpoint, "region": "us-east-1", "path_style": true,
				"access_key_id": s.s3.AccessKey, "secret_access_key": s.s3.SecretKey}}
		limit := "default memory_limit"
		if s.icebergMemory != "" {
			settings["memory_limit"] = s.icebergMemory
			limit = "memory_limit " + s.icebergMemory
		}
		return backlogTarget{plugin: "iceberg", cleanup: nothing, settings: mustJSON(settings),
			note: "S3 warehouse on versitygw (testkit/s3test), SQLite catalog; " + limit + "; RSS excludes versitygw"}, nil
	case "snowflake":
		srv, db, err := s.database(ctx, "backlog_sf")
		if err != nil {
			return backlogTarget{}, err
		}
		sf, err := snowflaketest.Start(ctx, snowflaketest.Options{Account: "bench", User: "u", Password: "p", Database: "DB",
			Schema: "BENCH", Warehouse: "WH", Role: "R", ConnString: srv.ConnString(db), StageDir: filepath.Join(dir, "stage")})
		if err != nil {
			return backlogTarget{}, err
		}
		return backlogTarget{plugin: "snowflake", cleanup: func() { sf.Close() },
			note: "STAND-IN (testkit/snowflaketest, in the bench process, on PostgreSQL): RSS excludes the stand-in and its PostgreSQL",
			settings: mustJSON(map[string]any{"account": "bench", "user": "u", "password": "p", "warehouse": "WH", "role": "R",
				"database": "DB", "schema": "BENCH", "host": sf.Host, "port": sf.Port, "protocol": "http"})}, nil
	case "bigquery":
		srv, db, err := s.database(ctx, "backlog_bq")
		if err != nil {
			return backlogTarget{}, err
		}
		bq, err := bigquerytest.Serve(ctx, "skippr-bench", srv.ConnString(db))
		if err != nil {
			return backlogTarget{}, err
		}
		return backlogTarget{plugin: "bigquery", cleanup: bq.Close,
			note:     "STAND-IN (testkit/bigquerytest, in the bench process, on PostgreSQL): RSS excludes the stand-in and its PostgreSQL",
			settings: mustJSON(map[string]any{"project": bq.Project, "dataset": "bench", "endpoint": bq.URL})}, nil
	}
	return backlogTarget{}, fmt.Errorf("-backlog-dest: no destination %q (want some of %s)", name, strings.Join(backlogDests, ","))
}

// backlogResult is one destination's apply of the whole backlog.
type backlogResult struct {
	name, note string
	rows       int64
	applies    int
	dur        time.Duration
	rss        int64
	err        error
}

// backlogBench fills a local WAL with rows of datagen while apply is paused, then applies the whole backlog
// as one coalesced range (apply max_bytes above the backlog) to each destination of dests in turn, each from
// its own copy of the filled WAL, and prints each destination plugin's peak RSS: what issue #31 bounds. The
// WAL is never held back while paused, so the backlog is as large as asked.
func backlogBench(ctx context.Context, binDir string, rows int64, dests []string, icebergMemory, duckdbMemory string) {
	settings := []byte(fmt.Sprintf(`{"seed": 3, "rows": %d, "batch_size": 10000, "update_ratio": 0.2, "delete_ratio": 0.05}`, rows))
	tmp, err := os.MkdirTemp("", "skippr-bench-backlog-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	servers := &backlogServers{tmp: tmp, icebergMemory: icebergMemory, duckdbMemory: duckdbMemory}
	defer servers.close()
	filled := filepath.Join(tmp, "wal")
	fill, err := backlogRun(ctx, binDir, filled, settings, "testdest", []byte(fmt.Sprintf(`{"dir": %q}`, filepath.Join(tmp, "fill-out"))), true)
	if err != nil {
		log.Fatal(err)
	}
	walBytes := dirBytes(filled)
	fmt.Printf("\n## Backlog applied as one range — %d rows, %s of WAL (filled in %s), load average %s\n\n",
		fill.rows, mib(walBytes), fill.dur.Round(time.Millisecond), loadAverage())
	// Each row is printed when its destination is done, so a long run that is stopped keeps what it measured.
	fmt.Println("| destination | WAL bytes | rows applied | applies | apply wall time | rows/s | plugin peak RSS | notes |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---|")
	for _, name := range dests {
		r := backlogOne(ctx, binDir, servers, filled, settings, name)
		if r.err != nil {
			fmt.Printf("| %s | %s | — | — | — | — | — | failed: %s |\n", r.name, mib(walBytes), strings.ReplaceAll(r.err.Error(), "\n", " "))
			continue
		}
		fmt.Printf("| %s | %s | %d | %d | %s | %.0f | %s | %s |\n", r.name, mib(walBytes), r.rows, r.applies,
			r.dur.Round(time.Millisecond), float64(r.rows)/r.dur.Seconds(), mib(r.rss), r.note)
	}
	// Counted from the status rather than from testdest's log: scanning a 1 GiB backlog's log (≈ 4 GB of JSON)
	// took longer than the apply.
	fmt.Println("\napplies: changes of the destination's applied sequence in the pipeline's status. Apply wall time: the")
	fmt.Println("whole run (plugins started, the WAL read and applied) until all is applied.")
}

// backlogOne applies a copy of the filled WAL to destination name.
func backlogOne(ctx context.Context, binDir string, servers *backlogServers, filled string, settings []byte, name string) backlogResult {
	res := backlogResult{name: name}
	dir, err := os.MkdirTemp(servers.tmp, name+"-")
	if err != nil {
		res.err = err
		return res
	}
	defer os.RemoveAll(dir)
	walDir := filepath.Join(dir, "wal")
	if out, err := exec.CommandContext(ctx, "cp", "-a", filled, walDir).CombinedOutput(); err != nil {
		res.err = fmt.Errorf("copy the WAL: %v: %s", err, out)
		return res
	}
	t, err := servers.target(ctx, name, dir)
	if err != nil {
		res.err = err
		return res
	}
	defer t.cleanup()
	res.note = t.note
	run, err := backlogRun(ctx, binDir, walDir, settings, t.plugin, t.settings, false)
	if err != nil {
		res.err = err
		return res
	}
	res.rows, res.dur, res.rss, res.applies = run.rows, run.dur, run.rss, run.applies
	return res
}

type backlogRunResult struct {
	rows    int64 // committed (paused) or applied
	dur     time.Duration
	rss     int64
	applies int
}

// backlogRun runs the pipeline datagen → WAL at walDir → plugin once: with apply paused it fills the WAL,
// otherwise it applies what the WAL holds with apply max_bytes above any backlog, so as one range.
func backlogRun(ctx context.Context, binDir, walDir string, srcSettings []byte, plugin string, dstSettings []byte, paused bool) (backlogRunResult, error) {
	bin := filepath.Join(binDir, "skippr-plugin-"+plugin)
	if _, err := os.Stat(bin); err != nil {
		return backlogRunResult{}, fmt.Errorf("%w (run `make build` first)", err)
	}
	src := startPlugin(ctx, filepath.Join(binDir, "skippr-plugin-datagen"))
	dst := startPlugin(ctx, bin)
	defer src.Kill()
	defer dst.Kill()
	l, err := wal.Open(ctx, "file://"+walDir, wal.Options{})
	if err != nil {
		return backlogRunResult{}, fmt.Errorf("open WAL: %w", err)
	}
	defer l.Close()
	if err := l.Acquire(ctx); err != nil {
		return backlogRunResult{}, fmt.Errorf("acquire WAL: %w", err)
	}
	var (
		mu          sync.Mutex
		last        pipeline.Status
		applies     int
		lastApplied uint64
	)
	start := time.Now()
	err = pipeline.Run(ctx, pipeline.Config{
		Name:   "backlog",
		Source: pipeline.Endpoint[pipeline.Source]{Name: "gen", Plugin: connector.Attach(src, srcSettings)},
		Destinations: []pipeline.Endpoint[pipeline.Destination]{{Name: "sink",
			Plugin: connector.Attach(dst, dstSettings),
			Apply:  pipeline.ApplyLimits{MaxBytes: 1 << 50}}},
		Log: l, ExactlyOnce: true, ApplyPaused: paused, Once: true,
		MaxUnappliedBytes: 1 << 50,
		StatusEvery:       time.Nanosecond, // every apply reaches OnStatus, so they can be counted
		OnStatus: func(s pipeline.Status) {
			mu.Lock()
			defer mu.Unlock()
			last = s
			if len(s.Destinations) > 0 && s.Destinations[0].LastApplied > lastApplied {
				lastApplied = s.Destinations[0].LastApplied
				applies++
			}
		},
	})
	dur := time.Since(start)
	if err != nil {
		return backlogRunResult{}, fmt.Errorf("%w (%s: %s)", err, plugin, dst.StderrTail())
	}
	mu.Lock()
	defer mu.Unlock()
	r := backlogRunResult{rows: last.RowsApplied, dur: dur, rss: procPeakRSS(dst.Pid()), applies: applies}
	if paused {
		r.rows = last.RowsCommitted
	}
	return r, nil
}

// parseBacklogDests reads -backlog-dest: a comma list of backlogDests.
func parseBacklogDests(v string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		found := false
		for _, d := range backlogDests {
			found = found || d == f
		}
		if !found {
			return nil, fmt.Errorf("no destination %q: want some of %s", f, strings.Join(backlogDests, ","))
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, errors.New("no destination")
	}
	return out, nil
}

func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

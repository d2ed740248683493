// Command bench measures skippr against baselines taken in the same run and prints a Markdown table for
// BENCHMARKS.md. Run it with `make bench`.
package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/datagen/gen"
)

func main() {
	rows := flag.Int64("rows", 5_000_000, "rows for the boundary benchmark")
	e2eRows := flag.Int64("e2e-rows", 1_000_000, "rows for the end-to-end benchmark")
	httpClients := flag.Int("http-clients", 32, "concurrent HTTP clients")
	httpRequests := flag.Int("http-requests", 4000, "HTTP requests in all")
	binDir := flag.String("bin", "bin", "directory with skippr-plugin-datagen and skippr-plugin-testdest")
	pgRun := flag.Bool("postgres", true, "run the Postgres source benchmarks (needs PostgreSQL's server binaries and skippr-plugin-postgres)")
	pgOnly := flag.Bool("postgres-only", false, "run only the Postgres source benchmarks")
	var pg pgOptions
	flag.Int64Var(&pg.rows, "pg-rows", 10_000_000, "rows of the Postgres snapshot table")
	flag.Int64Var(&pg.streamRows, "pg-stream-rows", 500_000, "rows of the Postgres streaming backlog")
	flag.IntVar(&pg.repeat, "pg-repeat", 3, "runs of the Postgres snapshot and its COPY baseline, and drains of the streaming backlog (medians are reported)")
	flag.Func("pg-rate", "rows/s of the fixed-rate Postgres inserter, comma-separated for one run per rate (default 5000,20000)", func(v string) error {
		pg.rates = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				return fmt.Errorf("want positive rows/s, got %q", f)
			}
			pg.rates = append(pg.rates, n)
		}
		return nil
	})
	flag.BoolVar(&pg.liveOnly, "pg-live-only", false, "of the Postgres benchmarks, run only the fixed-rate latency runs")
	flag.DurationVar(&pg.duration, "pg-duration", 30*time.Second, "duration of the fixed-rate Postgres load")
	flag.IntVar(&pg.txRows, "pg-tx-rows", 200, "rows per inserted transaction while streaming")
	flag.BoolVar(&pg.snapOnly, "pg-snapshot-only", false, "of the Postgres benchmarks, run only the snapshot and its COPY baseline")
	flag.BoolVar(&pg.lake, "pg-lake", true, "after the Postgres snapshot, run it into the Iceberg lake end to end, coalesced and one commit per entry (needs skippr-plugin-iceberg)")
	myRun := flag.Bool("mysql", true, "run the MySQL source benchmarks (needs MariaDB's server binaries and skippr-plugin-mysql)")
	myOnly := flag.Bool("mysql-only", false, "run only the MySQL source benchmarks")
	var my myOptions
	flag.Int64Var(&my.rows, "mysql-rows", 2_000_000, "rows of the MySQL snapshot table")
	flag.IntVar(&my.tables, "mysql-tables", 4, "tables the MySQL snapshot rows are split over (the plugin copies them in parallel, the baseline SELECTs them at once)")
	flag.Int64Var(&my.streamRows, "mysql-stream-rows", 500_000, "rows of the MySQL binlog backlog")
	flag.IntVar(&my.repeat, "mysql-repeat", 3, "runs of each MySQL measurement and its baseline (medians are reported)")
	flag.IntVar(&my.rate, "mysql-rate", 20_000, "rows/s of the fixed-rate MySQL inserter for the commit → WAL latency run (0: skip it)")
	flag.DurationVar(&my.duration, "mysql-duration", 30*time.Second, "duration of the fixed-rate MySQL load")
	flag.IntVar(&my.txRows, "mysql-tx-rows", 200, "rows per inserted transaction of the fixed-rate MySQL load")
	queryRun := flag.Bool("query", true, "run the skippr query benchmark (needs skippr, and the datagen, iceberg and duckdb plugins)")
	queryOnly := flag.Bool("query-only", false, "run only the skippr query benchmark")
	queryRows := flag.Int64("query-rows", 10_000_000, "rows of the lake table for the query benchmark")
	queryWAL := flag.Int64("query-wal-rows", 100_000, "unapplied WAL events for the query benchmark")
	serveOnly := flag.Bool("serve-only", false, "run only the skippr serve benchmark (needs skippr, skippr-serve, and the datagen, iceberg and duckdb plugins)")
	var so serveOptions
	flag.Int64Var(&so.rows, "serve-rows", 2_000_000, "rows of the lake table for the serve benchmark (issue #30 asks for 10M; 2M builds in about a minute on a quiet 2-core machine)")
	flag.Int64Var(&so.walRows, "serve-wal-rows", 100_000, "unapplied WAL events for the serve benchmark")
	flag.IntVar(&so.runs, "serve-runs", 200, "point lookups for the serve benchmark's p50/p99")
	flag.IntVar(&so.clients, "serve-clients", 16, "concurrent Flight SQL clients of the serve benchmark's throughput run")
	flag.DurationVar(&so.duration, "serve-duration", 15*time.Second, "duration of the serve benchmark's throughput run")
	walCodecs := flag.String("wal-compression", "", "WAL codecs (comma-separated: s2, zstd, none; empty: the WAL's default) the MySQL and Postgres snapshots → WAL run with, each once per repeat, to compare CPU and bytes per row")
	flag.BoolVar(&my.stream, "mysql-stream", true, "of the MySQL benchmarks, run the binlog stream ones too (false: only the snapshot and its SELECT baseline)")
	backlogOnly := flag.Bool("backlog-only", false, "run only the backlog benchmark: a WAL backlog applied to each -backlog-dest as one range, each destination plugin's peak RSS")
	backlogDest := flag.String("backlog-dest", strings.Join(backlogDests, ","), "destinations of the backlog benchmark, comma-separated, one at a time; one that cannot run (no plugin binary, no PostgreSQL, no versitygw) gets a row saying why")
	backlogIcebergMemory := flag.String("backlog-iceberg-memory-limit", "", "the iceberg plugin's memory_limit in the backlog benchmark (e.g. 256MiB; empty: the plugin's default)")
	backlogDuckDBMemory := flag.String("backlog-duckdb-memory-limit", "", "the duckdb plugin's memory_limit in the backlog benchmark (e.g. 128MiB; empty: the plugin's default)")
	backlogRows := flag.Int64("backlog-rows", 28_000_000, "rows of datagen in the backlog benchmark (28M: ≈ 1 GiB of s2 WAL, ≈ 38 bytes a row)")
	startOnly := flag.Bool("start-only", false, "run only the start benchmark: `skippr sync --once` from the command to the source's first row, by phase, beside exec baselines (needs skippr and the datagen, testdest and postgres plugins)")
	startRuns := flag.Int("start-runs", 15, "runs of each start benchmark")
	startSteps := flag.Bool("start-steps", false, "in the start benchmark, run skippr at --log-level debug and print the Postgres source's own steps (its check's and its Read's round trips, plugins/postgres/source/warm.go) beside the phases")
	startPG := flag.Bool("start-postgres", true, "in the start benchmark, an hourly Postgres → testdest job too (needs PostgreSQL's server binaries)")
	cpuProfile := flag.String("cpuprofile", "", "write the bench process's (the engine side's) CPU profile to this file")
	flag.Parse()
	my.codecs, pg.codecs = strings.Split(*walCodecs, ","), strings.Split(*walCodecs, ",")
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if len(pg.rates) == 0 {
		pg.rates = []int{5_000, 20_000}
	}
	ctx := context.Background()
	if *startOnly {
		startBench(ctx, *binDir, *startRuns, *startPG, *startSteps)
		return
	}
	if *backlogOnly {
		dests, err := parseBacklogDests(*backlogDest)
		if err != nil {
			log.Fatalf("-backlog-dest: %v", err)
		}
		backlogBench(ctx, *binDir, *backlogRows, dests, *backlogIcebergMemory, *backlogDuckDBMemory)
		return
	}
	if *serveOnly {
		serveBench(ctx, *binDir, so)
		return
	}
	if *queryOnly {
		queryBench(ctx, *binDir, *queryRows, *queryWAL, 7)
		return
	}
	if *myOnly {
		mysqlBench(ctx, *binDir, my)
		return
	}
	if *pgOnly {
		postgresBench(ctx, *binDir, pg)
		return
	}
	fmt.Printf("# skippr benchmarks — %s, %d cores, %s\n\n", time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.Version())
	fmt.Println("| benchmark | rows | rows/s | MB/s | notes |")
	fmt.Println("|---|---:|---:|---:|---|")
	settings := []byte(fmt.Sprintf(`{"seed": 1, "rows": %d, "batch_size": 65536}`, *rows))

	inRows, inBytes, inDur := inProcess(ctx, settings)
	row("datagen batches, in-process (baseline)", inRows, inBytes, inDur, "generate + Arrow IPC encode, no boundary")
	bRows, bBytes, bDur := boundary(ctx, filepath.Join(*binDir, "skippr-plugin-datagen"), settings)
	row("datagen → host across the plugin boundary", bRows, bBytes, bDur, fmt.Sprintf("go-plugin gRPC on a private Unix socket, 1 MiB chunks; %.0f%% of in-process", 100*float64(bRows)/bDur.Seconds()/(float64(inRows)/inDur.Seconds())))

	e2e(ctx, *binDir, *e2eRows)
	for _, backend := range []string{"local", "s3"} {
		httpLoad(ctx, *binDir, backend, pipeline.DefaultMaxDelay, *httpClients, *httpRequests, 50)
	}
	fmt.Printf("\npeak RSS: bench process (engine side) %s, plugin processes (largest) %s\n", mib(peakRSS()), mib(childrenPeakRSS()))
	// Last: its server's processes would count in the children's peak RSS above.
	if *pgRun {
		postgresBench(ctx, *binDir, pg)
	}
	if *myRun {
		mysqlBench(ctx, *binDir, my)
	}
	if *queryRun {
		queryBench(ctx, *binDir, *queryRows, *queryWAL, 7)
	}
}

func row(name string, rows, bytes int64, d time.Duration, note string) {
	mbs := "—"
	if bytes > 0 {
		mbs = fmt.Sprintf("%.1f", float64(bytes)/d.Seconds()/1e6)
	}
	fmt.Printf("| %s | %d | %.0f | %s | %s |\n", name, rows, float64(rows)/d.Seconds(), mbs, note)
}

// countingEmitter encodes like the plugin side does, and stops reading when the source says it is idle.
type countingEmitter struct {
	rows, bytes int64
	cancel      func()
}

func (e *countingEmitter) Batch(_ context.Context, _ string, rec arrow.RecordBatch) error {
	b, err := protocol.EncodeRecord(memory.DefaultAllocator, rec)
	if err != nil {
		return err
	}
	e.rows += rec.NumRows()
	e.bytes += int64(len(b))
	return nil
}
func (e *countingEmitter) SchemaChange(context.Context, serve.Stream) error { return nil }
func (e *countingEmitter) Truncate(context.Context, string) error           { return nil }
func (e *countingEmitter) Resnapshot(context.Context, string, bool) error   { return nil }
func (e *countingEmitter) Checkpoint(_ context.Context, cp serve.Checkpoint) error {
	if cp.Idle {
		e.cancel()
	}
	return nil
}

func inProcess(ctx context.Context, settings []byte) (int64, int64, time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e := &countingEmitter{cancel: cancel}
	start := time.Now()
	src := &gen.Source{Version: "bench"}
	if err := src.Read(ctx, serve.ReadRequest{Settings: settings}, e); err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
	return e.rows, e.bytes, time.Since(start)
}

func startPlugin(ctx context.Context, path string) *client.Client {
	b, err := os.ReadFile(path)
	if err != nil {
		log.Fatalf("%v (run `make build` first)", err)
	}
	sum := sha256.Sum256(b)
	cfg := client.Config{Path: path, SHA256: sum[:]}
	if prof := os.Getenv("SKIPPR_PLUGIN_CPUPROFILE"); prof != "" {
		// The plugin writes its CPU profile there when stopped (plugins/mysql has the hook); the last one wins.
		cfg.Env = []string{"SKIPPR_PLUGIN_CPUPROFILE=" + prof}
	}
	if prof := os.Getenv("SKIPPR_PLUGIN_HEAP_PROFILE"); prof != "" {
		// Each plugin writes PREFIX.<pid>.<n> on SIGUSR1 and PREFIX.<pid> at a clean exit (serve.HeapProfileEnv).
		cfg.Env = append(cfg.Env, "SKIPPR_PLUGIN_HEAP_PROFILE="+prof)
	}
	c, err := client.Start(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	return c
}

func boundary(ctx context.Context, bin string, settings []byte) (int64, int64, time.Duration) {
	c := startPlugin(ctx, bin)
	defer c.Kill()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	rs, err := c.Read(ctx, settings, nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	var rows, bytes int64
	for {
		m, err := rs.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		if m.Batch != nil {
			rows += m.Batch.Rows
			bytes += int64(len(m.Batch.IPC))
		}
		if m.Checkpoint != nil && m.Checkpoint.Idle {
			break
		}
	}
	return rows, bytes, time.Since(start)
}

// e2e runs datagen → local WAL → testdest, once with apply paused (the ledger alone) and once end to end.
func e2e(ctx context.Context, binDir string, rows int64) {
	settings := []byte(fmt.Sprintf(`{"seed": 2, "rows": %d, "batch_size": 10000, "update_ratio": 0.2, "delete_ratio": 0.05}`, rows))
	for _, paused := range []bool{true, false} {
		src := startPlugin(ctx, filepath.Join(binDir, "skippr-plugin-datagen"))
		dst := startPlugin(ctx, filepath.Join(binDir, "skippr-plugin-testdest"))
		walDir, _ := os.MkdirTemp("", "skippr-bench-wal-")
		outDir, _ := os.MkdirTemp("", "skippr-bench-out-")
		l, err := wal.Open(ctx, "file://"+walDir, wal.Options{})
		if err != nil {
			log.Fatal(err)
		}
		if err := l.Acquire(ctx); err != nil {
			log.Fatal(err)
		}
		var last pipeline.Status
		start := time.Now()
		err = pipeline.Run(ctx, pipeline.Config{
			Name:         "bench",
			Source:       pipeline.Endpoint[pipeline.Source]{Name: "gen", Plugin: connector.Attach(src, settings)},
			Destinations: []pipeline.Endpoint[pipeline.Destination]{{Name: "sink", Plugin: connector.Attach(dst, []byte(fmt.Sprintf(`{"dir": %q}`, outDir)))}},
			Log:          l, ExactlyOnce: true, ApplyPaused: paused, Once: true,
			OnStatus: func(s pipeline.Status) { last = s },
		})
		d := time.Since(start)
		if err != nil {
			log.Fatal(err)
		}
		l.Close()
		src.Kill()
		dst.Kill()
		os.RemoveAll(walDir)
		os.RemoveAll(outDir)
		name, note := "datagen → WAL (local, apply paused)", fmt.Sprintf("%d WAL entries, default group commit", last.WAL.LastCommitted)
		if !paused {
			name, note = "datagen → WAL → testdest (end to end)", "testdest JSON-encodes every row and fsyncs each apply; 20% updates, 5% deletes"
		}
		row(name, last.RowsCommitted, 0, d, note)
	}
}

func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func childrenPeakRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return ru.Maxrss << 10
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

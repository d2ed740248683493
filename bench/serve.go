package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight/flightsql"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/skippr-dev/skippr/engine/lakequery"
	"github.com/skippr-dev/skippr/engine/queryclient"
)

// serveOptions are the serve benchmark's flags.
type serveOptions struct {
	rows, walRows int64
	runs          int           // point lookups for p50/p99, and runs of each aggregate
	clients       int           // concurrent clients of the throughput run
	duration      time.Duration // of the throughput run
}

var serveAddrLog = regexp.MustCompile(`msg="serving Flight SQL" addr=(\S+)`)

// serveBench measures `skippr serve` over the query benchmark's lake (rows in the lake, walRows events in
// the WAL): a point lookup's p50/p99 over Flight SQL (arrow-go's client, Execute + DoGet, every batch read),
// the one-shot `skippr query` answered through the server, an aggregate over lake + WAL beside the same
// aggregate over the lake alone (the baseline: DuckDB reading the same Parquet files, without the WAL merge),
// the queries/s of concurrent clients, and the server's RSS.
func serveBench(ctx context.Context, binDir string, o serveOptions) {
	ql := buildQueryLake(ctx, binDir, o.rows, o.walRows)
	defer os.RemoveAll(ql.dir)

	// A generous statement limit: on a loaded machine the aggregate over 10M rows passed the default minute.
	// At debug level the server logs each statement's timings (query done: wal, plan, send, engine), which the
	// point lookups' breakdown below is made of.
	srv := ql.cmd("--log-level", "debug", "serve", "--addr", "127.0.0.1:0", "--query-timeout", "10m")
	srv.Cancel = func() error { return srv.Process.Signal(syscall.SIGTERM) }
	stderr, err := srv.StderrPipe()
	if err != nil {
		log.Fatal(err)
	}
	started := time.Now()
	if err := srv.Start(); err != nil {
		log.Fatal(err)
	}
	addrc := make(chan string, 1)
	var (
		logMu   sync.Mutex
		doneLog []string // the server's "query done" lines, in order
	)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := serveAddrLog.FindStringSubmatch(sc.Text()); m != nil {
				addrc <- m[1]
			}
			if strings.Contains(sc.Text(), `msg="query done"`) {
				logMu.Lock()
				doneLog = append(doneLog, sc.Text())
				logMu.Unlock()
			}
		}
	}()
	doneLines := func() int { logMu.Lock(); defer logMu.Unlock(); return len(doneLog) }
	var addr string
	select {
	case addr = <-addrc:
	case <-time.After(2 * time.Minute):
		log.Fatal("skippr serve did not start within 2 minutes")
	}
	startup := time.Since(started)
	defer func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait() }()

	cl, err := flightsql.NewClient(addr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	lookup := fmt.Sprintf("SELECT * FROM bench.events WHERE id = %d", o.rows/2)
	flightQuery := func(sql string) (int64, time.Duration) {
		start := time.Now()
		info, err := cl.Execute(ctx, sql)
		if err != nil {
			log.Fatalf("Flight SQL %s: %v", sql, err)
		}
		rdr, err := cl.DoGet(ctx, info.Endpoint[0].Ticket)
		if err != nil {
			log.Fatalf("Flight SQL %s: %v", sql, err)
		}
		var n int64
		for rdr.Next() {
			n += rdr.RecordBatch().NumRows()
		}
		if err := rdr.Err(); err != nil {
			log.Fatalf("Flight SQL %s: %v", sql, err)
		}
		rdr.Release()
		return n, time.Since(start)
	}
	qc, err := queryclient.Dial(addr, "")
	if err != nil {
		log.Fatal(err)
	}
	defer qc.Close()
	action := func(sql string, asOfLake bool) (string, time.Duration) {
		var b strings.Builder
		start := time.Now()
		if _, err := qc.Run(ctx, lakequery.Request{SQL: sql, Format: "csv", AsOfLake: asOfLake}, &b); err != nil {
			log.Fatalf("%s (as of lake %v): %v", sql, asOfLake, err)
		}
		return b.String(), time.Since(start)
	}

	flightQuery(lookup) // warm: the first statement pays for the engine's first plan
	var lookups []time.Duration
	from := doneLines()
	for i := 0; i < o.runs; i++ {
		_, d := flightQuery(lookup)
		lookups = append(lookups, d)
	}
	lp50, lp99 := percentiles(lookups)
	time.Sleep(100 * time.Millisecond) // the last line reaches the scanner
	logMu.Lock()
	breakdown := spanMedians(doneLog[from:])
	logMu.Unlock()
	var oneShot []time.Duration
	for i := 0; i < 7; i++ {
		_, d := ql.run("query", "--server", addr, "--format", "csv", lookup)
		oneShot = append(oneShot, d)
	}
	os50, _ := percentiles(oneShot)
	var local []time.Duration
	for i := 0; i < 3; i++ {
		_, d := ql.run("query", "--no-server", "--format", "csv", lookup)
		local = append(local, d)
	}
	lo50, _ := percentiles(local)

	const agg = "SELECT count(*), sum(amount), count(DISTINCT name), max(ts) FROM bench.events"
	var merged, lake []time.Duration
	var mergedOut, lakeOut string
	for i := 0; i < o.runs/10+3; i++ { // alternate, so drift in the machine's load touches both alike
		out, d := action(agg, false)
		merged, mergedOut = append(merged, d), out
		out, d = action(agg, true)
		lake, lakeOut = append(lake, d), out
	}
	m50, _ := percentiles(merged)
	l50, _ := percentiles(lake)

	var done atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(o.duration)
	tstart := time.Now()
	for c := 0; c < o.clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(c); time.Now().Before(deadline); i++ {
				flightQuery(fmt.Sprintf("SELECT * FROM bench.events WHERE id = %d", (i*7919)%o.rows+1))
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	qps := float64(done.Load()) / time.Since(tstart).Seconds()
	rss, hwm := procMem(srv.Process.Pid)
	var prss int64
	for _, child := range children(srv.Process.Pid) {
		r, _ := procMem(child)
		prss += r
	}
	load, _ := os.ReadFile("/proc/loadavg")

	fmt.Printf("\n`skippr serve` over a %d-row lake table (built in %s) with %d events unapplied in the WAL; the server started (plugins running) in %s; load average at the end: %s\n\n",
		o.rows, ql.load.Round(time.Second), o.walRows, startup.Round(time.Millisecond), strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Println("| measurement | skippr serve | baseline (same run) | ratio |")
	fmt.Println("|---|---:|---:|---:|")
	fmt.Printf("| point lookup over Flight SQL, p50 / p99 of %d | %s / %s | `skippr query` starting its plugins, p50 of 3: %s | %.3f× |\n",
		o.runs, lp50.Round(100*time.Microsecond), lp99.Round(100*time.Microsecond), lo50.Round(time.Millisecond), lp50.Seconds()/lo50.Seconds())
	fmt.Printf("| point lookup, the whole `skippr query --server` command, p50 of 7 | %s | the same, starting its plugins: %s | %.3f× |\n",
		os50.Round(time.Millisecond), lo50.Round(time.Millisecond), os50.Seconds()/lo50.Seconds())
	fmt.Printf("| aggregate (count, sum, count distinct, max) over lake + WAL, p50 of %d | %s | lake alone, DuckDB over the same Parquet files: %s (answers differ: %v) | %.2f× |\n",
		len(merged), m50.Round(time.Millisecond), l50.Round(time.Millisecond), mergedOut != lakeOut, m50.Seconds()/l50.Seconds())
	fmt.Printf("| point lookup in the server's log (p50 of each part): %s | | | |\n", breakdown)
	fmt.Printf("| %d concurrent clients, point lookups for %s (--max-concurrent 4) | %.0f queries/s | | |\n", o.clients, o.duration, qps)
	fmt.Printf("| RSS after the run: skippr-serve (peak) / its plugins | %d MB (%d MB) / %d MB | | |\n", rss>>20, hwm>>20, prss>>20)
}

// spanKeys are the parts of a statement's time the server logs at debug (queryserve's timingAttrs), and
// its whole time as the server saw it.
var spanKeys = []string{"time", "wal", "plan", "send", "engine_first_byte", "engine"}

// spanMedians is the median of each of spanKeys over the server's "query done" lines.
func spanMedians(lines []string) string {
	var parts []string
	for _, k := range spanKeys {
		re := regexp.MustCompile(`\s` + k + `=(\S+)`)
		var ds []time.Duration
		for _, l := range lines {
			if m := re.FindStringSubmatch(l); m != nil {
				if d, err := time.ParseDuration(m[1]); err == nil {
					ds = append(ds, d)
				}
			}
		}
		if len(ds) == 0 {
			continue
		}
		p50, _ := percentiles(ds)
		parts = append(parts, fmt.Sprintf("%s %s", k, p50.Round(10*time.Microsecond)))
	}
	if len(parts) == 0 {
		return "(the server logged no timings)"
	}
	return strings.Join(parts, ", ")
}

// procMem is a process's resident set and its peak, in bytes (0 when unreadable).
func procMem(pid int) (rss, hwm int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			hwm = kb << 10
		}
	}
	return rss, hwm
}

// children are a process's child processes (the plugins of skippr-serve).
func children(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

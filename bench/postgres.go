package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// pgOptions size the Postgres source benchmarks.
type pgOptions struct {
	rows       int64         // snapshot table
	repeat     int           // drains of the streaming backlog, each for the baseline and the plugin
	streamRows int64         // backlog drained at full speed
	rate       int           // rows/s of the fixed-rate inserter
	duration   time.Duration // of the fixed-rate load
	txRows     int           // rows per inserted transaction while streaming
	snapOnly   bool          // stop after the snapshot rows
	liveOnly   bool          // run only the fixed-rate phases
	rates      []int         // rows/s of the fixed-rate phases, one phase pair each
	lake       bool          // also run the snapshot into the Iceberg lake, coalesced and not
	codecs     []string      // WAL compressions the snapshot runs with, each once per repeat ("": the default)
}

// pgColumns is the benchmark table: six columns of the kinds a CDC source meets most (FIELD-NOTES measured
// COPY with the same set).
const pgColumns = `id bigint, name text, amount numeric(12,2), at timestamptz DEFAULT clock_timestamp(), doc jsonb, flag bool`

// pgRowsSQL produces the rows g of a generate_series as the table's columns.
const pgRowsSQL = `SELECT g, 'name-' || g, (g % 1000000) / 100.0, clock_timestamp(), jsonb_build_object('k', g % 100, 'tag', 'bench'), g % 2 = 0 FROM generate_series($1::bigint, $2::bigint) g`

// postgresBench measures the Postgres source plugin against what the server gives a client directly: the
// snapshot beside binary COPY of the same table, streaming beside a pglogrepl client on its own slot.
func postgresBench(ctx context.Context, binDir string, o pgOptions) {
	if err := runPostgresBench(ctx, binDir, o); err != nil {
		log.Fatal(err)
	}
}

// runPostgresBench returns errors rather than exiting, so its deferred calls stop the server and remove the
// initdb template on every path.

func runPostgresBench(ctx context.Context, binDir string, o pgOptions) error {
	bin := filepath.Join(binDir, "skippr-plugin-postgres")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%w (run `make build` first)", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	srv, err := pgtest.Start(sctx, pgtest.Options{Settings: map[string]string{
		// The 10M-row load writes a few GB of WAL; without room for it, checkpoints would run through the
		// measured parts.
		"max_wal_size": "16GB",
	}})
	cancel()
	defer pgtest.RemoveTemplate()
	if err != nil {
		return fmt.Errorf("start postgres (apt-get install -y %s): %w", pgtest.AptPackage, err)
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			log.Printf("stop postgres: %v", err)
		}
	}()
	pg := &pgBench{srv: srv, db: "bench", bin: bin, opts: o}
	if err := pg.admin(ctx, `CREATE DATABASE bench`); err != nil {
		return err
	}
	var version string
	if err := pg.queryRow(ctx, `SHOW server_version`, &version); err != nil {
		return err
	}

	fmt.Printf("\n## Postgres source — PostgreSQL %s on 127.0.0.1 (testkit/pgtest: fsync=off), load average %s\n\n", version, loadAverage())
	fmt.Println("| benchmark | rows | rows/s | MB/s | notes |")
	fmt.Println("|---|---:|---:|---:|---|")
	if o.liveOnly {
		if err := pg.streamTable(ctx); err != nil {
			return err
		}
		return pg.live(ctx)
	}
	loadDur, err := pg.loadSnapshotTable(ctx)
	if err != nil {
		return err
	}
	row("load: INSERT … SELECT generate_series, then primary key and VACUUM (FREEZE, ANALYZE)", o.rows, 0, loadDur, "setup, not a benchmark: so both reads below see frozen, hinted pages")

	// COPY and the snapshot alternate, o.repeat times each: on a shared 2-core machine either one alone
	// moved by a fifth from run to run, so one pair could make the ratio say anything from 62% to 110%.
	var cps []pgResult
	sns := make([][]pgResult, len(o.codecs))
	for i := range max(o.repeat, 1) {
		resetPeakRSS()
		cp, err := pg.copyBaseline(ctx)
		if err != nil {
			return err
		}
		cp.engineRSS = peakRSS()
		cps = append(cps, cp)
		for c, codec := range o.codecs {
			resetPeakRSS()
			slot := fmt.Sprintf("bench_snap_%d_%d", i, c)
			sn, err := pg.snapshotToWAL(ctx, slot, codec)
			if err != nil {
				return err
			}
			if err := pg.dropSlot(ctx, slot); err != nil {
				return err
			}
			sns[c] = append(sns[c], sn)
		}
	}
	cp := median(cps)
	row("`COPY snap TO STDOUT (FORMAT binary)` through pgx (**baseline**)", cp.rows, cp.bytes, cp.dur, fmt.Sprintf("median of %d (%s rows/s), alternating with the snapshot's; the read limit: one backend; CPU µs/row: backend %.1f, client %.1f; bench process peak RSS %s",
		len(cps), rateRange(cps), perRow(cp.backendCPU, cp.rows), perRow(cp.engineCPU, cp.rows), mib(cp.engineRSS)))
	for c, codec := range o.codecs {
		sn := median(sns[c])
		row("Postgres snapshot → WAL (local, apply paused"+codecNote(codec)+")", sn.rows, 0, sn.dur,
			fmt.Sprintf("median of %d (%s rows/s); **%.0f%% of COPY**; CPU µs/row: backends %.1f, plugin %.1f, engine %.2f; %d WAL entries, %s stored (%.1f B/row); peak RSS engine %s, plugin %s",
				len(sns[c]), rateRange(sns[c]), 100*rate(sn)/rate(cp),
				perRow(sn.backendCPU, sn.rows), perRow(sn.pluginCPU, sn.rows), perRow(sn.engineCPU, sn.rows), sn.entries, mib(sn.walBytes), float64(sn.walBytes)/float64(sn.rows), mib(sn.engineRSS), mib(sn.pluginRSS)))
	}

	if o.lake {
		if err := pg.lakeBench(ctx, binDir, cp); err != nil {
			return err
		}
	}
	if o.snapOnly {
		return nil
	}
	if err := pg.streamTable(ctx); err != nil {
		return err
	}
	raws, sks, err := pg.streamMax(ctx)
	if err != nil {
		return err
	}
	rawMax, skMax := median(raws), median(sks)
	row(fmt.Sprintf("pglogrepl client, backlog of %d-row transactions (**baseline**)", o.txRows), rawMax.rows, rawMax.bytes, rawMax.dur,
		fmt.Sprintf("median of %d drains (%s rows/s); pgoutput proto 1 received and parsed (`pglogrepl.Parse`), no WAL; MB/s counts XLogData bytes; CPU µs/row: client %.1f, walsender %.1f; bench process peak RSS %s",
			len(raws), rateRange(raws), perRow(rawMax.engineCPU, rawMax.rows), perRow(rawMax.walsenderCPU, rawMax.rows), mib(rawMax.engineRSS)))
	row(fmt.Sprintf("Postgres stream → WAL, backlog of %d-row transactions", o.txRows), skMax.rows, 0, skMax.dur,
		fmt.Sprintf("median of %d drains (%s rows/s), alternating with the baseline's; %.0f%% of pglogrepl; CPU µs/row: plugin %.1f, engine %.1f, walsender %.1f; %d WAL entries; peak RSS engine %s, plugin %s",
			len(sks), rateRange(sks), 100*rate(skMax)/rate(rawMax), perRow(skMax.pluginCPU, skMax.rows), perRow(skMax.engineCPU, skMax.rows), perRow(skMax.walsenderCPU, skMax.rows),
			skMax.entries, mib(skMax.engineRSS), mib(skMax.pluginRSS)))

	return pg.live(ctx)
}

// live measures commit → WAL-durable latency at each fixed rate, beside a pglogrepl client at the same rate.
func (pg *pgBench) live(ctx context.Context) error {
	o := pg.opts
	for _, r := range o.rates {
		o.rate = r
		pg.opts.rate = r
		if err := pg.liveAt(ctx, o); err != nil {
			return err
		}
	}
	fmt.Printf("\nload average after the Postgres benchmarks: %s\n", loadAverage())
	return nil
}

func (pg *pgBench) liveAt(ctx context.Context, o pgOptions) error {
	rawLive, err := pg.streamLiveRaw(ctx)
	if err != nil {
		return err
	}
	row(fmt.Sprintf("pglogrepl client, inserts at %d rows/s for %s (**baseline**)", o.rate, o.duration), rawLive.rows, 0, rawLive.dur,
		fmt.Sprintf("commit → Commit message received: p50 %s, p99 %s, max %s", ms(rawLive.p50), ms(rawLive.p99), ms(rawLive.max)))
	skLive, err := pg.streamLiveSkippr(ctx)
	if err != nil {
		return err
	}
	row(fmt.Sprintf("Postgres stream → WAL, inserts at %d rows/s for %s", o.rate, o.duration), skLive.rows, 0, skLive.dur,
		fmt.Sprintf("commit → WAL commit record durable: p50 %s, p99 %s, max %s (of which server commit → plugin checkpoint p50 %s, p99 %s; group commit max_delay %s; WAL commit call p50 %s, p99 %s); CPU µs/row: plugin %.1f, engine %.1f; %d WAL entries; peak RSS engine %s, plugin %s",
			ms(skLive.p50), ms(skLive.p99), ms(skLive.max), ms(skLive.lagP50), ms(skLive.lagP99), pipeline.DefaultMaxDelay, ms(skLive.commitP50), ms(skLive.commitP99),
			perRow(skLive.pluginCPU, skLive.rows), perRow(skLive.engineCPU, skLive.rows),
			skLive.entries, mib(skLive.engineRSS), mib(skLive.pluginRSS)))
	return nil
}

type pgBench struct {
	srv  *pgtest.Server
	db   string
	bin  string
	opts pgOptions
	// nextID is the next id the streaming inserter uses: every phase inserts rows of its own.
	nextID int64
}

// pgResult is one measured run.
type pgResult struct {
	rows, bytes int64
	dur         time.Duration
	entries     uint64
	walBytes    int64
	engineRSS   int64
	pluginRSS   int64
	// CPU time of the bench process (the engine, or the raw client), the plugin, and the walsender serving
	// the slot: contention on a shared machine moves rows/s, CPU per row much less.
	engineCPU, pluginCPU, walsenderCPU time.Duration
	backendCPU                         time.Duration // the Postgres backends serving the read
	commitP50, commitP99               time.Duration // WAL commit calls
	lagP50, lagP99                     time.Duration // server commit → the plugin's checkpoint
	p50, p99, max                      time.Duration
}

func (pg *pgBench) connect(ctx context.Context, db string) (*pgx.Conn, error) {
	c, err := pgx.Connect(ctx, pg.srv.ConnString(db))
	if err != nil {
		return nil, fmt.Errorf("connect to postgres database %s: %w", db, err)
	}
	return c, nil
}

func (pg *pgBench) admin(ctx context.Context, sql string) error {
	c, err := pg.connect(ctx, "postgres")
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

func (pg *pgBench) exec(ctx context.Context, sql string, args ...any) error {
	c, err := pg.connect(ctx, pg.db)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

func (pg *pgBench) queryRow(ctx context.Context, sql string, dest ...any) error {
	c, err := pg.connect(ctx, pg.db)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if err := c.QueryRow(ctx, sql).Scan(dest...); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// settings are the plugin's source settings for one table and slot.
func (pg *pgBench) settings(table, slot, publication string, snapshot bool) []byte {
	b, _ := json.Marshal(map[string]any{
		"host": pg.srv.Host, "port": pg.srv.Port, "user": "postgres", "database": pg.db, "sslmode": "disable",
		"tables": []string{table}, "slot": slot, "publication": publication, "snapshot": snapshot,
	})
	return b
}

// loadSnapshotTable fills the snapshot table. The key comes after the rows (one index build is faster than
// maintaining it per row), and VACUUM FREEZE sets hint bits and the visibility map, which the first reader
// would otherwise pay for.
func (pg *pgBench) loadSnapshotTable(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	for _, q := range []string{
		`CREATE TABLE snap (` + pgColumns + `)`,
		`INSERT INTO snap ` + strings.Replace(strings.Replace(pgRowsSQL, "$1::bigint", "1", 1), "$2::bigint", strconv.FormatInt(pg.opts.rows, 10), 1),
		`ALTER TABLE snap ADD PRIMARY KEY (id)`,
		`VACUUM (FREEZE, ANALYZE) snap`,
	} {
		if err := pg.exec(ctx, q); err != nil {
			return 0, fmt.Errorf("load the snapshot table: %w", err)
		}
	}
	return time.Since(start), nil
}

type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// copyBaseline is the fastest way a client reads the whole table: binary COPY, one backend.
func (pg *pgBench) copyBaseline(ctx context.Context) (pgResult, error) {
	c, err := pg.connect(ctx, pg.db)
	if err != nil {
		return pgResult{}, err
	}
	defer c.Close(context.Background())
	var w countingWriter
	cpu0 := selfCPU()
	start := time.Now()
	tag, err := c.PgConn().CopyTo(ctx, &w, `COPY snap TO STDOUT (FORMAT binary)`)
	d := time.Since(start)
	if err != nil {
		return pgResult{}, fmt.Errorf("COPY snap TO STDOUT: %w", err)
	}
	return pgResult{rows: tag.RowsAffected(), bytes: w.n, dur: d, engineCPU: selfCPU() - cpu0, backendCPU: procCPU(int(c.PgConn().PID()))}, nil
}

// walRun is a pipeline of the Postgres plugin into a fresh local WAL, apply paused, running until stop
// says so (it sees every status, one per source checkpoint and WAL commit).
type walRun struct {
	res     pgResult
	plugin  *client.Client
	done    chan error
	cancel  context.CancelFunc
	mu      sync.Mutex
	last    pipeline.Status
	changed chan struct{}
	// started is when the pipeline began, after the plugin process started (as the datagen rows time it).
	started time.Time
	cpu0    time.Duration
	log     *timedLog
}

func (pg *pgBench) startWALRun(ctx context.Context, settings []byte, onStatus func(pipeline.Status)) (*walRun, error) {
	return startWALRun(ctx, pg.bin, "bench-postgres", "", settings, nil, onStatus)
}

// startWALRun runs source plugin bin into a fresh local WAL (apply paused). A checkpoint, when given, is
// committed first as an entry without rows, so the source resumes from it as after a restart.
func startWALRun(ctx context.Context, bin, name, compression string, settings, checkpoint []byte, onStatus func(pipeline.Status)) (*walRun, error) {
	walDir, err := os.MkdirTemp("", "skippr-bench-wal-")
	if err != nil {
		return nil, err
	}
	l, err := wal.Open(ctx, "file://"+walDir, wal.Options{Compression: compression})
	if err != nil {
		os.RemoveAll(walDir)
		return nil, fmt.Errorf("open WAL: %w", err)
	}
	if err := l.Acquire(ctx); err != nil {
		l.Close()
		os.RemoveAll(walDir)
		return nil, fmt.Errorf("acquire WAL: %w", err)
	}
	if checkpoint != nil {
		if _, err := l.Commit(ctx, nil, checkpoint); err != nil {
			l.Close()
			os.RemoveAll(walDir)
			return nil, fmt.Errorf("seed the WAL with a checkpoint: %w", err)
		}
	}
	src := startPlugin(ctx, bin)
	rctx, cancel := context.WithCancel(ctx)
	w := &walRun{plugin: src, done: make(chan error, 1), cancel: cancel, changed: make(chan struct{}, 1), started: time.Now(), cpu0: selfCPU(), log: &timedLog{Log: l}}
	go func() {
		err := pipeline.Run(rctx, pipeline.Config{
			Name:   name,
			Source: pipeline.Endpoint[pipeline.Source]{Name: "src", Plugin: connector.Attach(src, settings)},
			Log:    w.log, ExactlyOnce: true, ApplyPaused: true,
			// Every status, so the moment a WAL commit lands is seen when it lands.
			StatusEvery: time.Nanosecond,
			OnStatus: func(s pipeline.Status) {
				if onStatus != nil {
					onStatus(s)
				}
				w.mu.Lock()
				w.last = s
				w.mu.Unlock()
				select {
				case w.changed <- struct{}{}:
				default:
				}
			},
		})
		l.Close()
		if os.Getenv("SKIPPR_BENCH_KEEP_WAL") != "" {
			// For engine/wal's BenchmarkCodecs (SKIPPR_WAL_BENCH_DIR): the segments of a real run.
			log.Printf("kept the WAL of %s at %s", name, walDir)
		} else {
			os.RemoveAll(walDir)
		}
		w.done <- err
	}()
	return w, nil
}

// timedLog notes when each WAL commit returns, that is when its commit record is durable: the moment a
// row's latency ends. The pipeline acknowledges the source and publishes its status only after that.
type timedLog struct {
	pipeline.Log
	mu      sync.Mutex
	rows    int64
	commits []durable
	took    []time.Duration
}

func (t *timedLog) Commit(ctx context.Context, frames []wal.Frame, checkpoint []byte) (wal.CommitRecord, error) {
	start := time.Now()
	rec, err := t.Log.Commit(ctx, frames, checkpoint)
	end := time.Now()
	if err == nil {
		t.mu.Lock()
		for _, n := range rec.Rows {
			t.rows += n
		}
		t.commits = append(t.commits, durable{t.rows, end})
		t.took = append(t.took, end.Sub(start))
		t.mu.Unlock()
	}
	return rec, err
}

// waitRows waits until the WAL holds n rows.
func (w *walRun) waitRows(ctx context.Context, n int64, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		got := w.last.RowsCommitted
		w.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-w.changed:
		case err := <-w.done:
			w.done <- err
			return fmt.Errorf("pipeline ended after %d of %d rows: %v (plugin: %s)", got, n, err, w.plugin.StderrTail())
		case <-deadline:
			return fmt.Errorf("only %d of %d rows in the WAL after %s", got, n, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stop ends the pipeline and the plugin, filling in what the run leaves behind.
// measureFixedRate runs a fixed-rate writer (load) while the run streams into its WAL, waits until the WAL holds
// the last row written, stops the run, and gives each transaction's commit → WAL-durable latency (p50, p99,
// max) and the WAL commits' own p50/p99.
func (w *walRun) measureFixedRate(ctx context.Context, load func() ([]committedTx, error)) (pgResult, error) {
	start := time.Now()
	txs, err := load()
	if err == nil {
		err = w.waitRows(ctx, txs[len(txs)-1].through, 5*time.Minute)
	}
	if stopErr := w.stop(); err == nil {
		err = stopErr
	}
	if err != nil {
		return w.res, err
	}
	res := w.res
	w.log.mu.Lock()
	seen, took := w.log.commits, slices.Clone(w.log.took)
	w.log.mu.Unlock()
	res.dur = seen[len(seen)-1].at.Sub(start)
	if res.p50, res.p99, res.max, err = latencies(txs, seen); err != nil {
		return res, err
	}
	res.commitP50, res.commitP99 = percentiles(took)
	return res, nil
}

func (w *walRun) stop() error {
	w.res.pluginRSS = procPeakRSS(w.plugin.Pid())
	w.res.pluginCPU = procCPU(w.plugin.Pid())
	w.res.engineCPU = selfCPU() - w.cpu0
	w.cancel()
	err := <-w.done
	w.plugin.Kill()
	w.mu.Lock()
	w.res.entries, w.res.walBytes, w.res.rows = w.last.WAL.LastCommitted, w.last.WAL.Bytes, w.last.RowsCommitted
	w.mu.Unlock()
	w.res.engineRSS = peakRSS()
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("pipeline: %w", err)
	}
	return nil
}

// codecNote names a WAL compression in a row's title ("" is the WAL's default).
func codecNote(codec string) string {
	if codec == "" {
		return ""
	}
	return ", WAL " + codec
}

// snapshotToWAL runs the plugin's snapshot of the table into the WAL. The clock stops when the WAL holds
// every row, before the plugin's idle detection at the end of the snapshot.
func (pg *pgBench) snapshotToWAL(ctx context.Context, slot, compression string) (pgResult, error) {
	w, err := startWALRun(ctx, pg.bin, "bench-postgres", compression, pg.settings("public.snap", slot, "bench_snap", true), nil, nil)
	if err != nil {
		return pgResult{}, err
	}
	err = w.waitRows(ctx, pg.opts.rows, time.Hour)
	d := time.Since(w.started)
	w.res.backendCPU = pg.backendsCPU(ctx, "skippr")
	if stopErr := w.stop(); err == nil {
		err = stopErr
	}
	w.res.dur = d
	return w.res, err
}

// streamTable makes the streaming table, its publication and the slots the phases read, before any row is
// inserted, so every reader sees the same transactions from its own slot.
func (pg *pgBench) streamTable(ctx context.Context) error {
	for _, q := range []string{
		`CREATE TABLE strm (` + pgColumns + `, PRIMARY KEY (id))`,
		`CREATE PUBLICATION bench_strm FOR TABLE strm WITH (publish_via_partition_root = true)`,
	} {
		if err := pg.exec(ctx, q); err != nil {
			return err
		}
	}
	pg.nextID = 1
	return nil
}

func (pg *pgBench) createSlot(ctx context.Context, name string) error {
	return pg.exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, name)
}

// insertTx inserts rows [from, from+n) in one transaction and returns when the commit is acknowledged.
func insertTx(ctx context.Context, c *pgx.Conn, from int64, n int) error {
	if _, err := c.Exec(ctx, `INSERT INTO strm `+pgRowsSQL, from, from+int64(n)-1); err != nil {
		return fmt.Errorf("insert rows %d…: %w", from, err)
	}
	return nil
}

// streamMax inserts a backlog of transactions with 2×repeat slots waiting, then drains each slot alone,
// alternating a pglogrepl client and the plugin into the WAL, so drift in the machine's load hits both.
func (pg *pgBench) streamMax(ctx context.Context) (raws, sks []pgResult, err error) {
	for i := range pg.opts.repeat {
		for _, s := range []string{"raw_max_", "skippr_max_"} {
			if err := pg.createSlot(ctx, s+strconv.Itoa(i)); err != nil {
				return nil, nil, err
			}
		}
	}
	c, err := pg.connect(ctx, pg.db)
	if err != nil {
		return nil, nil, err
	}
	n := pg.opts.streamRows / int64(pg.opts.txRows) * int64(pg.opts.txRows)
	for i := int64(0); i < n; i += int64(pg.opts.txRows) {
		if err := insertTx(ctx, c, pg.nextID, pg.opts.txRows); err != nil {
			c.Close(context.Background())
			return nil, nil, err
		}
		pg.nextID += int64(pg.opts.txRows)
	}
	c.Close(context.Background())
	// Autovacuum would otherwise wake up over the fresh rows in the middle of the first reader's run.
	if err := pg.exec(ctx, `VACUUM ANALYZE strm`); err != nil {
		return nil, nil, err
	}
	for i := range pg.opts.repeat {
		slot := "raw_max_" + strconv.Itoa(i)
		resetPeakRSS()
		start, cpu0 := time.Now(), selfCPU()
		raw, err := pg.rawReceive(ctx, slot, n, nil)
		if err != nil {
			return nil, nil, err
		}
		raw.dur, raw.engineCPU, raw.engineRSS = time.Since(start), selfCPU()-cpu0, peakRSS()
		raws = append(raws, raw)
		if err := pg.dropSlot(ctx, slot); err != nil {
			return nil, nil, err
		}

		slot = "skippr_max_" + strconv.Itoa(i)
		resetPeakRSS()
		w, err := pg.startWALRun(ctx, pg.settings("public.strm", slot, "bench_strm", false), nil)
		if err != nil {
			return nil, nil, err
		}
		err = w.waitRows(ctx, n, time.Hour)
		d := time.Since(w.started)
		w.res.walsenderCPU = pg.walsenderCPU(ctx, slot)
		if stopErr := w.stop(); err == nil {
			err = stopErr
		}
		if err != nil {
			return nil, nil, err
		}
		w.res.dur = d
		sks = append(sks, w.res)
		if err := pg.dropSlot(ctx, slot); err != nil {
			return nil, nil, err
		}
	}
	return raws, sks, nil
}

// backendsCPU is the CPU time of the backends of an application (the plugin's pool: the snapshot's
// session, and the heartbeat's).
func (pg *pgBench) backendsCPU(ctx context.Context, application string) time.Duration {
	c, err := pg.connect(ctx, pg.db)
	if err != nil {
		return 0
	}
	defer c.Close(context.Background())
	rows, err := c.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND backend_type = 'client backend'`, application)
	if err != nil {
		return 0
	}
	defer rows.Close()
	var sum time.Duration
	for rows.Next() {
		var pid int32
		if rows.Scan(&pid) == nil {
			sum += procCPU(int(pid))
		}
	}
	return sum
}

// walsenderCPU is the CPU time of the walsender streaming from slot.
func (pg *pgBench) walsenderCPU(ctx context.Context, slot string) time.Duration {
	c, err := pg.connect(ctx, pg.db)
	if err != nil {
		return 0
	}
	defer c.Close(context.Background())
	var pid *int32
	if err := c.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&pid); err != nil || pid == nil {
		return 0
	}
	return procCPU(int(*pid))
}

// percentiles returns p50 and p99 of ds, sorting it.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2], ds[min(len(ds)-1, len(ds)*99/100)]
}

func rate(r pgResult) float64 { return float64(r.rows) / r.dur.Seconds() }

// median is the run with the median rate.
func median(rs []pgResult) pgResult {
	s := slices.Clone(rs)
	sort.Slice(s, func(i, j int) bool { return rate(s[i]) < rate(s[j]) })
	return s[len(s)/2]
}

func rateRange(rs []pgResult) string {
	lo, hi := rate(rs[0]), rate(rs[0])
	for _, r := range rs[1:] {
		lo, hi = min(lo, rate(r)), max(hi, rate(r))
	}
	return fmt.Sprintf("%.0f–%.0f", lo, hi)
}

func perRow(d time.Duration, rows int64) float64 {
	if rows == 0 {
		return 0
	}
	return float64(d) / float64(time.Microsecond) / float64(rows)
}

// procCPU is a process's user + system CPU time so far (/proc/PID/stat, clock ticks of 10 ms).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// selfCPU is this process's user + system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// dropSlot drops a slot once the session that held it has gone.
func (pg *pgBench) dropSlot(ctx context.Context, name string) error {
	var err error
	for range 100 {
		if err = pg.exec(ctx, `SELECT pg_drop_replication_slot($1)`, name); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// rawReceive reads pgoutput from slot until it has seen want inserted rows, calling onCommit (if set) with
// the number of rows received so far at each Commit message. It is what a client gets without skippr: the
// messages parsed, the values left as text.
func (pg *pgBench) rawReceive(ctx context.Context, slot string, want int64, onCommit func(rows int64, at time.Time)) (pgResult, error) {
	var res pgResult
	cfg, err := pgconn.ParseConfig(pg.srv.ConnString(pg.db) + " replication=database")
	if err != nil {
		return res, err
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return res, fmt.Errorf("replication connection: %w", err)
	}
	defer conn.Close(context.Background())
	if err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication, PluginArgs: []string{"proto_version '1'", "publication_names 'bench_strm'"}}); err != nil {
		return res, fmt.Errorf("start replication from %s: %w", slot, err)
	}
	var last pglogrepl.LSN
	status := func() error {
		return pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: last, WALFlushPosition: last, WALApplyPosition: last})
	}
	lastStatus := time.Now()
	// The last insert is not enough: its transaction counts once its Commit message is in.
	for committed := int64(0); committed < want; {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		msg, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			return res, fmt.Errorf("receive from %s after %d rows: %w", slot, res.rows, err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			if e, ok := msg.(*pgproto3.ErrorResponse); ok {
				return res, fmt.Errorf("replication from %s: %w", slot, pgconn.ErrorResponseToPgError(e))
			}
			continue
		}
		switch cd.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if err != nil {
				return res, err
			}
			if pkm.ReplyRequested {
				if err := status(); err != nil {
					return res, err
				}
				lastStatus = time.Now()
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				return res, err
			}
			res.bytes += int64(len(xld.WALData))
			m, err := pglogrepl.Parse(xld.WALData)
			if err != nil {
				return res, fmt.Errorf("parse pgoutput at %s: %w", xld.WALStart, err)
			}
			switch m := m.(type) {
			case *pglogrepl.InsertMessage:
				res.rows++
			case *pglogrepl.CommitMessage:
				last, committed = m.TransactionEndLSN, res.rows
				if onCommit != nil {
					onCommit(res.rows, time.Now())
				}
			}
		}
		if time.Since(lastStatus) > 10*time.Second {
			if err := status(); err != nil {
				return res, err
			}
			lastStatus = time.Now()
		}
	}
	res.walsenderCPU = pg.walsenderCPU(ctx, slot)
	return res, nil
}

// committedTx is one inserted transaction: rows up to through (counted from the phase's first) were
// acknowledged as committed at at.
type committedTx struct {
	through int64
	at      time.Time
}

// fixedRate inserts rate rows/s for the configured duration in transactions of txRows, each at its own
// scheduled time (late ones go at once, so a slow reader cannot slow the load), and returns the commits.
func (pg *pgBench) fixedRate(ctx context.Context) ([]committedTx, time.Duration, error) {
	c, err := pg.connect(ctx, pg.db)
	if err != nil {
		return nil, 0, err
	}
	defer c.Close(context.Background())
	o := pg.opts
	txs := int(int64(o.rate) * int64(o.duration/time.Millisecond) / 1000 / int64(o.txRows))
	every := time.Duration(float64(time.Second) * float64(o.txRows) / float64(o.rate))
	out := make([]committedTx, 0, txs)
	start := time.Now()
	for i := range txs {
		if d := time.Until(start.Add(time.Duration(i) * every)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil, 0, ctx.Err()
			}
		}
		if err := insertTx(ctx, c, pg.nextID, o.txRows); err != nil {
			return nil, 0, err
		}
		pg.nextID += int64(o.txRows)
		out = append(out, committedTx{through: int64(i+1) * int64(o.txRows), at: time.Now()})
	}
	return out, time.Since(start), nil
}

// durable is when the reader first had at least rows rows.
type durable struct {
	rows int64
	at   time.Time
}

// latencies pairs each transaction with the first moment its last row was through, and returns p50, p99
// and the maximum.
func latencies(txs []committedTx, seen []durable) (p50, p99, worst time.Duration, err error) {
	if len(txs) == 0 {
		return 0, 0, 0, errors.New("no transactions")
	}
	var ls []time.Duration
	j := 0
	for _, tx := range txs {
		for j < len(seen) && seen[j].rows < tx.through {
			j++
		}
		if j == len(seen) {
			return 0, 0, 0, fmt.Errorf("rows through %d never arrived", tx.through)
		}
		// A reader can see a commit before the inserter hears it acknowledged: that is zero latency.
		ls = append(ls, max(seen[j].at.Sub(tx.at), 0))
	}
	sort.Slice(ls, func(a, b int) bool { return ls[a] < ls[b] })
	pct := func(p float64) time.Duration { return ls[min(len(ls)-1, int(p*float64(len(ls))))] }
	return pct(0.50), pct(0.99), ls[len(ls)-1], nil
}

// streamLiveRaw runs the fixed-rate load with a pglogrepl client reading its slot meanwhile.
func (pg *pgBench) streamLiveRaw(ctx context.Context) (pgResult, error) {
	if err := pg.createSlot(ctx, "raw_live"); err != nil {
		return pgResult{}, err
	}
	want := int64(pg.opts.rate) * int64(pg.opts.duration/time.Millisecond) / 1000 / int64(pg.opts.txRows) * int64(pg.opts.txRows)
	var (
		mu   sync.Mutex
		seen []durable
	)
	type rawDone struct {
		res pgResult
		err error
	}
	done := make(chan rawDone, 1)
	go func() {
		res, err := pg.rawReceive(ctx, "raw_live", want, func(rows int64, at time.Time) {
			mu.Lock()
			seen = append(seen, durable{rows, at})
			mu.Unlock()
		})
		done <- rawDone{res, err}
	}()
	if err := pg.waitSlotActive(ctx, "raw_live"); err != nil {
		return pgResult{}, err
	}
	start := time.Now()
	txs, _, err := pg.fixedRate(ctx)
	if err != nil {
		return pgResult{}, err
	}
	rd := <-done
	if rd.err != nil {
		return pgResult{}, rd.err
	}
	res := rd.res
	mu.Lock()
	res.dur = seen[len(seen)-1].at.Sub(start)
	res.p50, res.p99, res.max, err = latencies(txs, seen)
	mu.Unlock()
	if err != nil {
		return res, err
	}
	return res, pg.dropSlot(ctx, "raw_live")
}

// streamLiveSkippr runs the fixed-rate load with the plugin streaming into the WAL meanwhile. A row is
// durable when the WAL Commit of the entry holding it returns (timedLog).
func (pg *pgBench) streamLiveSkippr(ctx context.Context) (pgResult, error) {
	if err := pg.createSlot(ctx, "skippr_live"); err != nil {
		return pgResult{}, err
	}
	resetPeakRSS()
	// Each of the plugin's checkpoints says how long after the server's commit it was made (lag_ms): the
	// part of the latency before the engine.
	var (
		lagMu  sync.Mutex
		lags   []time.Duration
		lastCP string
	)
	w, err := pg.startWALRun(ctx, pg.settings("public.strm", "skippr_live", "bench_strm", false), func(s pipeline.Status) {
		lagMu.Lock()
		// A status comes with every checkpoint and every WAL commit; count each transaction's checkpoint once.
		if s.Source.Checkpoint != lastCP && !s.Source.Idle {
			lags = append(lags, time.Duration(s.Source.LagMS)*time.Millisecond)
		}
		lastCP = s.Source.Checkpoint
		lagMu.Unlock()
	})
	if err != nil {
		return pgResult{}, err
	}
	if err := pg.waitSlotActive(ctx, "skippr_live"); err != nil {
		w.stop()
		return pgResult{}, err
	}
	res, err := w.measureFixedRate(ctx, func() ([]committedTx, error) {
		txs, _, err := pg.fixedRate(ctx)
		return txs, err
	})
	if err != nil {
		return res, err
	}
	lagMu.Lock()
	res.lagP50, res.lagP99 = percentiles(lags)
	lagMu.Unlock()
	return res, pg.dropSlot(ctx, "skippr_live")
}

// waitSlotActive waits until a session streams from the slot, so no inserted row precedes the reader.
func (pg *pgBench) waitSlotActive(ctx context.Context, slot string) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var active bool
		c, err := pg.connect(ctx, pg.db)
		if err != nil {
			return err
		}
		err = c.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		c.Close(context.Background())
		if err != nil {
			return fmt.Errorf("slot %s: %w", slot, err)
		}
		if active {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no session streams from slot %s after a minute", slot)
}

// resetPeakRSS restarts the process's VmHWM (Linux ≥ 4.0), so each phase reports its own peak.
// The heap an earlier phase left is returned first, or it would count as this phase's.
func resetPeakRSS() {
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// procPeakRSS is another process's VmHWM.
func procPeakRSS(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

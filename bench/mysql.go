package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"vitess.io/vitess/go/mysql"
	"vitess.io/vitess/go/mysql/binlog"
	"vitess.io/vitess/go/mysql/replication"
	"vitess.io/vitess/go/sqltypes"
	querypb "vitess.io/vitess/go/vt/proto/query"

	"github.com/skippr-dev/skippr/plugins/mysql/source"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// myOptions size the MySQL source benchmarks.
type myOptions struct {
	rows       int64         // snapshot tables, in all
	tables     int           // snapshot tables
	streamRows int64         // binlog backlog
	repeat     int           // runs of each measurement and its baseline, alternating (medians are reported)
	rate       int           // rows/s of the fixed-rate inserter (0: no live run)
	duration   time.Duration // of the fixed-rate load
	txRows     int           // rows per inserted transaction of the fixed-rate load
	codecs     []string      // WAL compressions the snapshot runs with, each once per repeat ("": the default)
	stream     bool          // also run the binlog stream benchmarks
}

// myColumns is the benchmark table: the FIELD-NOTES six-column shape, as MariaDB types.
const myColumns = `id bigint PRIMARY KEY, name varchar(40), amount decimal(12,2), at datetime(6), doc json, flag bool`

// myRowsSQL produces rows [from, to] of the table from MariaDB's sequence engine.
const myRowsSQL = `SELECT seq, concat('name-', seq), (seq %% 1000000) / 100.0, now(6), json_object('k', seq %% 100, 'tag', 'bench'), seq %% 2 = 0 FROM bench.seq_%d_to_%d`

// mysqlBench measures the MySQL source plugin against what the server gives a client of the same driver
// directly: the snapshot beside one streamed `SELECT *` of the table, the binlog stream beside a raw vitess
// dump client decoding every cell of the same events.
func mysqlBench(ctx context.Context, binDir string, o myOptions) {
	if err := runMySQLBench(ctx, binDir, o); err != nil {
		log.Fatal(err)
	}
}

type myBench struct {
	srv  *mysqltest.Server
	db   *sql.DB
	bin  string
	opts myOptions
	// nextID is the next id the fixed-rate inserter uses: every run inserts rows of its own.
	nextID int64
	// serverPID is mariadbd's, whose CPU each read costs the server (0 when unknown).
	serverPID int
}

// serverCPU is the server process's CPU time so far: on two cores its share decides how much is left for
// the client, so a read's rows/s depends on it.
func (m *myBench) serverCPU() time.Duration {
	if m.serverPID == 0 {
		return 0
	}
	return procCPU(m.serverPID)
}

func runMySQLBench(ctx context.Context, binDir string, o myOptions) error {
	bin := filepath.Join(binDir, "skippr-plugin-mysql")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%w (run `make build` first)", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	srv, err := mysqltest.Start(sctx, mysqltest.Options{Settings: map[string]string{"innodb_buffer_pool_size": "512M", "max_binlog_size": "1G"}})
	cancel()
	if err != nil {
		return fmt.Errorf("start mariadb (apt-get install -y --no-install-recommends %s): %w", mysqltest.AptPackage, err)
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			log.Printf("stop mariadb: %v", err)
		}
	}()
	db, err := sql.Open("mysql", srv.DSN("", "root", ""))
	if err != nil {
		return err
	}
	defer db.Close()
	m := &myBench{srv: srv, db: db, bin: bin, opts: o, nextID: 1}
	var version, pidFile string
	if err := db.QueryRowContext(ctx, `SELECT version(), @@pid_file`).Scan(&version, &pidFile); err != nil {
		return err
	}
	if b, err := os.ReadFile(pidFile); err == nil {
		m.serverPID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	fmt.Printf("\n## MySQL source — MariaDB %s on 127.0.0.1 (testkit/mysqltest: no binlog or redo fsync), load average %s\n\n", version, loadAverage())
	fmt.Println("| benchmark | rows | rows/s | MB/s | notes |")
	fmt.Println("|---|---:|---:|---:|---|")
	start := time.Now()
	if err := m.exec(ctx, `CREATE DATABASE bench; CREATE TABLE bench.stream (`+myColumns+`); CREATE TABLE bench.live (`+myColumns+`)`); err != nil {
		return err
	}
	m.opts.tables = max(o.tables, 1)
	per := o.rows / int64(m.opts.tables)
	for i, name := range m.snapTables() {
		if err := m.exec(ctx, `CREATE TABLE bench.`+name+` (`+myColumns+`)`); err != nil {
			return err
		}
		to := per * int64(i+1)
		if i == m.opts.tables-1 {
			to = o.rows
		}
		if err := m.fill(ctx, name, per*int64(i)+1, to); err != nil {
			return err
		}
	}
	row("load: INSERT … SELECT FROM seq_1_to_N, 1M-row transactions", o.rows, 0, time.Since(start), fmt.Sprintf("setup, not a benchmark; %d tables", m.opts.tables))

	var sels []pgResult
	sns := make([][]pgResult, len(o.codecs))
	for range max(o.repeat, 1) {
		resetPeakRSS()
		srv0 := m.serverCPU()
		sel, err := m.selectBaseline(ctx)
		if err != nil {
			return err
		}
		sel.engineRSS = peakRSS()
		sel.backendCPU = m.serverCPU() - srv0
		sels = append(sels, sel)
		for c, codec := range o.codecs {
			srv1 := m.serverCPU()
			sn, err := m.snapshotToWAL(ctx, codec)
			if err != nil {
				return err
			}
			sn.backendCPU = m.serverCPU() - srv1
			sns[c] = append(sns[c], sn)
		}
	}
	sel := median(sels)
	row(fmt.Sprintf("`SELECT *` of the %d tables at once, streamed through vitess `go/mysql` (**baseline**)", m.opts.tables), sel.rows, sel.bytes, sel.dur, fmt.Sprintf("median of %d (%s rows/s), alternating with the snapshot's; every cell read; CPU µs/row client %.2f, server %.2f",
		len(sels), rateRange(sels), perRow(sel.engineCPU, sel.rows), perRow(sel.backendCPU, sel.rows)))
	for c, codec := range o.codecs {
		sn := median(sns[c])
		row(fmt.Sprintf("MySQL snapshot → WAL (local, apply paused%s), %d tables, snapshot_parallel %d", codecNote(codec), m.opts.tables, m.opts.tables), sn.rows, 0, sn.dur, fmt.Sprintf("median of %d (%s rows/s); **%.0f%% of SELECT**; chunks of 10000 rows in key order; CPU µs/row: plugin %.2f, engine %.2f, server %.2f; %d WAL entries, %s stored (%.1f B/row); peak RSS engine %s, plugin %s",
			len(sns[c]), rateRange(sns[c]), 100*rate(sn)/rate(sel), perRow(sn.pluginCPU, sn.rows), perRow(sn.engineCPU, sn.rows), perRow(sn.backendCPU, sn.rows), sn.entries, mib(sn.walBytes), float64(sn.walBytes)/float64(sn.rows), mib(sn.engineRSS), mib(sn.pluginRSS)))
	}
	if !o.stream {
		fmt.Printf("\nload average after the MySQL benchmarks: %s\n", loadAverage())
		return nil
	}

	// The backlog: its position first, then its rows in 1000-row transactions; both readers start there.
	var file string
	var pos uint64
	var gtid string
	if err := db.QueryRowContext(ctx, `SHOW MASTER STATUS`).Scan(&file, &pos, new(string), new(string)); err != nil {
		return fmt.Errorf("SHOW MASTER STATUS: %w", err)
	}
	if err := db.QueryRowContext(ctx, `SELECT BINLOG_GTID_POS(?, ?)`, file, pos).Scan(&gtid); err != nil {
		return err
	}
	start = time.Now()
	for from := int64(1); from <= o.streamRows; from += 1000 {
		if err := m.fillTx(ctx, "stream", from, min(from+999, o.streamRows)); err != nil {
			return err
		}
	}
	row("load: the binlog backlog, 1000-row transactions", o.streamRows, 0, time.Since(start), "setup, not a benchmark")
	var raws, sks []pgResult
	for range max(o.repeat, 1) {
		resetPeakRSS()
		raw, err := m.rawBinlog(ctx, gtid, o.streamRows)
		if err != nil {
			return err
		}
		raw.engineRSS = peakRSS()
		sk, err := m.streamToWAL(ctx, file, pos, gtid)
		if err != nil {
			return err
		}
		raws, sks = append(raws, raw), append(sks, sk)
	}
	raw, sk := median(raws), median(sks)
	row("vitess binlog dump: `ReadBinlogEvent` + `Rows` + every cell decoded (**baseline**)", raw.rows, raw.bytes, raw.dur, fmt.Sprintf("median of %d (%s rows/s); MB/s counts event bytes; CPU µs/row client %.1f",
		len(raws), rateRange(raws), perRow(raw.engineCPU, raw.rows)))
	row("MySQL binlog stream → WAL, backlog of 1000-row transactions", sk.rows, 0, sk.dur, fmt.Sprintf("median of %d (%s rows/s), alternating with the baseline's; **%.0f%% of raw vitess**; CPU µs/row: plugin %.1f, engine %.1f; %d WAL entries; peak RSS engine %s, plugin %s",
		len(sks), rateRange(sks), 100*rate(sk)/rate(raw), perRow(sk.pluginCPU, sk.rows), perRow(sk.engineCPU, sk.rows), sk.entries, mib(sk.engineRSS), mib(sk.pluginRSS)))
	if o.rate > 0 {
		if err := m.myLive(ctx); err != nil {
			return err
		}
	}
	fmt.Printf("\nload average after the MySQL benchmarks: %s\n", loadAverage())
	return nil
}

func (m *myBench) exec(ctx context.Context, q string, args ...any) error {
	if _, err := m.db.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("%.80s: %w", q, err)
	}
	return nil
}

func (m *myBench) fill(ctx context.Context, table string, from, to int64) error {
	for lo := from; lo <= to; lo += 1_000_000 {
		if err := m.fillTx(ctx, table, lo, min(lo+999_999, to)); err != nil {
			return err
		}
	}
	return nil
}

func (m *myBench) fillTx(ctx context.Context, table string, from, to int64) error {
	return m.exec(ctx, fmt.Sprintf("INSERT INTO bench.%s "+myRowsSQL, table, from, to))
}

func (m *myBench) conn(ctx context.Context) (*mysql.Conn, error) {
	return mysql.Connect(ctx, &mysql.ConnParams{Host: m.srv.Host, Port: m.srv.Port, Uname: "root", DbName: "bench"})
}

// snapTables are the snapshot's tables.
func (m *myBench) snapTables() []string {
	out := make([]string, m.opts.tables)
	for i := range out {
		out[i] = fmt.Sprintf("snap%d", i+1)
	}
	return out
}

// selectBaseline streams `SELECT *` of every snapshot table at once, one connection each, through the
// driver the plugin uses, touching every cell.
func (m *myBench) selectBaseline(ctx context.Context) (pgResult, error) {
	names := m.snapTables()
	conns := make([]*mysql.Conn, len(names))
	for i := range conns {
		c, err := m.conn(ctx)
		if err != nil {
			return pgResult{}, err
		}
		defer c.Close()
		conns[i] = c
	}
	cpu0, start := selfCPU(), time.Now()
	results := make([]pgResult, len(names))
	errs := make(chan error, len(names))
	for i, c := range conns {
		go func() {
			if err := c.ExecuteStreamFetch("SELECT * FROM " + names[i]); err != nil {
				errs <- err
				return
			}
			// One row slice refilled by every FetchNext, as the plugin reads.
			var r []sqltypes.Value
			for {
				var err error
				r, err = c.FetchNext(r[:0])
				if err != nil {
					errs <- err
					return
				}
				if r == nil {
					break
				}
				results[i].rows++
				for _, v := range r {
					results[i].bytes += int64(len(v.Raw()))
				}
			}
			errs <- nil
		}()
	}
	var res pgResult
	for range names {
		if err := <-errs; err != nil {
			return res, err
		}
	}
	for _, r := range results {
		res.rows += r.rows
		res.bytes += r.bytes
	}
	res.dur, res.engineCPU = time.Since(start), selfCPU()-cpu0
	return res, nil
}

func (m *myBench) settings(tables []string, snapshot bool) []byte {
	b, _ := json.Marshal(map[string]any{"host": m.srv.Host, "port": m.srv.Port, "user": "root", "database": "bench", "tables": tables,
		"snapshot": snapshot, "batch_size": 10000, "snapshot_parallel": max(len(tables), 1)})
	return b
}

// snapshotToWAL runs the plugin's snapshot of the table into the WAL; the clock stops when the WAL holds
// every row.
func (m *myBench) snapshotToWAL(ctx context.Context, compression string) (pgResult, error) {
	w, err := startWALRun(ctx, m.bin, "bench-mysql", compression, m.settings(m.snapTables(), true), nil, nil)
	if err != nil {
		return pgResult{}, err
	}
	err = w.waitRows(ctx, m.opts.rows, time.Hour)
	d := time.Since(w.started)
	if stopErr := w.stop(); err == nil {
		err = stopErr
	}
	w.res.dur = d
	return w.res, err
}

// streamToWAL starts the plugin at the backlog's position (a checkpoint in the WAL, as after a restart) and
// stops the clock when the WAL holds the backlog.
func (m *myBench) streamToWAL(ctx context.Context, file string, pos uint64, gtid string) (pgResult, error) {
	cp := source.Position{V: 1, Phase: source.PhaseStream, Flavor: "mariadb", File: file, Pos: pos, GTID: gtid, Tables: []string{"stream"}}
	w, err := startWALRun(ctx, m.bin, "bench-mysql", "", m.settings([]string{"stream"}, false), cp.Encode(), nil)
	if err != nil {
		return pgResult{}, err
	}
	err = w.waitRows(ctx, m.opts.streamRows, time.Hour)
	d := time.Since(w.started)
	if stopErr := w.stop(); err == nil {
		err = stopErr
	}
	w.res.dur = d
	return w.res, err
}

// rawBinlog reads the binlog from gtid with a bare vitess dump client, decoding every cell of every row of
// the stream table with its real field types, until want rows.
func (m *myBench) rawBinlog(ctx context.Context, gtid string, want int64) (pgResult, error) {
	return m.readBinlog(ctx, gtid, "stream", want, nil)
}

// readBinlog reads the binlog from gtid with a bare vitess dump client, decoding every cell of every row of
// table with its real field types, until want rows; onCommit, when given, hears the rows so far at each
// transaction's end.
func (m *myBench) readBinlog(ctx context.Context, gtid, table string, want int64, onCommit func(rows int64, at time.Time)) (pgResult, error) {
	c, err := m.conn(ctx)
	if err != nil {
		return pgResult{}, err
	}
	defer c.Close()
	cpu0, start := selfCPU(), time.Now()
	for _, q := range []string{"SET @master_binlog_checksum = @@global.binlog_checksum", "SET @mariadb_slave_capability = 4"} {
		if _, err := c.ExecuteFetch(q, 0, false); err != nil {
			return pgResult{}, err
		}
	}
	p, err := replication.ParsePosition(replication.MariadbFlavorID, gtid)
	if err != nil {
		return pgResult{}, err
	}
	if err := c.SendBinlogDumpGTIDCommand(4_000_000, "", 0, p, 0); err != nil {
		return pgResult{}, err
	}
	fields := []*querypb.Field{{Type: querypb.Type_INT64}, {Type: querypb.Type_VARCHAR}, {Type: querypb.Type_DECIMAL}, {Type: querypb.Type_DATETIME}, {Type: querypb.Type_VARCHAR}, {Type: querypb.Type_INT64}}
	var f mysql.BinlogFormat
	maps := map[uint64]*mysql.TableMap{}
	var res pgResult
	// To the end of the transaction holding the want-th row: its commit is what the live run times.
	for committed := false; !committed; {
		ev, err := c.ReadBinlogEvent()
		if err != nil {
			return res, err
		}
		res.bytes += int64(len(ev.Bytes()))
		if ev.IsFormatDescription() {
			if f, err = ev.Format(); err != nil {
				return res, err
			}
			continue
		}
		if f.IsZero() {
			continue
		}
		ev, _, err = ev.StripChecksum(f)
		if err != nil {
			return res, err
		}
		switch {
		case ev.IsXID():
			if onCommit != nil {
				onCommit(res.rows, time.Now())
			}
			committed = res.rows >= want
		case ev.IsTableMap():
			tm, err := ev.TableMap(f)
			if err != nil {
				return res, err
			}
			maps[ev.TableID(f)] = tm
		case ev.IsWriteRows():
			tm := maps[ev.TableID(f)]
			if tm == nil || tm.Name != table {
				continue
			}
			rows, err := ev.Rows(f, tm)
			if err != nil {
				return res, err
			}
			for _, r := range rows.Rows {
				pos := 0
				for col := range tm.Types {
					if r.NullColumns.Bit(col) {
						continue
					}
					_, l, err := binlog.CellValue(r.Data, pos, tm.Types[col], tm.Metadata[col], fields[col], false)
					if err != nil {
						return res, fmt.Errorf("decode column %d: %w", col, err)
					}
					pos += l
				}
				res.rows++
			}
		}
	}
	res.dur, res.engineCPU = time.Since(start), selfCPU()-cpu0
	if res.rows < want {
		return res, errors.New("binlog ended early")
	}
	return res, nil
}

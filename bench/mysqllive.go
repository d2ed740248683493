package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/plugins/mysql/source"
)

// myLive measures commit → WAL-durable latency of the MySQL source at a fixed insert rate, beside a bare
// vitess dump client at the same rate (commit → its XID event received). It is the shape of the Postgres
// part's live runs: transactions of txRows rows each at its own scheduled time, latency per transaction from
// the moment the inserter hears its COMMIT acknowledged to the first moment its last row is through.
func (m *myBench) myLive(ctx context.Context) error {
	o := m.opts
	raw, err := m.liveRaw(ctx)
	if err != nil {
		return fmt.Errorf("mysql live baseline: %w", err)
	}
	row(fmt.Sprintf("vitess dump client, inserts at %d rows/s for %s (**baseline**)", o.rate, o.duration), raw.rows, 0, raw.dur,
		fmt.Sprintf("commit → XID event received: p50 %s, p99 %s, max %s; CPU µs/row client %.1f", ms(raw.p50), ms(raw.p99), ms(raw.max), perRow(raw.engineCPU, raw.rows)))
	sk, err := m.liveSkippr(ctx)
	if err != nil {
		return fmt.Errorf("mysql live stream: %w", err)
	}
	row(fmt.Sprintf("MySQL stream → WAL, inserts at %d rows/s for %s", o.rate, o.duration), sk.rows, 0, sk.dur,
		fmt.Sprintf("commit → WAL commit record durable: **p50 %s, p99 %s**, max %s (goal p99 < 500 ms at 20k rows/s; group commit max_delay %s; WAL commit call p50 %s, p99 %s); CPU µs/row: plugin %.1f, engine %.1f; %d WAL entries; peak RSS engine %s, plugin %s",
			ms(sk.p50), ms(sk.p99), ms(sk.max), pipeline.DefaultMaxDelay, ms(sk.commitP50), ms(sk.commitP99),
			perRow(sk.pluginCPU, sk.rows), perRow(sk.engineCPU, sk.rows), sk.entries, mib(sk.engineRSS), mib(sk.pluginRSS)))
	return nil
}

// binlogHere is the server's binlog position now, and the GTID position at it.
func (m *myBench) binlogHere(ctx context.Context) (file string, pos uint64, gtid string, err error) {
	if err := m.db.QueryRowContext(ctx, `SHOW MASTER STATUS`).Scan(&file, &pos, new(string), new(string)); err != nil {
		return "", 0, "", fmt.Errorf("SHOW MASTER STATUS: %w", err)
	}
	if err := m.db.QueryRowContext(ctx, `SELECT BINLOG_GTID_POS(?, ?)`, file, pos).Scan(&gtid); err != nil {
		return "", 0, "", err
	}
	return file, pos, gtid, nil
}

// liveTxs is how many transactions one fixed-rate run inserts.
func (m *myBench) liveTxs() int {
	o := m.opts
	return int(int64(o.rate) * int64(o.duration/time.Millisecond) / 1000 / int64(o.txRows))
}

// fixedRate inserts rate rows/s into bench.live for the configured duration in transactions of txRows, each
// at its own scheduled time (late ones go at once, so a slow reader cannot slow the load), and returns the
// commits. Rows are counted from the run's first.
func (m *myBench) fixedRate(ctx context.Context) ([]committedTx, error) {
	c, err := m.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	o := m.opts
	txs := m.liveTxs()
	every := time.Duration(float64(time.Second) * float64(o.txRows) / float64(o.rate))
	out := make([]committedTx, 0, txs)
	start := time.Now()
	for i := range txs {
		if d := time.Until(start.Add(time.Duration(i) * every)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		from := m.nextID
		if _, err := c.ExecContext(ctx, fmt.Sprintf("INSERT INTO bench.live "+myRowsSQL, from, from+int64(o.txRows)-1)); err != nil {
			return nil, fmt.Errorf("insert into bench.live: %w", err)
		}
		m.nextID += int64(o.txRows)
		out = append(out, committedTx{through: int64(i+1) * int64(o.txRows), at: time.Now()})
	}
	return out, nil
}

// waitDump waits until a binlog dump thread serves a reader, so no inserted row precedes it.
func (m *myBench) waitDump(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var n int
		if err := m.db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'`).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no binlog dump thread after a minute")
}

// liveRaw runs the fixed-rate load with a bare dump client reading meanwhile.
func (m *myBench) liveRaw(ctx context.Context) (pgResult, error) {
	_, _, gtid, err := m.binlogHere(ctx)
	if err != nil {
		return pgResult{}, err
	}
	want := int64(m.liveTxs() * m.opts.txRows)
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
		res, err := m.readBinlog(ctx, gtid, "live", want, func(rows int64, at time.Time) {
			mu.Lock()
			seen = append(seen, durable{rows, at})
			mu.Unlock()
		})
		done <- rawDone{res, err}
	}()
	if err := m.waitDump(ctx); err != nil {
		return pgResult{}, err
	}
	start := time.Now()
	txs, err := m.fixedRate(ctx)
	if err != nil {
		return pgResult{}, err
	}
	rd := <-done
	if rd.err != nil {
		return pgResult{}, rd.err
	}
	res := rd.res
	mu.Lock()
	defer mu.Unlock()
	res.dur = seen[len(seen)-1].at.Sub(start)
	res.p50, res.p99, res.max, err = latencies(txs, seen)
	return res, err
}

// liveSkippr runs the fixed-rate load with the plugin streaming into the WAL meanwhile, from the position
// before it (a checkpoint, as after a restart). A row is durable when the WAL Commit of the entry holding it
// returns (timedLog).
func (m *myBench) liveSkippr(ctx context.Context) (pgResult, error) {
	file, pos, gtid, err := m.binlogHere(ctx)
	if err != nil {
		return pgResult{}, err
	}
	resetPeakRSS()
	cp := source.Position{V: 1, Phase: source.PhaseStream, Flavor: "mariadb", File: file, Pos: pos, GTID: gtid, Tables: []string{"live"}}
	w, err := startWALRun(ctx, m.bin, "bench-mysql-live", "", m.settings([]string{"live"}, false), cp.Encode(), nil)
	if err != nil {
		return pgResult{}, err
	}
	if err := m.waitDump(ctx); err != nil {
		w.stop()
		return pgResult{}, err
	}
	return w.measureFixedRate(ctx, func() ([]committedTx, error) { return m.fixedRate(ctx) })
}

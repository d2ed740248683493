package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	pluginv1 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v1"
	"github.com/skippr-dev/skippr/plugins/postgres/source"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// pluginBin is the plugin binary, built once for the package.
var pluginBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "skippr-postgres-plugin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pluginBin = filepath.Join(dir, "skippr-plugin-postgres")
	if out, err := exec.Command("go", "build", "-o", pluginBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build plugin: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	pgtest.Main(m, func() { os.RemoveAll(dir) })
}

// startPlugin starts the binary the way the engine does.
func startPlugin(t testing.TB) *client.Client {
	t.Helper()
	return conformance.Start(t, pluginBin, nil)
}

// settings builds a settings object for db, connecting as the superuser unless role is set.
func settings(db *pgtest.DB, extra map[string]any) []byte {
	s := map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "postgres", "database": db.Name, "sslmode": "disable"}
	for k, v := range extra {
		s[k] = v
	}
	b, _ := json.Marshal(s)
	return b
}

// slot is a replication slot name for the test's database: slots are per server, not per database.
func slot(db *pgtest.DB) string { return "s_" + db.Name }

// reading is a running Read, its messages gathered by a goroutine.
type reading struct {
	t      testing.TB
	cancel context.CancelFunc
	msgs   chan client.Message
	err    chan error
	done   chan struct{}
}

func startReading(t testing.TB, c *client.Client, set []byte, from []byte) *reading {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rs, err := c.Read(ctx, set, nil, from)
	if err != nil {
		cancel()
		t.Fatalf("read: %v", err)
	}
	r := &reading{t: t, cancel: cancel, msgs: make(chan client.Message, 64), err: make(chan error, 1), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			m, err := rs.Next()
			if err != nil {
				r.err <- err
				return
			}
			select {
			case r.msgs <- m:
			case <-ctx.Done():
				r.err <- ctx.Err()
				return
			}
		}
	}()
	t.Cleanup(r.stop)
	return r
}

// stop ends the Read and waits for its goroutine.
func (r *reading) stop() {
	r.cancel()
	<-r.done
}

// chunk is what a source emitted up to and including one checkpoint.
type chunk struct {
	items []client.ApplyItem
	rows  int64
	cp    *pluginv1.Checkpoint
}

// next returns everything up to the next checkpoint.
func (r *reading) next(timeout time.Duration) (chunk, error) {
	var c chunk
	deadline := time.After(timeout)
	for {
		select {
		case m := <-r.msgs:
			switch {
			case m.Batch != nil:
				b := *m.Batch
				c.items = append(c.items, client.ApplyItem{Batch: &b})
				c.rows += b.Rows
			case m.Schema != nil:
				c.items = append(c.items, client.ApplyItem{Schema: m.Schema})
			case m.Truncate != "":
				c.items = append(c.items, client.ApplyItem{Truncate: m.Truncate})
			case m.Checkpoint != nil:
				c.cp = m.Checkpoint
				return c, nil
			}
		case err := <-r.err:
			r.err <- err // keep it for the next caller
			return c, err
		case <-deadline:
			return c, fmt.Errorf("no checkpoint within %s (%d items pending)", timeout, len(c.items))
		}
	}
}

// mustNext is next that fails the test.
func (r *reading) mustNext(timeout time.Duration) chunk {
	r.t.Helper()
	c, err := r.next(timeout)
	if err != nil {
		r.t.Fatalf("read: %v", err)
	}
	return c
}

// pipe is a small engine: it reads from a source, applies each checkpoint's content as one sequence number
// to a destination, then acknowledges the checkpoint.
type pipe struct {
	t        testing.TB
	src, dst *client.Client
	srcSet   []byte
	dstSet   []byte
	pipeline string
	seq      uint64
	last     []byte // last acknowledged checkpoint
	r        *reading
	schemas  int // schema changes applied
}

func newPipe(t testing.TB, src, dst *client.Client, srcSet, dstSet []byte) *pipe {
	return &pipe{t: t, src: src, dst: dst, srcSet: srcSet, dstSet: dstSet, pipeline: "p-" + strings.ReplaceAll(t.Name(), "/", "-")}
}

// start begins reading from the last acknowledged checkpoint.
func (p *pipe) start() {
	p.t.Helper()
	p.r = startReading(p.t, p.src, p.srcSet, p.last)
}

// step applies and acknowledges one checkpoint's content as one sequence number; it returns the chunk.
func (p *pipe) step(timeout time.Duration) (chunk, error) {
	c, err := p.r.next(timeout)
	if err != nil {
		return c, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Like the engine, only a checkpoint with something to commit is acknowledged.
	if len(c.items) == 0 {
		return c, nil
	}
	p.seq++
	for _, it := range c.items {
		if it.Schema != nil {
			p.schemas++
		}
	}
	if _, err := p.dst.Apply(ctx, p.dstSet, p.pipeline, p.seq, c.items); err != nil {
		return c, fmt.Errorf("apply %d: %w", p.seq, err)
	}
	if err := p.src.Ack(ctx, c.cp.Position); err != nil {
		return c, fmt.Errorf("ack: %w", err)
	}
	p.last = c.cp.Position
	return c, nil
}

// catchUp steps until an idle checkpoint at or past the server's current WAL position, so everything
// committed before the call has been applied.
func (p *pipe) catchUp(db *pgtest.DB, timeout time.Duration) {
	p.t.Helper()
	var now string
	db.QueryRow(p.t, []any{&now}, `SELECT pg_current_wal_lsn()::text`)
	want, err := pglogrepl.ParseLSN(now)
	if err != nil {
		p.t.Fatal(err)
	}
	deadline := time.Now().Add(timeout)
	for {
		c, err := p.step(time.Until(deadline))
		if err != nil {
			p.t.Fatalf("pipe: %v", err)
		}
		pos := position(p.t, c.cp.Position)
		if c.cp.Idle && pos.Phase == source.PhaseStream && pos.LSNValue() >= want {
			return
		}
	}
}

// position decodes a checkpoint.
func position(t testing.TB, b []byte) *source.Position {
	t.Helper()
	p, err := source.DecodePosition(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// rowsText returns a table's rows as text, ordered by the first column.
func rowsText(t testing.TB, db *pgtest.DB, table string) []string {
	t.Helper()
	conn := db.Connect(t)
	ctx := context.Background()
	rows, err := conn.Query(ctx, "SELECT t::text FROM "+table+" t ORDER BY 1")
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	return out
}

// sameRows fails the test when two tables differ, showing the first differences.
func sameRows(t testing.TB, db *pgtest.DB, want, got string) {
	t.Helper()
	w, g := rowsText(t, db, want), rowsText(t, db, got)
	if slices.Equal(w, g) {
		return
	}
	t.Errorf("%s has %d rows, %s has %d", want, len(w), got, len(g))
	ws, gs := map[string]bool{}, map[string]bool{}
	for _, x := range w {
		ws[x] = true
	}
	for _, x := range g {
		gs[x] = true
	}
	shown := 0
	for _, x := range w {
		if !gs[x] && shown < 5 {
			t.Errorf("only in %s: %s", want, x)
			shown++
		}
	}
	shown = 0
	for _, x := range g {
		if !ws[x] && shown < 5 {
			t.Errorf("only in %s: %s", got, x)
			shown++
		}
	}
}

// confirmedFlush is the slot's confirmed_flush_lsn.
func confirmedFlush(t testing.TB, db *pgtest.DB, slot string) string {
	t.Helper()
	var s *string
	db.QueryRow(t, []any{&s}, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot)
	if s == nil {
		return ""
	}
	return *s
}

// readErr waits for a Read to fail and returns its error.
func (r *reading) readErr(timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		select {
		case <-r.msgs:
		case err := <-r.err:
			r.err <- err
			if errors.Is(err, io.EOF) {
				return errors.New("read ended without an error")
			}
			return err
		case <-deadline:
			return fmt.Errorf("read did not fail within %s", timeout)
		}
	}
}

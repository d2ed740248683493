package main

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/skippr-dev/skippr/plugin-sdk/protect"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
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

// reading is a running Read (conformance.Reading, with this package's short names).
type reading struct{ *conformance.Reading }

func startReading(t testing.TB, c *client.Client, set []byte, from []byte) *reading {
	t.Helper()
	return &reading{conformance.StartReading(t, c, set, from)}
}

// stop ends the Read and waits for its goroutine.
func (r *reading) stop() { r.Stop() }

// chunk is what a source emitted up to and including one checkpoint.
type chunk struct {
	items []client.ApplyItem
	rows  int64
	cp    *pluginv2.Checkpoint
}

// next returns everything up to the next checkpoint.
func (r *reading) next(timeout time.Duration) (chunk, error) {
	c, err := r.Next(timeout)
	return chunk{items: c.Items, rows: c.Rows, cp: c.Checkpoint}, err
}

// mustNext is next that fails the test.
func (r *reading) mustNext(timeout time.Duration) chunk {
	c := r.MustNext(timeout)
	return chunk{items: c.Items, rows: c.Rows, cp: c.Checkpoint}
}

// readErr waits for a Read to fail and returns its error.
func (r *reading) readErr(timeout time.Duration) error { return r.Err(timeout) }

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
	b, _, err := protect.Unwrap(b) // a pipeline with rules (or a row filter) wraps its positions
	if err != nil {
		t.Fatal(err)
	}
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

package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestPatternFollowsCreateAndDrop: with tables [public.t, shop.*], a table created in schema shop while the
// pipeline streams under a write load, and written to at once, is added to the publication and copied while
// streaming: every row it holds arrives, none twice (rows written before the copy began included). A table that
// does not match is not captured; a matching table dropped is released without a truncate (its rows stay) while
// the stream goes on. The checkpoint lists the capture set, and a restart from it keeps it. A pattern matching
// nothing at the first start is refused, naming it.
func TestPatternFollowsCreateAndDrop(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL); INSERT INTO t SELECT g, g FROM generate_series(1, 50) g;
		CREATE SCHEMA shop; CREATE TABLE shop.a (id int PRIMARY KEY, v int NOT NULL); INSERT INTO shop.a SELECT g, g FROM generate_series(1, 200) g`)
	set := func(tables ...string) json.RawMessage {
		raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "postgres", "database": db.Name,
			"sslmode": "disable", "tables": tables, "batch_size": 70, "slot": "pat_" + db.Name, "publication": "pat_" + db.Name})
		return raw
	}
	ctx := context.Background()
	s := New()
	if err := s.Read(ctx, serve.ReadRequest{Settings: set("public.t", "sales.*")}, newFolded()); err == nil ||
		!strings.Contains(err.Error(), "pattern sales.* matches no table") || !errors.Is(err, fault.ErrConfig) {
		t.Fatalf("a pattern matching nothing: %v", err)
	}

	out := newFolded()
	readUntil(t, s, serve.ReadRequest{Settings: set("public.t", "shop.*")}, out, func() bool { return out.idle })
	if len(out.rows["shop.a"]) != 200 || len(out.rows["public.t"]) != 50 {
		t.Fatalf("snapshot: %d rows of shop.a, %d of t", len(out.rows["shop.a"]), len(out.rows["public.t"]))
	}
	if p := position(t, out.last); fmt.Sprint(p.Tables) != "[public.t shop.a]" {
		t.Fatalf("first position: tables %v", p.Tables)
	}

	conn := db.Connect(t)
	const newRows = 3000
	// The writers start once the Read streams (at its first checkpoint), so the new table is found while streaming.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	var writers []func(c *pgx.Conn) error
	write := func(f func(c *pgx.Conn) error) { writers = append(writers, f) }
	var conns []*pgx.Conn
	for range 3 {
		conns = append(conns, db.Connect(t))
	}
	start := func() {
		for i, f := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f(conns[i]); err != nil {
					errs <- err
				}
			}()
		}
	}
	write(func(c *pgx.Conn) error {
		for i := 1; i <= 300; i++ {
			if _, err := c.Exec(ctx, `UPDATE t SET v = v + 1 WHERE id = $1`, i%50+1); err != nil {
				return err
			}
		}
		return nil
	})
	write(func(c *pgx.Conn) error {
		for i := 201; i <= 500; i++ {
			if _, err := c.Exec(ctx, `INSERT INTO shop.a VALUES ($1, $1)`, i); err != nil {
				return err
			}
		}
		_, err := c.Exec(ctx, `DROP TABLE shop.a`)
		return err
	})
	write(func(c *pgx.Conn) error {
		if _, err := c.Exec(ctx, `CREATE TABLE shop.b (id int PRIMARY KEY, v int NOT NULL); CREATE TABLE public.other (id int PRIMARY KEY, v int NOT NULL)`); err != nil {
			return err
		}
		for i := 1; i <= newRows; i += 100 {
			if _, err := c.Exec(ctx, `INSERT INTO shop.b SELECT g, g * 2 FROM generate_series($1::int, $1::int + 99) g`, i); err != nil {
				return err
			}
			if _, err := c.Exec(ctx, `UPDATE shop.b SET v = v + 1 WHERE id = $1`, i); err != nil {
				return err
			}
			if _, err := c.Exec(ctx, `INSERT INTO other VALUES ($1, 0)`, i); err != nil {
				return err
			}
		}
		_, err := c.Exec(ctx, `DELETE FROM shop.b WHERE id = 2`)
		return err
	})
	done := make(chan struct{})
	started := false
	finished := func() bool {
		if !started {
			started = true
			start()
			go func() { wg.Wait(); close(done) }()
			return false
		}
		select {
		case <-done:
		default:
			return false
		}
		return out.idle && len(out.rows["shop.b"]) == newRows-1 && slices.Contains(out.marks, "shop.b end=true") &&
			slices.ContainsFunc(out.captured, func(m serve.Metric) bool {
				return m.Name == "captured_table" && m.Labels["table"] == "shop.a" && m.Value == 0
			})
	}
	out.idle = false
	readUntil(t, s, serve.ReadRequest{Settings: set("public.t", "shop.*"), Checkpoint: out.last}, out, finished)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sameRows(t, conn, "shop.b", out.rows["shop.b"])
	sameRows(t, conn, "t", out.rows["public.t"])
	if out.rows["public.other"] != nil {
		t.Error("table other, which no pattern matches, was captured")
	}
	if len(out.truncated) != 0 {
		t.Errorf("truncates %v: a dropped table captured by a pattern is released, its destination keeps its rows", out.truncated)
	}
	if len(out.rows["shop.a"]) != 500 {
		t.Errorf("shop.a has %d rows at the destination, want all 500 written before its drop", len(out.rows["shop.a"]))
	}
	if p := position(t, out.last); fmt.Sprint(p.Tables) != "[public.t shop.b]" {
		t.Fatalf("position after the create and the drop: tables %v", p.Tables)
	}
	var captured []string
	for _, m := range out.captured {
		if m.Name == "captured_table" {
			captured = append(captured, fmt.Sprintf("%s/%s=%v", m.Labels["table"], m.Labels["via"], m.Value))
		}
	}
	if want := "[public.t/name=1 shop.b/pattern=1 shop.a/pattern=0]"; fmt.Sprint(captured) != want {
		t.Errorf("captured_table gauges %v, want %s", captured, want)
	}

	// A restart from the last checkpoint keeps the set, and the new table streams on.
	db.Exec(t, `UPDATE shop.b SET v = -1 WHERE id = 1`)
	out.idle = false
	readUntil(t, s, serve.ReadRequest{Settings: set("public.t", "shop.*"), Checkpoint: out.last}, out, func() bool { return out.idle && out.rows["shop.b"][1] == -1 })
	sameRows(t, conn, "shop.b", out.rows["shop.b"])
	if p := position(t, out.last); fmt.Sprint(p.Tables) != "[public.t shop.b]" {
		t.Fatalf("position after the restart: tables %v", p.Tables)
	}
}

// position decodes a checkpoint's position.
func position(t *testing.T, b []byte) *Position {
	t.Helper()
	p, err := DecodePosition(b)
	if err != nil || p == nil {
		t.Fatalf("position %s: %v", b, err)
	}
	return p
}

// TestPatternTableCreatedDuringInitialSnapshot: a Read stopped during its initial snapshot resumes it from the
// checkpoint although a table created meanwhile now matches the pattern (the snapshot's table set is the
// checkpoint's: a changed set would be refused), and the new table is captured once streaming starts.
func TestPatternTableCreatedDuringInitialSnapshot(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE SCHEMA shop; CREATE TABLE shop.a (id int PRIMARY KEY, v int NOT NULL); INSERT INTO shop.a SELECT g, g FROM generate_series(1, 1000) g`)
	raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "postgres", "database": db.Name,
		"sslmode": "disable", "tables": []string{"shop.*"}, "batch_size": 70, "slot": "pats_" + db.Name, "publication": "pats_" + db.Name})
	s := New()
	out := newFolded()
	// A checkpoint of the snapshot in progress, as a crash would leave it durable. Looked for among all the
	// checkpoints, not the last one: the wake-ups of readUntil coalesce, so on a loaded machine the snapshot can
	// be over (the last checkpoint streaming) by the time the condition is first tested.
	var mid []byte
	readUntil(t, s, serve.ReadRequest{Settings: raw}, out, func() bool {
		for _, cp := range out.all {
			if p, err := DecodePosition(cp); err == nil && p != nil && p.Phase == PhaseSnapshot && !p.copiedAll() {
				mid = cp
				return true
			}
		}
		return false
	})
	out = newFolded()
	db.Exec(t, `CREATE TABLE shop.b (id int PRIMARY KEY, v int NOT NULL); INSERT INTO shop.b SELECT g, -g FROM generate_series(1, 150) g`)
	readUntil(t, s, serve.ReadRequest{Settings: raw, Checkpoint: mid}, out, func() bool {
		return out.idle && slices.Contains(out.marks, "shop.b end=true")
	})
	conn := db.Connect(t)
	if len(out.rows["shop.a"]) < 1000-70*2 {
		t.Fatalf("the resumed snapshot sent %d rows of shop.a", len(out.rows["shop.a"]))
	}
	sameRows(t, conn, "shop.b", out.rows["shop.b"])
}

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

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// TestPatternFollowsCreateAndDrop: with tables [t, orders_*], a table created while the pipeline streams under a
// write load and matching the pattern is captured from its CREATE on (every row it holds arrives, none twice), a
// table that does not match is not, and a matching table dropped is released without a truncate (its rows stay
// where they are) while the stream goes on. The checkpoint lists the capture set, and a restart from it keeps it.
// A pattern matching nothing at the first start is refused, naming it.
func TestPatternFollowsCreateAndDrop(t *testing.T) {
	db := mysqltest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`)
	db.Exec(t, `INSERT INTO t SELECT seq, seq FROM seq_1_to_50`)
	db.Exec(t, `CREATE TABLE orders_1 (id int PRIMARY KEY, v int NOT NULL)`)
	db.Exec(t, `INSERT INTO orders_1 SELECT seq, seq FROM seq_1_to_200`)
	set := func(tables ...string) json.RawMessage {
		raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "root", "database": db.Name,
			"tables": tables, "batch_size": 70})
		return raw
	}
	ctx := context.Background()
	s := New()
	if err := s.Read(ctx, serve.ReadRequest{Settings: set("t", "shop_*")}, newFolded()); err == nil ||
		!strings.Contains(err.Error(), "pattern shop_* matches no table") || !errors.Is(err, fault.ErrConfig) {
		t.Fatalf("a pattern matching nothing: %v", err)
	}

	ts, o1, o2, x := db.Name+".t", db.Name+".orders_1", db.Name+".orders_2", db.Name+".other"
	out := newFolded()
	readUntil(t, s, serve.ReadRequest{Settings: set("t", "orders_*")}, out, func() bool { return out.idle })
	if len(out.rows[o1]) != 200 || len(out.rows[ts]) != 50 {
		t.Fatalf("snapshot: %d rows of orders_1, %d of t", len(out.rows[o1]), len(out.rows[ts]))
	}
	if p := position(t, out.last); fmt.Sprint(p.Tables) != "[t orders_1]" || fmt.Sprint(p.Patterns) != "[orders_*]" {
		t.Fatalf("first position: tables %v, patterns %v", p.Tables, p.Patterns)
	}

	// While the Read streams: writers on t and orders_1; orders_2 is created and written to at once, other (not
	// matching) too, and orders_1 is dropped once its writer is done.
	conn := db.Open(t)
	const newRows = 3000
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	write := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- err
			}
		}()
	}
	write(func() error {
		for i := 1; i <= 300; i++ {
			if _, err := conn.Exec(`UPDATE t SET v = v + 1 WHERE id = ?`, i%50+1); err != nil {
				return err
			}
		}
		return nil
	})
	write(func() error {
		for i := 201; i <= 500; i++ {
			if _, err := conn.Exec(`INSERT INTO orders_1 VALUES (?, ?)`, i, i); err != nil {
				return err
			}
		}
		_, err := conn.Exec(`DROP TABLE orders_1`)
		return err
	})
	write(func() error {
		if _, err := conn.Exec(`CREATE TABLE orders_2 (id int PRIMARY KEY, v int NOT NULL)`); err != nil {
			return err
		}
		if _, err := conn.Exec(`CREATE TABLE other (id int PRIMARY KEY, v int NOT NULL)`); err != nil {
			return err
		}
		for i := 1; i <= newRows; i += 100 {
			if _, err := conn.Exec(`INSERT INTO orders_2 SELECT seq, seq * 2 FROM seq_` + fmt.Sprint(i) + `_to_` + fmt.Sprint(i+99)); err != nil {
				return err
			}
			if _, err := conn.Exec(`UPDATE orders_2 SET v = v + 1 WHERE id = ?`, i); err != nil {
				return err
			}
			if _, err := conn.Exec(`INSERT INTO other VALUES (?, 0)`, i); err != nil {
				return err
			}
		}
		_, err := conn.Exec(`DELETE FROM orders_2 WHERE id = 2`)
		return err
	})
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	finished := func() bool {
		select {
		case <-done:
		default:
			return false
		}
		return out.idle && len(out.rows[o2]) == newRows-1 && slices.ContainsFunc(out.captured, func(m serve.Metric) bool {
			return m.Name == "captured_table" && m.Labels["table"] == o1 && m.Value == 0
		})
	}
	out.idle = false
	readUntil(t, s, serve.ReadRequest{Settings: set("t", "orders_*"), Checkpoint: out.last}, out, finished)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sameRows(t, conn, "orders_2", out.rows[o2])
	sameRows(t, conn, "t", out.rows[ts])
	if out.rows[x] != nil {
		t.Error("table other, which no pattern matches, was captured")
	}
	if len(out.truncated) != 0 {
		t.Errorf("truncates %v: a dropped table captured by a pattern is released, its destination keeps its rows", out.truncated)
	}
	if len(out.rows[o1]) != 500 {
		t.Errorf("orders_1 has %d rows at the destination, want all 500 written before its drop", len(out.rows[o1]))
	}
	if p := position(t, out.last); fmt.Sprint(p.Tables) != "[t orders_2]" {
		t.Fatalf("position after the create and the drop: tables %v", p.Tables)
	}
	var captured []string
	for _, m := range out.captured {
		if m.Name == "captured_table" {
			captured = append(captured, fmt.Sprintf("%s/%s=%v", m.Labels["table"], m.Labels["via"], m.Value))
		}
	}
	if want := fmt.Sprintf("[%s/name=1 %s/pattern=1 %s/pattern=0]", ts, o2, o1); fmt.Sprint(captured) != want {
		t.Errorf("captured_table gauges %v, want %s", captured, want)
	}

	// A restart from the last checkpoint keeps the set, and the new table streams on.
	db.Exec(t, `UPDATE orders_2 SET v = -1 WHERE id = 1`)
	out.idle = false
	readUntil(t, s, serve.ReadRequest{Settings: set("t", "orders_*"), Checkpoint: out.last}, out, func() bool { return out.idle && out.rows[o2][1] == -1 })
	sameRows(t, conn, "orders_2", out.rows[o2])
	if p := position(t, out.last); fmt.Sprint(p.Tables) != "[t orders_2]" {
		t.Fatalf("position after the restart: tables %v", p.Tables)
	}
}

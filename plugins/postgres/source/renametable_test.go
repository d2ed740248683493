package source

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// renaming is folded with a destination's rename rule: a schema change of a stream marked as renamed from
// another (change.RenamedFromTableMeta) moves the former stream's rows to it when it has none yet.
type renaming struct {
	*folded
	markers []string // "from → to" of every marked schema change, in order
}

func (r *renaming) SchemaChange(_ context.Context, st serve.Stream) error {
	from := change.RenamedFromTable(st.Schema)
	if from == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.markers = append(r.markers, from+" → "+st.Name)
	if r.rows[st.Name] == nil && r.rows[from] != nil {
		r.rows[st.Name] = r.rows[from]
		delete(r.rows, from)
	}
	return nil
}

// TestRenameTableFollowed: ALTER TABLE … RENAME of a captured table to a name a pattern of tables matches, under a
// write load that goes on into the new name: the table's stream goes on under the new name, marked once as
// renamed from the old stream; nothing is truncated, released as dropped or copied (no re-snapshot marks); the
// rows folded under the marker's rule equal the table's; the checkpoint lists the new name, and a restart from it
// goes on. Then a listed table renamed to a name nothing captures stops the Read with a config fault naming the
// rename and the ways out, before any change after it, and again at a restart. Without the detection the
// renamed table's changes are dropped as another table's (and the pattern watcher copies it as a new table).
func TestRenameTableFollowed(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL); INSERT INTO t SELECT g, g FROM generate_series(1, 50) g;
		CREATE SCHEMA shop; CREATE TABLE shop.a (id int PRIMARY KEY, v int NOT NULL); INSERT INTO shop.a SELECT g, g FROM generate_series(1, 100) g`)
	raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "postgres", "database": db.Name,
		"sslmode": "disable", "tables": []string{"public.t", "shop.*"}, "batch_size": 70, "slot": "ren_" + db.Name, "publication": "ren_" + db.Name})
	set := json.RawMessage(raw)
	ctx := context.Background()
	s := New()
	out := &renaming{folded: newFolded()}
	readUntil(t, s, serve.ReadRequest{Settings: set}, out.folded, func() bool { return out.idle })

	conn := db.Connect(t)
	load := db.Connect(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var loadErr error
	// The load and the rename start once the Read streams (at its first checkpoint): the rename is met while
	// streaming.
	run := func() {
		defer wg.Done()
		for i := 1000; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := load.Exec(ctx, `INSERT INTO shop.a VALUES ($1, $1)`, i); err != nil {
				if _, err := load.Exec(ctx, `INSERT INTO shop.b VALUES ($1, $1)`, i); err != nil {
					loadErr = err
					return
				}
			}
			if _, err := load.Exec(ctx, `UPDATE t SET v = $1 WHERE id = $2`, i, i%50+1); err != nil {
				loadErr = err
				return
			}
		}
	}
	final := -1
	done := make(chan struct{})
	started := false
	out.idle = false
	readUntilWith(t, s, serve.ReadRequest{Settings: set, Checkpoint: out.last}, out, out.folded, func() bool {
		if !started {
			started = true
			wg.Add(1)
			go run()
			go func() {
				defer close(done)
				waitCount(t, conn, "shop.a", 150)
				db.Exec(t, `UPDATE shop.a SET v = 100 WHERE id = 1`)
				db.Exec(t, `ALTER TABLE shop.a RENAME TO b`)
				db.Exec(t, `UPDATE shop.b SET v = 200 WHERE id = 2; DELETE FROM shop.b WHERE id = 3`)
				waitCount(t, conn, "shop.b", 250)
				close(stop)
				wg.Wait()
			}()
			return false
		}
		select {
		case <-done:
		default:
			return false
		}
		if final < 0 {
			c := db.Connect(t)
			if err := c.QueryRow(ctx, `SELECT count(*) FROM shop.b`).Scan(&final); err != nil {
				t.Error(err)
			}
		}
		return out.idle && len(out.rows["shop.b"]) == final
	})
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	if want := "[shop.a → shop.b]"; fmt.Sprint(out.markers) != want {
		t.Errorf("marked schema changes %q, want %s once", out.markers, want)
	}
	if len(out.truncated) != 0 || len(out.marks) != 0 {
		t.Errorf("truncates %v, re-snapshot marks %v: a renamed table is neither emptied nor copied", out.truncated, out.marks)
	}
	if _, ok := out.rows["shop.a"]; ok {
		t.Errorf("rows remain under the former stream shop.a")
	}
	sameRows(t, conn, "shop.b", out.rows["shop.b"])
	sameRows(t, conn, "t", out.rows["public.t"])
	if p := position(t, out.last); fmt.Sprint(p.Tables) != "[public.t shop.b]" {
		t.Errorf("position after the rename: tables %v", p.Tables)
	}

	// A restart from after the rename goes on under the new name (a poll of the patterns included).
	db.Exec(t, `UPDATE shop.b SET v = 300 WHERE id = 4`)
	out.idle = false
	readUntilWith(t, s, serve.ReadRequest{Settings: set, Checkpoint: out.last}, out, out.folded, func() bool {
		return out.idle && out.rows["shop.b"][4] == 300
	})
	time.Sleep(patternPoll + 500*time.Millisecond) // the watcher's next poll must not release or copy anything
	db.Exec(t, `UPDATE shop.b SET v = 301 WHERE id = 4`)
	out.idle = false
	readUntilWith(t, s, serve.ReadRequest{Settings: set, Checkpoint: out.last}, out, out.folded, func() bool {
		return out.idle && out.rows["shop.b"][4] == 301
	})
	sameRows(t, conn, "shop.b", out.rows["shop.b"])
	if len(out.marks) != 0 || len(out.markers) != 1 {
		t.Errorf("after restarts: re-snapshot marks %v, marked schema changes %v", out.marks, out.markers)
	}

	// Renamed while no Read runs, with changes before and after: followed at the restart, from the checkpoint's oid.
	db.Exec(t, `UPDATE shop.b SET v = 400 WHERE id = 5; ALTER TABLE shop.b RENAME TO c; UPDATE shop.c SET v = 500 WHERE id = 6; INSERT INTO shop.c VALUES (5000, 5000)`)
	out.idle = false
	readUntilWith(t, s, serve.ReadRequest{Settings: set, Checkpoint: out.last}, out, out.folded, func() bool {
		return out.idle && out.rows["shop.c"][5000] == 5000
	})
	if want := "[shop.a → shop.b shop.b → shop.c]"; fmt.Sprint(out.markers) != want {
		t.Errorf("marked schema changes %q, want %s", out.markers, want)
	}
	if len(out.truncated) != 0 || len(out.marks) != 0 || out.rows["shop.b"] != nil {
		t.Errorf("truncates %v, re-snapshot marks %v, rows left under shop.b: %d", out.truncated, out.marks, len(out.rows["shop.b"]))
	}
	sameRows(t, conn, "shop.c", out.rows["shop.c"])
	if p := position(t, out.last); fmt.Sprint(p.Tables) != "[public.t shop.c]" {
		t.Errorf("position after the rename while stopped: tables %v", p.Tables)
	}

	// A listed table renamed to a name nothing captures stops the Read at the rename, at every restart.
	for _, q := range []string{`UPDATE t SET v = -1 WHERE id = 1`, `ALTER TABLE t RENAME TO t_old`, `UPDATE t_old SET v = -2 WHERE id = 2`, `UPDATE shop.c SET v = -3 WHERE id = 7`} {
		db.Exec(t, q) // each its own transaction
	}
	for run := 1; run <= 2; run++ {
		c, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := s.Read(c, serve.ReadRequest{Settings: set, Checkpoint: out.last}, out)
		cancel()
		if fault.ClassOf(err) != fault.Config || !strings.Contains(err.Error(), "renames captured table public.t to public.t_old") {
			t.Fatalf("run %d: %v (class %s), want a config fault naming the rename", run, err, fault.ClassOf(err))
		}
		if fix := fault.FixOf(err); !strings.Contains(fix, "add public.t_old to tables") || !strings.Contains(fix, "remove public.t from tables") {
			t.Errorf("run %d: fix %q", run, fix)
		}
		if out.rows["public.t"][1] != -1 || out.rows["public.t"][2] == -2 || out.rows["shop.c"][7] == -3 {
			t.Errorf("run %d: t row 1 = %d (want the update before the rename), row 2 = %d, shop.c row 7 = %d (nothing after it)", run, out.rows["public.t"][1], out.rows["public.t"][2], out.rows["shop.c"][7])
		}
	}
}

// waitCount waits until table has at least n rows.
func waitCount(t *testing.T, conn *pgx.Conn, table string, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var got int
		err := conn.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&got)
		if err == nil && got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("table %s: %d rows, want %d (%v)", table, got, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

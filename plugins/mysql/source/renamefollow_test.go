package source

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
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

// TestRenameTableFollowed: RENAME TABLE (and ALTER TABLE … RENAME) of a captured table to a name a pattern of
// tables matches, under a write load that goes on into the new name: the stream goes on as the new name, its
// schema change marked once as renamed from the old stream; nothing is truncated; the rows folded under the
// marker's rule equal the table's; the new name joins the capture set and the old one leaves it. A Read
// restarted from a checkpoint before the rename follows it again, and one from after it goes on under the new
// name. Without the change the rename stops the Read (a config fault: not captured).
func TestRenameTableFollowed(t *testing.T) {
	for _, rename := range []string{"RENAME TABLE p_a TO p_b", "ALTER TABLE p_a RENAME TO p_b"} {
		t.Run(strings.Fields(rename)[0], func(t *testing.T) {
			db := mysqltest.NewDB(t)
			db.Exec(t, `CREATE TABLE p_a (id int PRIMARY KEY, v int NOT NULL); INSERT INTO p_a SELECT seq, seq FROM seq_1_to_50`)
			db.Exec(t, `CREATE TABLE u (id int PRIMARY KEY, v int NOT NULL); INSERT INTO u SELECT seq, -seq FROM seq_1_to_20`)
			raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "root", "database": db.Name, "tables": []string{"p_*", "u"}})
			set := json.RawMessage(raw)
			as, bs, us := db.Name+".p_a", db.Name+".p_b", db.Name+".u"
			s := New()
			out := &renaming{folded: newFolded()}
			readUntil(t, s, serve.ReadRequest{Settings: set}, out.folded, func() bool { return out.idle })
			before := out.last

			// The load: inserts into the table under whichever name it has, and updates of u, until told to stop.
			conn := db.Open(t)
			var wg sync.WaitGroup
			stop := make(chan struct{})
			var loadErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 1000; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := conn.Exec(fmt.Sprintf(`INSERT INTO p_a VALUES (%d, %d)`, i, i)); err != nil {
						if _, err := conn.Exec(fmt.Sprintf(`INSERT INTO p_b VALUES (%d, %d)`, i, i)); err != nil {
							loadErr = err
							return
						}
					}
					if _, err := conn.Exec(fmt.Sprintf(`UPDATE u SET v = %d WHERE id = %d`, i, i%20+1)); err != nil {
						loadErr = err
						return
					}
				}
			}()
			waitRows(t, conn, "p_a", 60)
			db.Exec(t, `UPDATE p_a SET v = 100 WHERE id = 1`)
			db.Exec(t, rename)
			db.Exec(t, `UPDATE p_b SET v = 200 WHERE id = 2; DELETE FROM p_b WHERE id = 3`)
			waitRows(t, conn, "p_b", 80)
			close(stop)
			wg.Wait()
			if loadErr != nil {
				t.Fatal(loadErr)
			}

			out.idle = false
			readUntilWith(t, s, serve.ReadRequest{Settings: set, Checkpoint: out.last}, out, out.folded, func() bool { return out.idle })
			if want := []string{as + " → " + bs}; fmt.Sprint(out.markers) != fmt.Sprint(want) {
				t.Errorf("marked schema changes %q, want %q once", out.markers, want)
			}
			if len(out.truncated) != 0 {
				t.Errorf("truncates emitted: %v", out.truncated)
			}
			if _, ok := out.rows[as]; ok {
				t.Errorf("rows remain under the former stream %s", as)
			}
			sameRows(t, conn, "p_b", out.rows[bs])
			sameRows(t, conn, "u", out.rows[us])
			var captured []string
			for _, m := range out.captured {
				captured = append(captured, fmt.Sprintf("%s=%v", m.Labels["table"], m.Value))
			}
			if got, want := strings.Join(captured, " "), fmt.Sprintf("%s=1 %s=1 %s=0", us, bs, as); got != want {
				t.Errorf("captured_table gauges %q, want %q", got, want)
			}

			// A restart from after the rename goes on under the new name.
			db.Exec(t, `UPDATE p_b SET v = 300 WHERE id = 4`)
			out.idle = false
			readUntilWith(t, s, serve.ReadRequest{Settings: set, Checkpoint: out.last}, out, out.folded, func() bool { return out.idle && out.rows[bs][4] == 300 })
			sameRows(t, conn, "p_b", out.rows[bs])

			// A restart from before the rename follows it again: the destination finds the new table there.
			// (This fold has no fence: it starts from what the destination holds, the new table, and the rows
			// replayed under the old name land beside it, as a destination's fence would skip them.)
			again := &renaming{folded: newFolded()}
			again.rows[bs] = maps.Clone(out.rows[bs])
			readUntilWith(t, s, serve.ReadRequest{Settings: set, Checkpoint: before}, again, again.folded, func() bool { return again.idle })
			if len(again.markers) != 1 || len(again.truncated) != 0 {
				t.Errorf("replay from before the rename: markers %q, truncates %v", again.markers, again.truncated)
			}
			sameRows(t, conn, "p_b", again.rows[bs])
		})
	}
}

// readUntilWith is readUntil with em, which folds into out, as the Read's emitter.
func readUntilWith(t *testing.T, s *Source, req serve.ReadRequest, em serve.Emitter, out *folded, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- s.Read(ctx, req, em) }()
	for {
		select {
		case err := <-errc:
			t.Fatalf("read ended: %v", err)
		case <-ctx.Done():
			t.Fatal("timed out")
		case <-out.changed:
			out.mu.Lock()
			ok := done()
			out.mu.Unlock()
			if ok {
				cancel()
				if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
					t.Fatal(err)
				}
				return
			}
		}
	}
}

// waitRows waits until table has at least n rows.
func waitRows(t *testing.T, conn *sql.DB, table string, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var got int
		err := conn.QueryRow(`SELECT count(*) FROM ` + table).Scan(&got)
		if err == nil && got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("table %s: %d rows, want %d (%v)", table, got, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

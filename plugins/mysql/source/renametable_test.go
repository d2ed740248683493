package source

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// truncates counts the truncates a Read emits, beside what folded keeps.
type truncates struct {
	*folded
	n int
}

func (tr *truncates) Truncate(context.Context, string) error { tr.n++; return nil }

// TestRenameTableAway: RENAME TABLE (and ALTER TABLE … RENAME) of a captured table to a name the pipeline does
// not capture stops the Read with a config fault naming the rename and the two ways out; the table is not
// truncated downstream, nothing after the statement is emitted and the checkpoint stays before it, so a
// restart stops there again. Then the first way out: the settings capture the new name instead, which is
// copied while streaming, and the other table's changes made after the rename arrive. Without the check the
// rename is a truncate (truncate: propagate) that empties the destination's table.
func TestRenameTableAway(t *testing.T) {
	for _, rename := range []string{"RENAME TABLE t TO t_old", "ALTER TABLE t RENAME TO t_old"} {
		t.Run(strings.Fields(rename)[0], func(t *testing.T) {
			db := mysqltest.NewDB(t)
			db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL); INSERT INTO t SELECT seq, seq FROM seq_1_to_50`)
			db.Exec(t, `CREATE TABLE u (id int PRIMARY KEY, v int NOT NULL); INSERT INTO u SELECT seq, -seq FROM seq_1_to_20`)
			set := func(tables ...string) json.RawMessage {
				raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "root", "database": db.Name, "tables": tables})
				return raw
			}
			ts, us, olds := db.Name+".t", db.Name+".u", db.Name+".t_old"
			s := New()
			out := newFolded()
			readUntil(t, s, serve.ReadRequest{Settings: set("t", "u")}, out, func() bool { return out.idle })
			db.Exec(t, `UPDATE t SET v = 100 WHERE id = 1`)
			db.Exec(t, rename)
			db.Exec(t, `UPDATE u SET v = 5 WHERE id = 1`)
			db.Exec(t, `UPDATE t_old SET v = 200 WHERE id = 2`)

			for run := 1; run <= 2; run++ {
				tr := &truncates{folded: out}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := s.Read(ctx, serve.ReadRequest{Settings: set("t", "u"), Checkpoint: out.last}, tr)
				cancel()
				if fault.ClassOf(err) != fault.Config {
					t.Fatalf("run %d: %v (class %s), want a config fault", run, err, fault.ClassOf(err))
				}
				msg, fix := err.Error(), fault.FixOf(err)
				for _, want := range []string{"renames captured table " + ts + " to t_old", rename, "keeps its rows"} {
					if !strings.Contains(msg, want) {
						t.Errorf("run %d: message %q lacks %q", run, msg, want)
					}
				}
				for _, want := range []string{"replace t by t_old in tables", "remove t from tables"} {
					if !strings.Contains(fix, want) {
						t.Errorf("run %d: fix %q lacks %q", run, fix, want)
					}
				}
				if tr.n != 0 {
					t.Errorf("run %d: %d truncates emitted", run, tr.n)
				}
				if out.rows[ts][1] != 100 || len(out.rows[ts]) != 50 {
					t.Errorf("run %d: t holds %d rows, row 1 = %d; want the 50 rows with the update before the rename", run, len(out.rows[ts]), out.rows[ts][1])
				}
				if out.rows[us][1] != -1 {
					t.Errorf("run %d: a change after the rename was emitted (u row 1 = %d)", run, out.rows[us][1])
				}
			}

			// The first way out: capture the new name instead.
			out.idle = false
			readUntil(t, s, serve.ReadRequest{Settings: set("u", "t_old"), Checkpoint: out.last}, out, func() bool {
				return out.idle && fmt.Sprint(out.marks) == fmt.Sprintf("[%s end=false %s end=true]", olds, olds)
			})
			conn := db.Open(t)
			sameRows(t, conn, "t_old", out.rows[olds])
			sameRows(t, conn, "u", out.rows[us])
		})
	}
}

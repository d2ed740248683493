package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugins/postgres/source"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestPublicationChangedMidStream alters or drops the pipeline's publication while a write load runs and the
// source streams. pgoutput then silently stops sending the table's changes (DROP TABLE), or its updates and
// deletes (publish = 'insert'), or fails at the next change (DROP PUBLICATION): each must stop the Read with a
// re-snapshot fault naming the publication, what changed and the fix, and no checkpoint may lie past the change.
// An unrelated change of the publication (another table added) must not stop it.
func TestPublicationChangedMidStream(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change string   // %s: the publication, quoted
		want   []string // in the error; nil: the Read goes on
		fix    string
	}{
		{name: "drop-table", change: `ALTER PUBLICATION %s DROP TABLE a`, want: []string{"no longer includes table public.a", "LSN"}, fix: "ADD TABLE public.a"},
		{name: "publish-insert", change: `ALTER PUBLICATION %s SET (publish = 'insert')`, want: []string{"no longer publishes update, delete, truncate", "LSN"}, fix: "SET (publish = 'insert, update, delete, truncate')"},
		{name: "drop-publication", change: `DROP PUBLICATION %s`, want: []string{"dropped"}, fix: "skippr teardown"},
		{name: "add-other-table", change: `ALTER PUBLICATION %s ADD TABLE other`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY, v int); CREATE TABLE b (id int PRIMARY KEY); CREATE TABLE other (id int PRIMARY KEY)`)
			pub := "pub_" + db.Name
			r := startReading(t, startPlugin(t), settings(db, map[string]any{"tables": []string{"a", "b"}, "slot": slot(db), "publication": pub}), nil)
			defer r.stop()

			// The load: one transaction after another on one connection, so a position read after the change
			// commits lies before every later transaction's commit. It changes the publication once the
			// stream has delivered some of it, and goes on until told to stop.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			conn := db.Connect(t)
			streaming, stop := make(chan struct{}), make(chan struct{})
			type changed struct {
				after pglogrepl.LSN // a position past the change's commit, before any later transaction's
				err   error
			}
			done := make(chan changed, 1)
			go func() {
				var ch changed
				altered := false
				for i := 1; ; i++ {
					select {
					case <-stop:
						done <- ch
						return
					case <-streaming:
						if !altered {
							altered = true
							if _, err := conn.Exec(ctx, fmt.Sprintf(tc.change, `"`+pub+`"`)); err != nil {
								ch.err = err
								done <- ch
								return
							}
							var s string
							if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s); err != nil {
								ch.err = err
								done <- ch
								return
							}
							ch.after, _ = pglogrepl.ParseLSN(s)
						}
					default:
					}
					_, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO a VALUES (%[1]d, 0); UPDATE a SET v = v + 1 WHERE id = %[1]d - 1; DELETE FROM a WHERE id = %[1]d - 2; INSERT INTO b VALUES (%[1]d)`, i))
					if err != nil {
						ch.err = err
						done <- ch
						return
					}
				}
			}()

			// Read until the stream has delivered load, then let the load change the publication.
			var lsns []pglogrepl.LSN
			var loadRows int64
			var err error
			signalled := false
			for err == nil {
				var c chunk
				c, err = r.next(2 * time.Minute)
				if err != nil {
					break
				}
				p := position(t, c.cp.Position)
				if p.Phase != source.PhaseStream {
					continue
				}
				lsns = append(lsns, p.LSNValue())
				loadRows += c.rows
				if loadRows >= 200 && !signalled {
					close(streaming)
					signalled = true
				}
				if loadRows >= 2000 && signalled {
					break // well past the change: the Read went on
				}
			}
			close(stop)
			ch := <-done
			if ch.err != nil {
				t.Fatalf("load: %v", ch.err)
			}
			if tc.want == nil {
				if err != nil {
					t.Fatalf("an unrelated change of the publication stopped the Read: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("the Read went on for %d rows and %d checkpoints past the publication change", loadRows, len(lsns))
			}
			if ch.after == 0 {
				t.Fatalf("the Read ended with %v before the publication was changed", err)
			}
			if fault.ClassOf(err) != fault.Resnapshot {
				t.Errorf("class %v, want resnapshot: %v", fault.ClassOf(err), err)
			}
			for _, w := range append(tc.want, pub) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if fix := fault.FixOf(err); !strings.Contains(fix, tc.fix) {
				t.Errorf("fix %q does not say %q", fix, tc.fix)
			}
			for _, l := range lsns {
				if l > ch.after {
					t.Errorf("a checkpoint at %s lies past the publication change (committed before %s)", l, ch.after)
				}
			}
			t.Logf("stopped after %d stream checkpoints (%d rows); change before %s: %v", len(lsns), loadRows, ch.after, err)
		})
	}
}

// TestPublicationRecreatedWhileStopped: a publication dropped and created again while no Read streams, with a
// change written in between, looks intact to the catalog check; the walsender then fails at that change, and
// that failure is the same re-snapshot fault (it was a config error whose fix, creating the publication, cannot
// help: the change is decoded with the catalog as of its position).
func TestPublicationRecreatedWhileStopped(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY)`)
	pub := "pub_" + db.Name
	src := startPlugin(t)
	set := settings(db, map[string]any{"tables": []string{"a"}, "slot": slot(db), "publication": pub})
	r := startReading(t, src, set, nil)
	for position(t, r.mustNext(time.Minute).cp.Position).Phase != source.PhaseStream {
	}
	db.Exec(t, `INSERT INTO a VALUES (1)`)
	var last []byte
	for last == nil {
		if c := r.mustNext(time.Minute); c.rows > 0 {
			last = c.cp.Position
		}
	}
	r.stop()
	db.Exec(t, `DROP PUBLICATION "`+pub+`"`)
	db.Exec(t, `INSERT INTO a VALUES (2)`)
	db.Exec(t, `CREATE PUBLICATION "`+pub+`" FOR TABLE a`)
	db.Exec(t, `INSERT INTO a VALUES (3)`)
	r = startReading(t, src, set, last)
	defer r.stop()
	err := r.readErr(2 * time.Minute)
	if fault.ClassOf(err) != fault.Resnapshot || !strings.Contains(err.Error(), pub) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("got %v (class %v), want a re-snapshot fault naming publication %s", err, fault.ClassOf(err), pub)
	}
	if fix := fault.FixOf(err); !strings.Contains(fix, "skippr teardown") {
		t.Errorf("fix %q does not say how to re-snapshot", fix)
	}
}

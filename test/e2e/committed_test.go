package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestSourceCommittedAtThroughTheWAL: the source's commit time travels through the engine's WAL (the change
// batches' _skippr_committed_at) into a Postgres destination's _skippr_source_committed_at, with soft_delete:
// a snapshot row holds NULL, a streamed row its transaction's commit time, a soft-deleted row its delete's.
// The servers run on this machine, so each commit lies between the test's clock before and after it.
func TestSourceCommittedAtThroughTheWAL(t *testing.T) {
	src := pgtest.NewDB(t)
	dst := src.Server.NewDB(t)
	src.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, v text); INSERT INTO items VALUES (1, 'a'), (2, 'b'), (3, 'c')`)
	s := src.Server
	e := harness.NewEnvWith(t, "postgres")
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.items], slot: committed, publication: committed }
  out:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[4]s, sslmode: disable, schema: out, soft_delete: true, metadata_columns: [source_committed_at] }
pipelines:
  items:
    source: src
    destinations: [out]
    wal:
      url: file://%[5]s
`, s.Host, s.Port, src.Name, dst.Name, filepath.Join(e.Dir, "wal")))
	e.MustRun("sync", "--once")
	type window struct{ before, after time.Time }
	write := func(sql string) window {
		w := window{before: time.Now().Truncate(time.Microsecond)}
		src.Exec(t, sql)
		w.after = time.Now()
		return w
	}
	w1 := write(`UPDATE items SET v = 'a2' WHERE id = 1`)
	w2 := write(`DELETE FROM items WHERE id = 2`)
	e.MustRun("sync", "--once")
	for _, c := range []struct {
		id int
		w  *window // nil: NULL
	}{{1, &w1}, {2, &w2}, {3, nil}} {
		var at *time.Time
		dst.QueryRow(t, []any{&at}, `SELECT _skippr_source_committed_at FROM out.items WHERE id = $1`, c.id)
		switch {
		case c.w == nil && at != nil:
			t.Errorf("snapshot row %d: _skippr_source_committed_at = %v, want NULL", c.id, at)
		case c.w != nil && (at == nil || at.Before(c.w.before) || at.After(c.w.after)):
			t.Errorf("row %d: _skippr_source_committed_at = %v, want its change's commit, between %v and %v", c.id, at, c.w.before, c.w.after)
		}
	}
}

package e2e

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// softRow is what a soft-deleting destination holds for a key.
type softRow struct {
	v       string
	deleted bool
	op      string
}

// softStep is one change made at the source: the SQL run there (one transaction) and what it does to each
// key, applied to the model the destination is compared with.
type softStep struct {
	sql   string
	model func(m map[int]softRow)
}

// A real Postgres source with updates, deletes, a deleted key inserted again, an insert deleted in the same
// transaction and a TRUNCATE, through `skippr sync --once` into a Postgres destination with soft_delete and
// metadata_columns: after each sync the destination equals the state computed from the changes made.
func TestSoftDeleteFromPostgres(t *testing.T) {
	src := pgtest.NewDB(t)
	dst := src.Server.NewDB(t)
	src.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, v text); INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 5) g`)
	model := map[int]softRow{}
	for i := 1; i <= 5; i++ {
		model[i] = softRow{v: fmt.Sprintf("v%d", i), op: "snapshot"}
	}
	s := src.Server
	e := harness.NewEnvWith(t, "postgres")
	wal := filepath.Join(e.Dir, "wal")
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.items], slot: soft, publication: soft }
  out:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[4]s, sslmode: disable, schema: out, soft_delete: true, metadata_columns: [synced_at, op, position] }
pipelines:
  orders:
    source: src
    destinations: [out]
    wal:
      url: file://%[5]s
`, s.Host, s.Port, src.Name, dst.Name, wal))
	set := func(id int, v, op string) func(map[int]softRow) {
		return func(m map[int]softRow) { m[id] = softRow{v: v, op: op} }
	}
	del := func(id int) func(map[int]softRow) {
		return func(m map[int]softRow) {
			if r, ok := m[id]; ok {
				r.deleted, r.op = true, "delete"
				m[id] = r
			}
		}
	}
	all := func(fs ...func(map[int]softRow)) func(map[int]softRow) {
		return func(m map[int]softRow) {
			for _, f := range fs {
				f(m)
			}
		}
	}
	phases := [][]softStep{
		nil, // the snapshot
		{
			{`UPDATE items SET v = 'u1' WHERE id = 1`, set(1, "u1", "update")},
			{`DELETE FROM items WHERE id = 2`, del(2)},
			{`DELETE FROM items WHERE id = 3`, del(3)},
			{`INSERT INTO items VALUES (3, 'again')`, set(3, "again", "insert")},
			{`BEGIN; INSERT INTO items VALUES (6, 'brief'); DELETE FROM items WHERE id = 6; COMMIT`, all(set(6, "brief", "insert"), del(6))},
			{`UPDATE items SET v = 'u4' WHERE id = 4; DELETE FROM items WHERE id = 4`, all(set(4, "u4", "update"), del(4))},
		},
		{
			{`DELETE FROM items WHERE id = 5`, del(5)},
			{`TRUNCATE items`, func(m map[int]softRow) { clear(m) }},
			{`INSERT INTO items VALUES (7, 'after'), (8, 'gone')`, all(set(7, "after", "insert"), set(8, "gone", "insert"))},
			{`DELETE FROM items WHERE id = 8`, del(8)},
			{`INSERT INTO items VALUES (2, 'back')`, set(2, "back", "insert")},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn := dst.Connect(t)
	for i, steps := range phases {
		for _, st := range steps {
			src.Exec(t, st.sql)
			st.model(model)
		}
		e.MustRun("sync", "--once")
		rows, err := conn.Query(ctx, `SELECT id, v, _skippr_deleted, _skippr_op, _skippr_position, _skippr_synced_at IS NOT NULL FROM out.items`)
		if err != nil {
			t.Fatal(err)
		}
		got := map[int]softRow{}
		for rows.Next() {
			var (
				id     int
				r      softRow
				pos    *int64
				synced bool
			)
			if err := rows.Scan(&id, &r.v, &r.deleted, &r.op, &pos, &synced); err != nil {
				t.Fatal(err)
			}
			if pos == nil || *pos < 1 || !synced {
				t.Errorf("phase %d: row %d: _skippr_position %v, _skippr_synced_at set %v", i, id, pos, synced)
			}
			got[id] = r
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, model) {
			t.Fatalf("phase %d: destination\n%s\nwant\n%s", i, softText(got), softText(model))
		}
	}
}

func softText(m map[int]softRow) string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%d: %+v", id, m[id]))
	}
	return strings.Join(out, "\n")
}

// A source column named like a column the destination adds (here _skippr_deleted with soft_delete) refuses
// the pipeline at start (exit 2), naming destination, table and column, and writes nothing.
func TestSoftDeleteColumnClashRefusedAtStart(t *testing.T) {
	src := pgtest.NewDB(t)
	dst := src.Server.NewDB(t)
	src.Exec(t, `CREATE TABLE clash (id int PRIMARY KEY, _skippr_deleted text); INSERT INTO clash VALUES (1, 'mine')`)
	s := src.Server
	e := harness.NewEnvWith(t, "postgres")
	wal := filepath.Join(e.Dir, "wal")
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.clash], slot: clash, publication: clash }
  out:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[4]s, sslmode: disable, schema: out, soft_delete: true }
pipelines:
  orders:
    source: src
    destinations: [out]
    wal:
      url: file://%[5]s
`, s.Host, s.Port, src.Name, dst.Name, wal))
	e.SyncRefused("rename the source column _skippr_deleted", "destination out", "table public.clash has a column _skippr_deleted")
	e.NoWAL(wal)
}

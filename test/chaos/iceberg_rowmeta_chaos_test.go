package chaos

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// audited is one change the source made to items, in commit order, as its audit trigger recorded it.
type audited struct {
	op       string // insert, update, delete, truncate
	id       int64
	v, email string
}

// TestPostgresToIcebergRowMetaSurvivesSIGKILL runs one Postgres pipeline whose table is filtered (where),
// has a column excluded and one hashed, into four Iceberg destinations, each with one option: soft_delete;
// metadata_columns; history; a table_options override (soft deletes and op off for the table, position on).
// A writer inserts, updates, deletes and truncates under load while the engine is SIGKILLed at random points.
// Then each lake is compared with the state computed from the source's own change sequence (an audit trigger,
// one writer so its order is the commit order): soft-deleted keys present with the flag and their last values,
// the metadata of each key's newest change, and the history equal to the sequence, no change twice.
func TestPostgresToIcebergRowMetaSurvivesSIGKILL(t *testing.T) {
	src := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, src.Server.ConnString(src.Name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	sc := conn()
	const salt = "pepper"
	for _, q := range []string{
		`CREATE TABLE items (id bigint PRIMARY KEY, v text, secret text, email text)`,
		`INSERT INTO items SELECT g, 'v' || g, 's' || g, 'e' || g || '@x' FROM generate_series(1, 300) g`,
		`CREATE TABLE audit (seq bigserial PRIMARY KEY, op text NOT NULL, id bigint, v text, email text)`,
		`CREATE FUNCTION audit_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
			IF TG_OP = 'TRUNCATE' THEN INSERT INTO audit (op) VALUES ('truncate');
			ELSIF TG_OP = 'DELETE' THEN INSERT INTO audit (op, id) VALUES ('delete', OLD.id);
			ELSE INSERT INTO audit (op, id, v, email) VALUES (lower(TG_OP), NEW.id, NEW.v, NEW.email); END IF;
			RETURN NULL; END $$`,
		`CREATE TRIGGER items_rows AFTER INSERT OR UPDATE OR DELETE ON items FOR EACH ROW EXECUTE FUNCTION audit_row()`,
		`CREATE TRIGGER items_truncate AFTER TRUNCATE ON items FOR EACH STATEMENT EXECUTE FUNCTION audit_row()`,
	} {
		if _, err := sc.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	e := harness.NewEnvWith(t, "postgres", "iceberg")
	start := time.Now() // the binaries are built: from here the run is the test's own
	lakes := map[string]map[string]any{
		"soft": {"soft_delete": true},
		"meta": {"metadata_columns": []string{"synced_at", "source_committed_at", "op", "position"}},
		"hist": {"history": true},
		"over": {"soft_delete": true, "metadata_columns": []string{"op"},
			"table_options": map[string]any{"public.items": map[string]any{"soft_delete": false, "metadata_columns": []string{"position"}}}},
	}
	settings := map[string]string{} // JSON: the config's YAML takes it as it is, and so does the plugin's scan
	var conns strings.Builder
	for _, name := range slices.Sorted(maps.Keys(lakes)) {
		m := map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(e.Dir, name)}, "namespace": name, "tables": map[string]any{"public.items": "items"}}
		maps.Copy(m, lakes[name])
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		settings[name] = string(b)
		fmt.Fprintf(&conns, "  %s:\n    plugin: iceberg\n    version: \"~> 0.1\"\n    settings: %s\n", name, settings[name])
	}
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings:
      host: %[1]s
      port: %[2]d
      user: postgres
      database: %[3]s
      sslmode: disable
      tables: [public.items]
      slot: rowmeta
      publication: rowmeta
      batch_size: 200
      table_options: { public.items: { where: "id %% 10 <> 0", exclude_columns: [secret], hash_columns: { email: { salt: %[5]s } } } }
%[6]spipelines:
  items:
    source: src
    destinations: [hist, meta, over, soft]
    wal:
      url: file://%[4]s
      group_commit: { max_bytes: 32KiB, max_delay: 50ms }
`, src.Server.Host, src.Server.Port, src.Name, filepath.Join(e.Dir, "wal"), salt, conns.String()))
	e.MustRun("sync", "--once") // the snapshot, whole: its rows are each key's first history row

	w := conn()
	writerCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	truncates := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(7, 11))
		next := int64(301)
		for i := 0; writerCtx.Err() == nil; i++ {
			id := 1 + rng.Int64N(next-1)
			var q string
			switch {
			case i%120 == 119:
				q = fmt.Sprintf(`BEGIN; UPDATE items SET v = v || '*' WHERE id = %[1]d; TRUNCATE items;
					INSERT INTO items SELECT g, 'after' || g, 's', 'a' || g || '@x' FROM generate_series(%[2]d, %[2]d + 29) g;
					DELETE FROM items WHERE id = %[2]d + 3; COMMIT`, id, next)
				next += 30
				truncates++
			case i%10 == 5:
				// A key inserted, updated and deleted in one transaction, and a deleted key inserted again.
				q = fmt.Sprintf(`BEGIN; INSERT INTO items VALUES (%[1]d, 'brief', 's', 'b@x'); UPDATE items SET v = 'brief2' WHERE id = %[1]d;
					DELETE FROM items WHERE id = %[1]d; DELETE FROM items WHERE id = %[2]d;
					INSERT INTO items VALUES (%[2]d, 'again', 's', 'g@x') ON CONFLICT (id) DO NOTHING; COMMIT`, next, id)
				next++
			case i%3 == 0:
				q = fmt.Sprintf(`INSERT INTO items VALUES (%d, 'new', 's', 'n@x')`, next)
				next++
			case i%3 == 1:
				q = fmt.Sprintf(`UPDATE items SET v = v || '+', email = 'u' || id || '@x' WHERE id = %d`, id)
			default:
				q = fmt.Sprintf(`DELETE FROM items WHERE id = %d`, id)
			}
			if _, err := w.Exec(writerCtx, q); err != nil && writerCtx.Err() == nil {
				t.Errorf("writer: %v", err)
				return
			}
			time.Sleep(3 * time.Millisecond)
		}
	}()
	kills := 6
	e.KillSyncAtRandom(kills, 700*time.Millisecond, 3*time.Second)
	stop()
	wg.Wait()
	if truncates == 0 {
		t.Fatal("the writer made no TRUNCATE: the test tests less than it says")
	}
	e.MustRun("sync", "--once")

	hash := func(s string) string {
		m := hmac.New(sha256.New, []byte(salt))
		m.Write([]byte(s))
		return hex.EncodeToString(m.Sum(nil))
	}
	// The sequence: the snapshot's rows (as the source held them before the audit began), then the audit.
	rows, err := sc.Query(ctx, `SELECT op, coalesce(id, 0), coalesce(v, ''), coalesce(email, '') FROM audit WHERE op = 'truncate' OR id % 10 <> 0 ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	changes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (audited, error) {
		var a audited
		err := r.Scan(&a.op, &a.id, &a.v, &a.email)
		return a, err
	})
	if err != nil {
		t.Fatal(err)
	}
	type state struct {
		v, email, op string
		deleted      bool
	}
	mirror := func(soft bool) map[int64]state {
		m := map[int64]state{}
		for id := int64(1); id <= 300; id++ {
			if id%10 != 0 {
				m[id] = state{v: fmt.Sprintf("v%d", id), email: hash(fmt.Sprintf("e%d@x", id)), op: "snapshot"}
			}
		}
		for _, c := range changes {
			switch c.op {
			case "truncate":
				clear(m)
			case "delete":
				if r, ok := m[c.id]; ok && soft {
					r.deleted, r.op = true, "delete"
					m[c.id] = r
				} else {
					delete(m, c.id)
				}
			default:
				m[c.id] = state{v: c.v, email: hash(c.email), op: c.op}
			}
		}
		return m
	}
	check := func(name string, soft bool, cols []string, extra func(id int64, want state, got map[string]any)) {
		t.Helper()
		want := mirror(soft)
		got := harness.ScanLake(t, settings[name], "public.items")
		if len(got) != len(want) {
			t.Fatalf("lake %s holds %d rows, the change sequence leaves %d", name, len(got), len(want))
		}
		for id, wr := range want {
			g, ok := got[fmt.Sprint(id)]
			if !ok {
				t.Fatalf("lake %s: row %d (%+v) is missing", name, id, wr)
			}
			if fmt.Sprint(g["v"]) != wr.v || fmt.Sprint(g["email"]) != wr.email {
				t.Fatalf("lake %s: row %d is %v, want v %q, email %q", name, id, g, wr.v, wr.email)
			}
			var have []string
			for c := range g {
				have = append(have, c)
			}
			slices.Sort(have)
			if !slices.Equal(have, cols) {
				t.Fatalf("lake %s: row %d has columns %v, want %v", name, id, have, cols)
			}
			if extra != nil {
				extra(id, wr, g)
			}
		}
	}
	check("soft", true, []string{"_skippr_deleted", "email", "id", "v"}, func(id int64, want state, got map[string]any) {
		if got["_skippr_deleted"] != want.deleted {
			t.Fatalf("lake soft: row %d: _skippr_deleted = %v, want %v", id, got["_skippr_deleted"], want.deleted)
		}
	})
	check("meta", false, []string{"_skippr_op", "_skippr_position", "_skippr_source_committed_at", "_skippr_synced_at", "email", "id", "v"}, func(id int64, want state, got map[string]any) {
		if got["_skippr_op"] != want.op || got["_skippr_synced_at"] == nil || fmt.Sprint(got["_skippr_position"]) == "0" ||
			(got["_skippr_source_committed_at"] == nil) != (want.op == "snapshot") {
			t.Fatalf("lake meta: row %d: %v, want op %s", id, got, want.op)
		}
	})
	check("over", false, []string{"_skippr_position", "email", "id", "v"}, nil)
	check("hist", false, []string{"email", "id", "v"}, nil)

	// The history: every change once, in order, after the snapshot's rows.
	hist := harness.PluginRows(t, "iceberg", "scan", settings["hist"], "items_history", "the history table", func(_ []byte, row map[string]any) string {
		return fmt.Sprintf("%020s/%010s", fmt.Sprint(row["_skippr_position"]), fmt.Sprint(row["_skippr_seq"]))
	})
	var got, want []string
	snapshot := map[string]bool{}
	for _, k := range slices.Sorted(maps.Keys(hist)) {
		r := hist[k]
		line := fmt.Sprintf("%v %v %v %v", r["_skippr_op"], r["id"], r["v"], r["email"])
		if r["_skippr_op"] == "snapshot" {
			if len(got) > 0 || snapshot[line] {
				t.Fatalf("history: snapshot row %q after changes or twice", line)
			}
			snapshot[line] = true
			continue
		}
		got = append(got, line)
	}
	for id := int64(1); id <= 300; id++ {
		if line := fmt.Sprintf("snapshot %d v%d %s", id, id, hash(fmt.Sprintf("e%d@x", id))); id%10 != 0 && !snapshot[line] {
			t.Fatalf("history: snapshot row %q missing", line)
		}
	}
	for _, c := range changes {
		switch c.op {
		case "truncate":
		case "delete":
			want = append(want, fmt.Sprintf("delete %d <nil> <nil>", c.id))
		default:
			want = append(want, fmt.Sprintf("%s %d %s %s", c.op, c.id, c.v, hash(c.email)))
		}
	}
	if !slices.Equal(got, want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("history differs at change %d of %d (history holds %d): %q, want %q", i, len(want), len(got), got[i], want[i])
			}
		}
		t.Fatalf("history holds %d changes, the source made %d", len(got), len(want))
	}
	t.Logf("%d SIGKILLs, %d TRUNCATEs, %d changes: four lakes equal to the change sequence (%s after the build)", kills, truncates, len(changes), time.Since(start).Round(time.Second))
}

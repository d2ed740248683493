package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/bigquerytest"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestPostgresToBigQuerySurvivesSIGKILL runs Postgres → BigQuery through `skippr sync` against the BigQuery
// stand-in (testkit/bigquerytest: a stand-in for the cloud service, on PostgreSQL) while a writer inserts,
// updates and deletes rows with arrays (ARRAY<STRING>), jsonb (JSON), numeric (NUMERIC) and timestamptz
// (TIMESTAMP) values, SIGKILLs the engine during the snapshot and during streaming and the bigquery plugin
// alone, makes the plugin exit between staging and commit (its test_crash_dir hook: at the first apply, certain to come, and at every 25th), then adds a column in the source, and compares the two tables row by row after a final sync.
//
// With SKIPPR_BIGQUERY_PROJECT set (`make live-bigquery`) the same run goes to that project instead, in a
// dataset of its own that is deleted at the end (harness.BigQueryFromEnv), and the rows are read back with
// BigQuery's client and compared with the source's to_jsonb value by value; the plugin's crash hook needs the
// stand-in, so there the SIGKILLs alone interrupt applies.
func TestPostgresToBigQuerySurvivesSIGKILL(t *testing.T) {
	src := pgtest.NewDB(t)
	live := harness.BigQueryFromEnv(t)
	var bq *bigquerytest.Server // nil when live
	timeout := 15 * time.Minute
	if live == nil {
		bq = bigquerytest.Start(t, "skippr-chaos")
	} else {
		timeout = 40 * time.Minute // every apply is a few query jobs of a real project
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, src.ConnString())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	sc := conn()
	harness.CreateOrders(t, ctx, sc, 20000)

	e := harness.NewEnv(t)
	// Besides the SIGKILLs, the plugin exits on purpose right before the commit of its first apply and of every 25th (once
	// each): the window where rows are staged and nothing is committed is hit every time, not by luck.
	crashes := t.TempDir()
	// The bigquery plugin joins this test's registry (the other tests do not need it built).
	e.MustRun("registry", "add", e.Registry, testplugins.Build(t, "bigquery"), "--name", "bigquery", "--version", "0.1.0", "--os", "linux", "--arch", "amd64")
	e.MustRun("registry", "sign", e.Registry, "--key", filepath.Join(e.Dir, "keys", "skippr-ed25519.key"))
	s := src.Server
	whSettings := ""
	if live == nil {
		whSettings = fmt.Sprintf(`{ project: %s, dataset: chaos, endpoint: "%s", test_crash_dir: "%s" }`, bq.Project, bq.URL, crashes)
	} else {
		// The crash hook needs the stand-in (the plugin refuses test_crash_dir with real credentials); live,
		// the SIGKILLs alone land inside applies, which take seconds there.
		whSettings = live.Settings("")
		e.ExtraEnv = append(e.ExtraEnv, live.Env()...)
	}
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.orders], slot: bqchaos, publication: bqchaos, batch_size: 2000 }
  warehouse:
    plugin: bigquery
    version: "~> 0.1"
    settings: %[4]s
    # Overrides the plugin's 60 s default: the crash point needs many applies.
    apply: { max_interval: 0s }
pipelines:
  orders:
    source: src
    destinations: [warehouse]
    delivery: exactly-once
    wal:
      url: file://%[5]s
      group_commit: { max_bytes: 256KiB, max_delay: 100ms }
`, s.Host, s.Port, src.Name, whSettings, filepath.Join(e.Dir, "wal")))

	stopWriter := harness.StartOrdersWriter(t, ctx, conn(), 20001)
	kills := 8
	e.KillSyncAtRandom(kills, 700*time.Millisecond, 3000*time.Millisecond)
	e.KillPluginAtRandom("skippr-plugin-bigquery", 300*time.Millisecond, 2000*time.Millisecond)
	stopWriter()

	// A schema change: the new column reaches BigQuery as a NULLABLE column, filled for the rows changed after.
	for _, q := range []string{
		`ALTER TABLE orders ADD COLUMN note text`,
		`UPDATE orders SET note = 'n' || id, name = name || '!' WHERE id % 7 = 0`,
		`INSERT INTO orders VALUES (900001, 'late', 2.5, ARRAY['q'], '{"late": true}', now(), 'new')`,
	} {
		if _, err := sc.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	e.MustRun("sync", "--once")
	if live != nil {
		compareLiveBigQuery(t, ctx, sc, live)
		t.Logf("live: %d SIGKILLs of skippr sync, one of the bigquery plugin, then a column added; the rows equal the source's", kills)
		return
	}
	hooks, err := os.ReadDir(crashes)
	if err != nil || len(hooks) == 0 {
		t.Fatalf("the plugin never reached its crash point before commit (%v)", err)
	}

	const row = `id::text || '|' || name || '|' || coalesce(trim_scale(amount)::text, '') || '|' || %s || '|' ||
		coalesce(doc::text, '') || '|' || coalesce(to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), '') || '|' || coalesce(note, '')`
	dump := func(q string, query func(context.Context, string, ...any) (pgx.Rows, error)) []string {
		rows, err := query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := dump(`SELECT `+fmt.Sprintf(row, `coalesce(to_jsonb(tags)::text, '[]')`)+` FROM orders ORDER BY id`, sc.Query)
	got := dump(`SELECT `+fmt.Sprintf(row, `coalesce(tags::text, '[]')`)+` FROM chaos.orders ORDER BY id`, bq.Pool().Query)
	if len(want) != len(got) {
		t.Fatalf("source has %d rows, BigQuery %d", len(want), len(got))
	}
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("row %d differs:\nsource   %s\nbigquery %s", i, want[i], got[i])
		}
	}
	t.Logf("%d SIGKILLs of skippr sync, one of the bigquery plugin, %d exits of the plugin between staging and commit, then a column added; %d rows equal in Postgres and BigQuery; %d query jobs",
		kills, len(hooks), len(want), len(bq.Queries()))
}

// compareLiveBigQuery compares the live table with the source value by value: BigQuery's TO_JSON_STRING of
// each row against PostgreSQL's to_jsonb (numbers by value, timestamps as instants, JSON and arrays element
// by element).
func compareLiveBigQuery(t *testing.T, ctx context.Context, sc *pgx.Conn, live *harness.BigQueryLive) {
	t.Helper()
	rows, err := sc.Query(ctx, `SELECT to_jsonb(o)::text FROM orders o`)
	if err != nil {
		t.Fatal(err)
	}
	texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	got, err := live.Rows(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(texts) {
		t.Fatalf("the BigQuery table has %d rows, the source %d", len(got), len(texts))
	}
	byID := map[string]map[string]any{}
	for _, g := range got {
		byID[fmt.Sprint(g["id"])] = g
	}
	for _, text := range texts {
		var w map[string]any
		d := json.NewDecoder(strings.NewReader(text))
		d.UseNumber()
		if err := d.Decode(&w); err != nil {
			t.Fatal(err)
		}
		g, ok := byID[fmt.Sprint(w["id"])]
		if !ok {
			t.Fatalf("id %v: missing from the BigQuery table", w["id"])
		}
		for col, v := range w {
			if !harness.SameWarehouseValue(g[col], v) {
				t.Fatalf("id %v column %s: BigQuery %#v, source %#v", w["id"], col, g[col], v)
			}
		}
	}
}

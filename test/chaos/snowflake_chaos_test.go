package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
	"github.com/skippr-dev/skippr/testkit/snowflaketest"
)

// TestPostgresToSnowflakeSurvivesSIGKILL runs Postgres → Snowflake through `skippr sync`, Snowflake being
// the stand-in of testkit/snowflaketest (no Snowflake service is reachable here; the stand-in refuses any
// statement outside the documented syntax the plugin may emit). A writer inserts, updates and deletes rows
// with nested values (a text[] and a jsonb column) while the engine is SIGKILLed at random moments and the
// snowflake plugin alone a few times, a column is added to the source table half way, and at the end the
// stand-in's table is compared with the source row by row, and the state row with the WAL.
// SKIPPR_CHAOS_KILLS sets the SIGKILLs of skippr sync (default 8).
//
// With SKIPPR_SNOWFLAKE_* set (`make live-snowflake`) the same run goes to that account instead, in a schema
// of its own that is dropped at the end (harness.SnowflakeFromEnv), and the rows are read back with
// Snowflake's own driver.
func TestPostgresToSnowflakeSurvivesSIGKILL(t *testing.T) {
	kills := 8
	if v := os.Getenv("SKIPPR_CHAOS_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("SKIPPR_CHAOS_KILLS=%q: %v", v, err)
		}
		kills = n
	}
	live := harness.SnowflakeFromEnv(t)
	timeout := 15 * time.Minute
	if live != nil {
		timeout = 40 * time.Minute // every apply is a few seconds of a real warehouse
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	src := pgtest.NewDB(t)
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
	var sf *snowflaketest.Server // nil when live
	whSettings := ""
	readRows := func(ctx context.Context, table string) ([]map[string]any, error) { return live.Rows(ctx, table) }
	if live == nil {
		sf = snowflaketest.New(t, snowflaketest.Options{Account: "chaos", User: "loader", Password: "s3cret",
			Database: "ANALYTICS", Schema: "RAW", Warehouse: "LOAD_WH", Role: "LOADER", ConnString: pgtest.NewDB(t).ConnString()})
		whSettings = fmt.Sprintf(`{ account: chaos, user: loader, password: "${SNOWFLAKE_SECRET}", warehouse: LOAD_WH, role: LOADER, database: ANALYTICS, schema: RAW, host: %s, port: %d, protocol: http }`, sf.Host, sf.Port)
		readRows = sf.Rows
	} else {
		whSettings = live.Settings()
	}

	e := harness.NewEnv(t)
	// The snowflake plugin joins this test's registry (the other tests do not need it built).
	e.MustRun("registry", "add", e.Registry, testplugins.Build(t, "snowflake"), "--name", "snowflake", "--version", "0.1.0", "--os", "linux", "--arch", "amd64")
	e.MustRun("registry", "sign", e.Registry, "--key", filepath.Join(e.Dir, "keys", "skippr-ed25519.key"))
	if live == nil {
		e.ExtraEnv = append(e.ExtraEnv, "SNOWFLAKE_SECRET=s3cret")
	} else {
		e.ExtraEnv = append(e.ExtraEnv, live.Env()...)
	}
	// The chaos states `max_interval: 0s`, which overrides the plugin's 60 s, to get many applies for the
	// SIGKILLs to land in; the final run leaves it out and so takes the warehouse default.
	config := func(apply string) string {
		return fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.orders], slot: sfchaos, publication: sfchaos, batch_size: 2000 }
  wh:
    plugin: snowflake
    version: "~> 0.1"
    settings: %[4]s
%[6]s
pipelines:
  orders:
    source: src
    destinations: [wh]
    delivery: exactly-once
    wal:
      url: file://%[5]s
      group_commit: { max_bytes: 256KiB, max_delay: 100ms }
`, src.Server.Host, src.Server.Port, src.Name, whSettings, filepath.Join(e.Dir, "wal"), apply)
	}
	e.WriteConfig(config("    apply: { max_interval: 0s }"))
	e.MustRun("connect", "wh")

	stopWriter := harness.StartOrdersWriter(t, ctx, conn(), 20001)
	start := time.Now()
	e.KillSyncAtRandom(kills/2, 1*time.Second, 4*time.Second)
	// A schema change mid-stream: the destination adds the column, later rows fill it.
	if _, err := sc.Exec(ctx, `ALTER TABLE orders ADD COLUMN note text`); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Exec(ctx, `UPDATE orders SET note = 'noted ' || id WHERE id % 97 = 0`); err != nil {
		t.Fatal(err)
	}
	e.KillSyncAtRandom(kills-kills/2, 1*time.Second, 4*time.Second)
	pluginKills := max(1, kills/4)
	for i := 0; i < pluginKills; i++ {
		e.KillPluginAtRandom("skippr-plugin-snowflake", 200*time.Millisecond, 2*time.Second)
	}
	stopWriter()
	// The warehouse default: the plugin's 60 s is taken and said so, and --once still ends as soon as
	// everything is applied rather than waiting it out.
	e.WriteConfig(config(""))
	onceAt := time.Now()
	r := e.MustRun("sync", "--once", "--wait-lock")
	const proposed = "apply.max_interval 1m0s proposed by plugin snowflake; set apply.max_interval on connection wh to change"
	if !strings.Contains(r.Stderr, proposed) {
		t.Errorf("sync --once without apply.max_interval does not log %q:\n%s", proposed, r.Stderr)
	}
	// (Live, the final sync's own work on a real warehouse can take that long: not checked there.)
	if took := time.Since(onceAt); live == nil && took > 45*time.Second {
		t.Errorf("sync --once took %v: it waited for the proposed max_interval", took)
	}

	// Both sides keep numbers as their text (json.Number), so a numeric is compared digit for digit.
	rows, err := sc.Query(ctx, `SELECT to_jsonb(o)::text FROM orders o`)
	if err != nil {
		t.Fatal(err)
	}
	texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := make([]map[string]any, len(texts))
	for i, text := range texts {
		d := json.NewDecoder(strings.NewReader(text))
		d.UseNumber()
		if err := d.Decode(&want[i]); err != nil {
			t.Fatal(err)
		}
	}
	got, err := readRows(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]map[string]any{}
	for _, g := range got {
		k := fmt.Sprint(g["ID"])
		if _, dup := byID[k]; dup {
			t.Fatalf("id %s is in the Snowflake table twice", k)
		}
		byID[k] = g
	}
	if len(got) != len(want) {
		t.Fatalf("the Snowflake table has %d rows, the source %d", len(got), len(want))
	}
	for _, w := range want {
		k := fmt.Sprint(w["id"])
		g, ok := byID[k]
		if !ok {
			t.Fatalf("id %s: missing from the Snowflake table", k)
		}
		for col, v := range w {
			if !harness.SameWarehouseValue(g[upper(col)], v) {
				t.Fatalf("id %s column %s: Snowflake %#v, source %#v", k, col, g[upper(col)], v)
			}
		}
	}
	// The pipeline's state row names the last WAL entry: everything committed was applied, and recorded with it.
	state, err := readRows(ctx, "_SKIPPR_STATE")
	if err != nil {
		t.Fatal(err)
	}
	var status []struct {
		WAL struct {
			LastCommitted uint64 `json:"last_committed"`
		} `json:"wal"`
		Live struct {
			Destinations []struct {
				Apply struct {
					MaxIntervalMS int64    `json:"max_interval_ms"`
					FromPlugin    []string `json:"from_plugin"`
				} `json:"apply"`
			} `json:"destinations"`
		} `json:"live"`
	}
	if r := e.MustRun("status", "--json"); json.Unmarshal([]byte(r.Stdout), &status) != nil || len(status) != 1 {
		t.Fatalf("status --json: %s", r.Stdout)
	}
	if d := status[0].Live.Destinations; len(d) != 1 || d[0].Apply.MaxIntervalMS != 60000 || !slices.Equal(d[0].Apply.FromPlugin, []string{"max_interval"}) {
		t.Errorf("status --json destinations %+v: want max_interval 60000 ms from the plugin", d)
	}
	found := false
	for _, s := range state {
		if s["PIPELINE"] == "orders" && s["STREAM"] == "" {
			found = fmt.Sprint(s["LAST_SEQUENCE"]) == fmt.Sprint(status[0].WAL.LastCommitted)
			if !found {
				t.Fatalf("state row %v, WAL committed through %d", s, status[0].WAL.LastCommitted)
			}
		}
	}
	if !found {
		t.Fatalf("no state row of pipeline orders: %v", state)
	}
	if sf == nil {
		t.Logf("live: %d SIGKILLs of skippr sync, %d of the snowflake plugin alone (%s); the Snowflake table's %d rows equal the source's",
			kills, pluginKills, time.Since(start).Round(time.Second), len(got))
		return
	}
	if r := sf.Rejected(); len(r) > 0 {
		t.Fatalf("the stand-in refused statements outside the allow-list: %q", r)
	}
	t.Logf("%d SIGKILLs of skippr sync, %d of the snowflake plugin alone (%s); the Snowflake table's %d rows equal the source's; %d statements accepted",
		kills, pluginKills, time.Since(start).Round(time.Second), len(got), len(sf.Statements()))
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 32
		}
	}
	return string(b)
}

package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/engine/resnapshot"
	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// resnapDest is a destination of the re-snapshot scenario: its connection, how to damage the table it holds
// (rows deleted, rows changed, rows the source never had), and its rows in orderRow's form, by id.
type resnapDest struct {
	name       string
	connection func(t *testing.T, e *harness.Env) string // the YAML settings of connection dst
	damage     func(t *testing.T, ctx context.Context, e *harness.Env)
	dump       func(t *testing.T, ctx context.Context, e *harness.Env) []string
}

// resnapDamage is what a re-snapshot repairs: rows lost downstream, rows changed downstream, rows the source
// never had (SQL that Postgres and DuckDB both run).
var resnapDamage = []string{
	`DELETE FROM orders WHERE id % 50 = 0`,
	`UPDATE orders SET name = 'damaged' WHERE id % 77 = 0`,
	`INSERT INTO orders (id, name, amount) SELECT i, 'stray', 0 FROM range(1000001, 1000301) t(i)`,
}

// orderRow is one orders row in the form both sides are compared in: numbers to cents, the JSON document with
// sorted keys.
func orderRow(id any, name any, amount any, tags any, doc any) string {
	a := ""
	if amount != nil {
		f, err := strconv.ParseFloat(fmt.Sprint(amount), 64)
		if err != nil {
			a = fmt.Sprint(amount)
		} else {
			a = strconv.FormatFloat(f, 'f', 2, 64)
		}
	}
	if s, ok := doc.(string); ok {
		var v any
		if json.Unmarshal([]byte(s), &v) == nil {
			doc = v
		}
	}
	d, _ := json.Marshal(harness.NormalizeJSON(doc))
	tg, _ := json.Marshal(harness.NormalizeJSON(tags))
	return fmt.Sprintf("%v|%v|%s|%s|%s", id, name, a, tg, d)
}

func resnapDests() []resnapDest {
	var dst *pgtest.DB
	duck := func(e *harness.Env) string {
		return fmt.Sprintf(`{"path": %q}`, filepath.Join(e.Dir, "dest", "orders.duckdb"))
	}
	lake := func(e *harness.Env) string {
		return fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(e.Dir, "lake"))
	}
	return []resnapDest{{
		name: "postgres",
		connection: func(t *testing.T, e *harness.Env) string {
			dst = pgtest.NewDB(t)
			s := dst.Server
			return fmt.Sprintf(`{ host: %s, port: %d, user: postgres, database: %s, sslmode: disable }`, s.Host, s.Port, dst.Name)
		},
		damage: func(t *testing.T, ctx context.Context, e *harness.Env) {
			c := pgConn(t, ctx, dst)
			for _, q := range resnapDamage {
				if _, err := c.Exec(ctx, strings.ReplaceAll(q, "range(", "generate_series(")); err != nil {
					t.Fatal(err)
				}
			}
		},
		dump: func(t *testing.T, ctx context.Context, e *harness.Env) []string {
			return dumpOrders(t, ctx, pgConn(t, ctx, dst))
		},
	}, {
		name:       "duckdb",
		connection: func(t *testing.T, e *harness.Env) string { return duck(e) },
		damage: func(t *testing.T, ctx context.Context, e *harness.Env) {
			cmd := exec.CommandContext(ctx, testplugins.Build(t, "duckdb"), "exec", strings.Join(resnapDamage, "; "))
			cmd.Stdin = strings.NewReader(duck(e))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("damage the DuckDB table: %v\n%s", err, out)
			}
		},
		dump: func(t *testing.T, ctx context.Context, e *harness.Env) []string {
			rows := harness.DumpDuckDB(t, duck(e), "public.orders")
			out := make([]string, 0, len(rows))
			for _, r := range rows {
				out = append(out, orderRow(r["id"], r["name"], r["amount"], r["tags"], r["doc"]))
			}
			return sortByID(out)
		},
	}, {
		name:       "iceberg",
		connection: func(t *testing.T, e *harness.Env) string { return lake(e) },
		damage:     func(t *testing.T, ctx context.Context, e *harness.Env) { damageLake(t, ctx, lake(e)) },
		dump: func(t *testing.T, ctx context.Context, e *harness.Env) []string {
			rows := harness.ScanLake(t, lake(e), "public.orders")
			out := make([]string, 0, len(rows))
			for _, r := range rows {
				out = append(out, orderRow(r["id"], r["name"], r["amount"], r["tags"], r["doc"]))
			}
			return sortByID(out)
		},
	}}
}

// damageLake does resnapDamage to the lake's orders table: an Iceberg table has no SQL to run, so another
// pipeline ("damage") commits the same changes through the iceberg plugin's own protocol — rows deleted, rows
// changed, rows the source never had. Its commits are not the orders pipeline's: a re-snapshot must undo them.
func damageLake(t *testing.T, ctx context.Context, settings string) {
	t.Helper()
	bin := testplugins.Build(t, "iceberg")
	c, err := client.Start(ctx, client.Config{Path: bin, SHA256: testplugins.SHA256(t, bin)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill()
	sc := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "name", Type: arrow.BinaryTypes.String}}, []string{"id"})
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	row := func(op change.Op, id int64, name string) {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append(name)
		b.Row(op, "")
	}
	for id := int64(50); id <= 20000; id += 50 {
		row(change.OpDelete, id, "")
	}
	for id := int64(77); id <= 20000; id += 77 {
		if id%50 != 0 {
			row(change.OpUpdate, id, "damaged")
		}
	}
	for id := int64(1000001); id <= 1000300; id++ {
		row(change.OpInsert, id, "stray")
	}
	rec := b.NewBatch()
	defer rec.Release()
	ipc, err := protocol.EncodeRecord(memory.DefaultAllocator, rec)
	if err != nil {
		t.Fatal(err)
	}
	item := client.ApplyItem{Batch: &protocol.Batch{Stream: "public.orders", SchemaID: protocol.SchemaID(sc), Rows: rec.NumRows(), IPC: ipc}}
	if _, err := c.Apply(ctx, []byte(settings), "damage", 1, []client.ApplyItem{item}); err != nil {
		t.Fatalf("damage the lake table: %v", err)
	}
	got := harness.ScanLake(t, settings, "public.orders")
	if _, ok := got["50"]; ok || got["77"]["name"] != "damaged" || got["1000300"]["name"] != "stray" {
		t.Fatalf("the damage did not land: id 50 %v, 77 %v, 1000300 %v", got["50"], got["77"], got["1000300"])
	}
}

// sortByID orders rows "id|…" by their numeric id.
func sortByID(rows []string) []string {
	id := func(r string) int64 { n, _ := strconv.ParseInt(r[:strings.IndexByte(r, '|')], 10, 64); return n }
	slices.SortFunc(rows, func(a, b string) int { return cmp.Compare(id(a), id(b)) })
	return rows
}

func pgConn(t *testing.T, ctx context.Context, db *pgtest.DB) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, db.Server.ConnString(db.Name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// dumpOrders reads a Postgres orders table in orderRow's form, by id.
func dumpOrders(t *testing.T, ctx context.Context, c *pgx.Conn) []string {
	t.Helper()
	rows, err := c.Query(ctx, `SELECT id, name, amount::float8, tags, doc FROM orders ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var (
			id     int64
			name   string
			amount *float64
			tags   []string
			doc    any
		)
		if err := rows.Scan(&id, &name, &amount, &tags, &doc); err != nil {
			t.Fatal(err)
		}
		var a any
		if amount != nil {
			a = *amount
		}
		var tg any
		if tags != nil {
			tg = tags
		}
		out = append(out, orderRow(id, name, a, tg, doc))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestResnapshotWhileStreaming damages the destination (rows deleted, rows changed, rows the source never had),
// asks for a re-snapshot of the table while a writer keeps inserting, updating and deleting at the Postgres
// source, SIGKILLs `skippr sync` at random points of the copy, and then compares the destination with the
// source row by row — for each destination that applies re-snapshot marks. The destinations run side by side:
// each has its own source database, slot (slot names are the server's, not a database's), Env and destination,
// and most of a run is waiting on the copy and the kills.
func TestResnapshotWhileStreaming(t *testing.T) {
	for _, d := range resnapDests() {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			resnapshotWhileStreaming(t, d)
		})
	}
}

func resnapshotWhileStreaming(t *testing.T, d resnapDest) {
	src := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const n = 20000
	sc := pgConn(t, ctx, src)
	harness.CreateOrders(t, ctx, sc, n)

	e := harness.NewEnv(t)
	s := src.Server
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.orders], slot: resnap_%[4]s, publication: resnap, batch_size: 250 }
  dst:
    plugin: %[4]s
    version: "~> 0.1"
    settings: %[5]s
pipelines:
  orders:
    source: src
    destinations: [dst]
    wal:
      url: file://%[6]s
      group_commit: { max_bytes: 64KiB, max_delay: 50ms }
`, s.Host, s.Port, src.Name, d.name, d.connection(t, e), filepath.Join(e.Dir, "wal")))
	e.MustRun("sync", "--once")
	d.damage(t, ctx, e)

	if r := e.Run("resnapshot", "orders", "public.order"); r.Code != 2 || !strings.Contains(r.Stderr, `did you mean "public.orders"`) {
		t.Fatalf("a misspelt table: exit %d, stderr:\n%s", r.Code, r.Stderr)
	}
	stop := harness.StartOrdersWriter(t, ctx, pgConn(t, ctx, src), n+1)
	// The request reaches a sync that is already streaming: it restarts its Read with it and drops the request
	// once a checkpoint carrying it is durable. From then on only the source's checkpoint knows about the
	// re-snapshot, so the runs killed below must resume it from there.
	bg := e.Cmd(ctx, "sync")
	var bgErr bytes.Buffer
	bg.Stderr = &bgErr
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	e.MustRun("resnapshot", "orders", "public.orders")
	again := e.MustRun("resnapshot", "--json", "orders", "public.orders")
	if !strings.Contains(again.Stdout, `"stream":"public.orders"`) {
		t.Fatalf("resnapshot --json: %s", again.Stdout)
	}
	requests := filepath.Join(e.Home, "state", "orders-*", "resnapshot", "*.json")
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if left, _ := filepath.Glob(requests); len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			bg.Process.Signal(syscall.SIGKILL)
			bg.Wait()
			t.Fatalf("the running sync did not take the request; its stderr:\n%s", bgErr.String())
		}
	}
	bg.Process.Signal(syscall.SIGKILL)
	bg.Wait()
	kills := 5
	e.KillSyncAtRandom(kills, 700*time.Millisecond, 2500*time.Millisecond)
	stop()
	e.MustRun("sync", "--once")
	if left, _ := filepath.Glob(requests); len(left) != 0 {
		t.Fatalf("requests left after the re-snapshot: %v", left)
	}

	want, got := dumpOrders(t, ctx, sc), d.dump(t, ctx, e)
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			t.Fatalf("row %d differs:\nsource      %s\ndestination %s", i, want[i], got[i])
		}
	}
	if len(want) != len(got) {
		t.Fatalf("source has %d rows, destination %d", len(want), len(got))
	}
	t.Logf("%s: %d SIGKILLs during the re-snapshot; %d rows equal in source and destination", d.name, kills, len(want))
}

// TestResnapshotRefusedUpFront: a source that cannot re-snapshot (datagen) and a destination that cannot apply
// one make the request fail at once with exit 2, naming both, and nothing is recorded. A request a running sync
// finds anyway (written before the plugins changed, or by hand) is marked refused with the reason in `status`
// and dropped — never left waiting — while the pipeline goes on.
func TestResnapshotRefusedUpFront(t *testing.T) {
	e := harness.NewEnvWith(t, "datagen", "testdest")
	gen := `{ seed: 1, rows: 10, stream: orders }`
	write := func(destExtra string) {
		e.WriteConfig(harness.PipelineConfig(gen, filepath.Join(e.Dir, "out"), destExtra, "file://"+filepath.Join(e.Dir, "wal"), ""))
	}
	write(", no_resnapshot: true")
	requests := filepath.Join(e.Home, "state", "*", "resnapshot", "*.json")
	r := e.Run("resnapshot", "orders", "orders")
	for _, want := range []string{"source gen (plugin datagen) cannot re-snapshot a table", "destination out cannot apply a re-snapshot"} {
		if r.Code != 2 || !strings.Contains(r.Stderr, want) {
			t.Fatalf("exit %d, want 2 and %q; stderr:\n%s", r.Code, want, r.Stderr)
		}
	}
	if reqs, _ := filepath.Glob(requests); len(reqs) != 0 {
		t.Fatalf("a refused request was recorded: %v", reqs)
	}
	if r := e.Run("resnapshot", "orders"); r.Code != 2 {
		t.Fatalf("no table: exit %d, want 2:\n%s", r.Code, r.Stderr)
	}

	// The source alone lacking is refused too.
	write("")
	if r := e.Run("resnapshot", "orders", "orders"); r.Code != 2 || !strings.Contains(r.Stderr, "source gen (plugin datagen) cannot re-snapshot") || strings.Contains(r.Stderr, "destination") {
		t.Fatalf("exit %d, stderr:\n%s", r.Code, r.Stderr)
	}

	// A request the running sync finds.
	e.MustRun("sync", "--once")
	states, _ := filepath.Glob(filepath.Join(e.Home, "state", "orders-*"))
	if len(states) != 1 {
		t.Fatalf("state directories of orders: %v", states)
	}
	if _, err := (resnapshot.Store{Dir: filepath.Join(states[0], "resnapshot")}).Add([]string{"orders"}); err != nil {
		t.Fatal(err)
	}
	e.MustRun("sync", "--once")
	if reqs, _ := filepath.Glob(requests); len(reqs) != 0 {
		t.Fatalf("the refused request is still waiting: %v", reqs)
	}
	st := e.MustRun("status", "orders")
	if !strings.Contains(st.Stdout, "re-snapshot of orders: refused") || !strings.Contains(st.Stdout, "source gen (plugin datagen) cannot re-snapshot a table") {
		t.Fatalf("status:\n%s", st.Stdout)
	}
}

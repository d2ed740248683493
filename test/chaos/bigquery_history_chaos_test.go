package chaos

import (
	"context"
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

// TestPostgresToBigQueryHistorySurvivesSIGKILL runs Postgres → BigQuery (stand-in) with history, soft_delete
// and metadata columns through `skippr sync` while a writer inserts, updates and deletes, SIGKILLs the engine
// and the plugin, makes the plugin exit between staging and commit (test_crash_dir), and then checks that
// orders_history holds every change exactly once. The writer makes that checkable without a log of its own:
// every update appends one '+' to the name (the final one '!'), ids are never inserted twice, so per id the
// history, in (position, seq) order, must be a snapshot read or an insert, then updates each adding exactly one
// character, then at most a delete, ending where the source ends. A change recorded twice repeats a name or
// a delete; a change lost skips a character; either fails. The table must equal the source on its live rows
// (_skippr_deleted IS NOT TRUE), and a row flagged deleted must be one the source deleted.
func TestPostgresToBigQueryHistorySurvivesSIGKILL(t *testing.T) {
	src := pgtest.NewDB(t)
	bq := bigquerytest.Start(t, "skippr-chaos")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
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
	harness.CreateOrders(t, ctx, sc, 5000)

	e := harness.NewEnv(t)
	crashes := t.TempDir()
	e.MustRun("registry", "add", e.Registry, testplugins.Build(t, "bigquery"), "--name", "bigquery", "--version", "0.1.0", "--os", "linux", "--arch", "amd64")
	e.MustRun("registry", "sign", e.Registry, "--key", filepath.Join(e.Dir, "keys", "skippr-ed25519.key"))
	s := src.Server
	walDir := filepath.Join(e.Dir, "wal")
	// config writes the pipeline; held says the WAL holds the source back to the destination's pace, so the
	// first kill can land in the copy (KillSyncInCopy).
	config := func(held bool) {
		wal := "group_commit: { max_bytes: 256KiB, max_delay: 100ms }"
		if held {
			wal = harness.HeldWAL
		}
		e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.orders], slot: bqhist, publication: bqhist, batch_size: 1000 }
  warehouse:
    plugin: bigquery
    version: "~> 0.1"
    settings: { project: %[4]s, dataset: chaos, endpoint: "%[5]s", test_crash_dir: "%[7]s", history: true, soft_delete: true, metadata_columns: [op, position] }
    apply: { max_interval: 0s }
pipelines:
  orders:
    source: src
    destinations: [warehouse]
    delivery: exactly-once
    wal:
      url: file://%[6]s
      %[8]s
`, s.Host, s.Port, src.Name, bq.Project, bq.URL, walDir, crashes, wal))
	}
	config(true)

	// The writer starts once the slot has its consistent point, so every row it inserts is streamed (an insert
	// before that point would be a row of the copy, which the oracle below does not expect of ids above 5,000).
	// The first kill lands in the copy, while the writer changes rows the copy has not read yet, so the next run
	// resumes it under a fresh snapshot (README "History tables"); the other kills land anywhere.
	wc, pc := conn(), conn()
	var stopWriter func()
	writing := make(chan struct{})
	go func() {
		defer close(writing)
		for ctx.Err() == nil {
			var ready bool
			err := pc.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = 'bqhist' AND confirmed_flush_lsn IS NOT NULL)`).Scan(&ready)
			if err == nil && ready {
				stopWriter = harness.StartOrdersWriter(t, ctx, wc, 5001)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	e.KillSyncInCopy(walDir, "public.orders")
	<-writing // the copy was under way, so the slot had its consistent point
	if stopWriter == nil {
		t.Fatal("the writer never started")
	}
	config(false)
	kills := 6
	logs := e.KillSyncAtRandom(kills, 700*time.Millisecond, 3000*time.Millisecond)
	e.KillPluginAtRandom("skippr-plugin-bigquery", 300*time.Millisecond, 2000*time.Millisecond)
	stopWriter()
	for _, q := range []string{
		`UPDATE orders SET name = name || '!' WHERE id % 7 = 0`,
		`INSERT INTO orders VALUES (900001, 'late', 2.5, ARRAY['q'], '{"late": true}', now())`,
	} {
		if _, err := sc.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	logs += e.MustRun("sync", "--once").Stderr
	// What the postgres source logs when it resumes a copy under a fresh snapshot (plugins/postgres/source).
	copyResumed := strings.Contains(logs, "resuming the snapshot under a new snapshot")
	if !copyResumed {
		t.Fatalf("no run resumed the copy the first kill interrupted (the source logs %q)", "resuming the snapshot under a new snapshot")
	}

	hooks, err := os.ReadDir(crashes)
	if err != nil || len(hooks) == 0 {
		t.Fatalf("the plugin never reached its crash point before commit (%v)", err)
	}
	source := map[int64]string{}
	rows, err := sc.Query(ctx, `SELECT id, name FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var name string
		if err := rows.Scan(&id, &name); err != nil {
			t.Fatal(err)
		}
		source[id] = name
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	// The history, per id in (position, seq) order.
	type change struct {
		op   string
		name *string
		pos  int64
	}
	hist := map[int64][]change{}
	rows, err = bq.Pool().Query(ctx, `SELECT id, _skippr_op, name, _skippr_position FROM chaos.orders_history ORDER BY id, _skippr_position, _skippr_seq`)
	if err != nil {
		t.Fatal(err)
	}
	changes := 0
	for rows.Next() {
		var id int64
		var c change
		if err := rows.Scan(&id, &c.op, &c.name, &c.pos); err != nil {
			t.Fatal(err)
		}
		hist[id] = append(hist[id], c)
		changes++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	str := func(p *string) string {
		if p == nil {
			return "NULL"
		}
		return *p
	}
	describe := func(cs []change) string {
		var b strings.Builder
		for _, c := range cs {
			fmt.Fprintf(&b, "\n  %d %s %s", c.pos, c.op, str(c.name))
		}
		return b.String()
	}
	// A copy that a SIGKILL interrupted resumes under a fresh snapshot (the slot keeps every change since the
	// copy began, README "History tables"), so a row that changed after the copy began and before the resumed
	// copy reached it is read as it was when the copy resumed:
	//   - deleted in between: never read, so its history starts with its changes: updates (the chain below
	//     starts there), then the delete; or the delete alone; a row the writer inserted in between, with its
	//     insert, sent as an update;
	//   - updated, or inserted by the writer, in between: its snapshot row already has those changes, and the
	//     stream then repeats them from where the copy began, so the next change is an update to a name the
	//     snapshot's extends (an insert repeated as an update: the insert's name). The chain restarts there and
	//     must reach the snapshot's name again, one character at a time. Nothing else may precede a snapshot.
	// Rows the writer inserted after the copy start with their insert.
	resumed := 0
	for id, cs := range hist {
		first := cs[0]
		repeats := first.op == "snapshot" && first.name != nil && len(cs) > 1 && cs[1].op == "update" && cs[1].name != nil &&
			len(*cs[1].name) <= len(*first.name) && strings.HasPrefix(*first.name, *cs[1].name)
		switch {
		case repeats && !copyResumed:
			t.Fatalf("id %d: the history repeats changes after its snapshot row, and no copy was resumed (the copy then reads every row as it was when it began):%s", id, describe(cs))
		case repeats:
			resumed++
			cs = cs[1:]
		case (first.op == "snapshot" || first.op == "insert") && first.name != nil:
		case id <= 5000 && first.op == "update" && first.name != nil:
			resumed++
		case id > 5000 && first.op == "update" && first.name != nil && *first.name == "new" && copyResumed:
			// The writer's insert, before the resumed copy's snapshot and gone from it by a delete: streamed as
			// an update (the source sends such inserts as upserts: the copy may hold their row).
			resumed++
		case id <= 5000 && first.op == "delete" && len(cs) == 1:
			resumed++
		default:
			t.Fatalf("id %d: the history starts with %s %s, want a snapshot read or an insert (or, for a row changed before a resumed copy read it, that change):%s", id, first.op, str(first.name), describe(cs))
		}
		if first.op == "delete" {
			if _, live := source[id]; live {
				t.Fatalf("id %d: the history is one delete; the source holds the row:%s", id, describe(cs))
			}
			continue
		}
		name := *cs[0].name
		for i, c := range cs[1:] {
			switch {
			case c.op == "delete" && i == len(cs)-2:
			case c.op == "update" && c.name != nil && (*c.name == name+"+" || *c.name == name+"!"):
				name = *c.name
			default:
				t.Fatalf("id %d: change %d (%s %s) does not follow %q once — a change recorded twice or lost:%s", id, i+1, c.op, str(c.name), name, describe(cs))
			}
		}
		last := cs[len(cs)-1]
		want, live := source[id]
		switch {
		case live && (last.op == "delete" || name != want):
			t.Fatalf("id %d: the history ends at %s %q; the source holds %q:%s", id, last.op, name, want, describe(cs))
		case !live && last.op != "delete":
			t.Fatalf("id %d: the source deleted it, the history ends at %s %q:%s", id, last.op, name, describe(cs))
		}
	}
	for id := range source {
		if len(hist[id]) == 0 {
			t.Fatalf("id %d is in the source and has no history", id)
		}
	}

	// The table: its live rows are the source's; a row flagged deleted is one the source deleted, with the
	// values its history last had.
	rows, err = bq.Pool().Query(ctx, `SELECT id, name, _skippr_deleted IS TRUE FROM chaos.orders`)
	if err != nil {
		t.Fatal(err)
	}
	live, deleted := 0, 0
	for rows.Next() {
		var id int64
		var name string
		var del bool
		if err := rows.Scan(&id, &name, &del); err != nil {
			t.Fatal(err)
		}
		want, ok := source[id]
		switch {
		case del && ok:
			t.Fatalf("id %d is flagged deleted; the source holds %q", id, want)
		case del:
			cs := hist[id]
			if len(cs) < 2 || str(cs[len(cs)-2].name) != name {
				t.Fatalf("id %d is flagged deleted with name %q, not the last values of its history:%s", id, name, describe(cs))
			}
			deleted++
		case !ok || name != want:
			t.Fatalf("id %d: the table holds %q live; the source %q (held: %v)", id, name, want, ok)
		default:
			live++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if live != len(source) {
		t.Fatalf("the table has %d live rows, the source %d", live, len(source))
	}
	t.Logf("%d SIGKILLs of skippr sync (the first in the copy), one of the plugin, %d exits between staging and commit; %d changes in orders_history, each once (%d histories start at a change a resumed copy came after); %d live rows equal, %d flagged deleted",
		1+kills, len(hooks), changes, resumed, live, deleted)
}

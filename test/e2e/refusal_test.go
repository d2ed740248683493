package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// A Postgres table without a key fails the source's check: `sync --once` refuses the pipeline before reading
// (exit 2), naming the table and what to run, and writes nothing.
func TestRefusedAtStartTableWithoutKey(t *testing.T) {
	src := pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE nokey (a int, b text); INSERT INTO nokey VALUES (1, 'x')`)
	s := src.Server
	e := harness.NewEnv(t)
	wal := filepath.Join(e.Dir, "wal")
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %s, port: %d, user: postgres, database: %s, sslmode: disable, tables: [public.nokey], slot: nokey, publication: nokey }
  out:
    plugin: testdest
    version: ">= 0.1"
    settings: { dir: %s }
pipelines:
  orders:
    source: src
    destinations: [out]
    wal:
      url: file://%s
`, s.Host, s.Port, src.Name, filepath.Join(e.Dir, "out"), wal))
	e.SyncRefused("fix each problem listed", "check of source src failed", "table public.nokey has no primary key", "ADD PRIMARY KEY")
	e.NoWAL(wal)
	// Nothing on the server either: no slot was created.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, src.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var slots int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'nokey'`).Scan(&slots); err != nil || slots != 0 {
		t.Fatalf("slots named nokey: %d (%v), want none", slots, err)
	}
}

// MariaDB's DECIMAL(65,30) travels as decimal256, which an Iceberg table cannot hold: the pipeline is refused
// at start (exit 2) naming the table, the column and the type, instead of failing at the first batch.
func TestRefusedAtStartTypeTheDestinationCannotHold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv, err := mysqltest.Start(ctx, mysqltest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	db, err := sql.Open("mysql", srv.DSN("", "root", ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{
		"CREATE DATABASE shop",
		"CREATE TABLE shop.ledger (id bigint PRIMARY KEY, small decimal(12,2), big decimal(65,30))",
		"INSERT INTO shop.ledger VALUES (1, 1.25, 12345678901234567890123456789012345.123456789012345678901234567890)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	e := harness.NewEnv(t)
	e.MustRun("registry", "add", e.Registry, testplugins.Build(t, "mysql"), "--name", "mysql", "--version", "0.1.0", "--os", "linux", "--arch", "amd64")
	e.MustRun("registry", "sign", e.Registry, "--key", filepath.Join(e.Dir, "keys", "skippr-ed25519.key"))
	wal, lake := filepath.Join(e.Dir, "wal"), filepath.Join(e.Dir, "lake")
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: mysql
    version: "~> 0.1"
    settings: { host: %s, port: %d, user: root, database: shop, tables: [ledger] }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: { catalog: { warehouse: %q }, namespace: shop }
pipelines:
  orders:
    source: src
    destinations: [lake]
    wal:
      url: file://%s
`, srv.Host, srv.Port, lake, wal))
	row := e.SyncRefused("change the column's type in the source", "destination lake cannot hold", "column big: type decimal256(65, 30)")
	if strings.Contains(row.Fault.Message, "column small") {
		t.Fatalf("the refusal names a column the lake holds: %s", row.Fault.Message)
	}
	e.NoWAL(wal)
}

// A failed check in `skippr connect` exits 2 with the plugin's fix, like sync's refusal.
func TestConnectFailedCheckExits2(t *testing.T) {
	e := harness.NewEnv(t)
	e.WriteConfig("# pipelines\n")
	file := filepath.Join(e.Dir, "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.Run("connect", "out", "--plugin", "testdest", "--version", ">= 0.1", "--set", "dir="+filepath.Join(file, "out"))
	if r.Code != 2 || !strings.Contains(r.Stderr, "a-file/out is not writable") || !strings.Contains(r.Stderr, "fix: set the connection's dir") {
		t.Fatalf("connect with a directory it cannot create: exit %d, want 2 with the fix\n%s", r.Code, r.Stderr)
	}
}

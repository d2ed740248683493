package e2e

import (
	"context"
	"database/sql"
	"fmt"
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

// TestMySQLNULIntoPostgres (issue #28 item 6): a MariaDB VARCHAR or TEXT value holding a NUL character, which
// PostgreSQL text cannot store, follows the Postgres destination's on_unrepresentable, in the snapshot and in the
// stream: fail stops the pipeline with a data fault naming table, column and key, and writes none of it;
// null_and_record writes NULL and records the value in _skippr_meta, every other value equal to the source's.
func TestMySQLNULIntoPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv, err := mysqltest.Start(ctx, mysqltest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	my, err := sql.Open("mysql", srv.DSN("", "root", ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { my.Close() })
	exec := func(q string) {
		t.Helper()
		if _, err := my.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	mysqlPlugin := testplugins.Build(t, "mysql")
	for _, policy := range []string{"fail", "null_and_record"} {
		t.Run(policy, func(t *testing.T) {
			shop := "nul_" + policy
			exec(fmt.Sprintf(`CREATE DATABASE %[1]s;
				CREATE TABLE %[1]s.kv (id int PRIMARY KEY, v varchar(20), w text);
				INSERT INTO %[1]s.kv VALUES (1, 'a', 'plain'), (2, CONCAT('x', CHAR(0), 'y'), 'ok'), (3, NULL, NULL)`, shop))
			dst := pgtest.NewDB(t)
			e := harness.NewEnvWith(t, "postgres")
			e.MustRun("registry", "add", e.Registry, mysqlPlugin, "--name", "mysql", "--version", "0.1.0", "--os", "linux", "--arch", "amd64")
			e.MustRun("registry", "sign", e.Registry, "--key", filepath.Join(e.Dir, "keys", "skippr-ed25519.key"))
			e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: mysql
    version: "~> 0.1"
    settings: { host: %s, port: %d, user: root, database: %s, tables: [kv] }
  pg:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %s, port: %d, user: postgres, database: %s, sslmode: disable, schema: out, on_unrepresentable: %s }
pipelines:
  orders:
    source: src
    destinations: [pg]
    wal: { url: file://%s }
`, srv.Host, srv.Port, shop, dst.Server.Host, dst.Server.Port, dst.Name, policy, filepath.Join(e.Dir, "wal")))
			if policy == "fail" {
				e.SyncFails("data", "set on_unrepresentable: null_and_record in this destination's settings",
					`table "out"."kv" column v, row id=2: the value holds a NUL character (0x00)`)
				if got := pgRows(t, dst, false); got != "" {
					t.Fatalf("out.kv after the refused apply: %s, want no rows", got)
				}
				return
			}
			e.MustRun("sync", "--once")
			exec(fmt.Sprintf(`INSERT INTO %[1]s.kv VALUES (4, 'b', CONCAT(CHAR(0), 'lead')), (5, 'c', 'fine');
				UPDATE %[1]s.kv SET v = CONCAT('new', CHAR(0)) WHERE id = 1;
				UPDATE %[1]s.kv SET v = 'clean' WHERE id = 2`, shop))
			e.MustRun("sync", "--once")
			// The source's rows, a NUL value becoming NULL with its record.
			rows, err := my.QueryContext(ctx, fmt.Sprintf(`SELECT id, v, w FROM %s.kv ORDER BY id`, shop))
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var want []string
			for rows.Next() {
				var (
					id   int
					v, w sql.NullString
				)
				if err := rows.Scan(&id, &v, &w); err != nil {
					t.Fatal(err)
				}
				var changes []string
				cell := func(col string, s sql.NullString) string {
					switch {
					case !s.Valid:
						return "NULL"
					case strings.Contains(s.String, "\x00"):
						changes = append(changes, fmt.Sprintf(`{"column":"%s","reason":"PostgreSQL text cannot store a NUL character (0x00)","value":"%s"}`, col, strings.ReplaceAll(s.String, "\x00", `\u0000`)))
						return "NULL"
					}
					return s.String
				}
				line := fmt.Sprintf("%d|%s|%s", id, cell("v", v), cell("w", w))
				meta := "NULL"
				if len(changes) > 0 {
					meta = `{"changes":[` + strings.Join(changes, ",") + `]}`
				}
				want = append(want, line+"|"+meta)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if got := pgRows(t, dst, true); got != strings.Join(want, "\n") {
				t.Fatalf("out.kv:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
			}
		})
	}
}

// pgRows is out.kv's rows as id|v|w[|_skippr_meta] lines by id, NULL for NULL; "" when the table does not exist.
func pgRows(t *testing.T, db *pgtest.DB, meta bool) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.Server.ConnString(db.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('out.kv') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return ""
	}
	cols := "id::text, coalesce(v, 'NULL'), coalesce(w, 'NULL')"
	if meta {
		cols += ", coalesce(_skippr_meta, 'NULL')"
	}
	rows, err := conn.Query(ctx, "SELECT concat_ws('|', "+cols+") FROM out.kv ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, "\n")
}

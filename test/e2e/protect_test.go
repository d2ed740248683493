package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// protectSalt is the hash_columns salt; it reaches the plugin only through ${EMAIL_SALT}.
const protectSalt = "salt-Q7ZK-never-printed"

// hmacHex is what a hashed column must hold: the hex HMAC-SHA256 of the value's canonical text with the salt,
// computed here independently of plugin-sdk/protect.
func hmacHex(salt, v string) string {
	m := hmac.New(sha256.New, []byte(salt))
	m.Write([]byte(v))
	return hex.EncodeToString(m.Sum(nil))
}

// grepTree fails the test when any file under dir, or any of outputs, holds one of clear.
func grepTree(t *testing.T, dir string, outputs []string, clear ...string) int {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		for _, c := range clear {
			if strings.Contains(string(b), c) {
				t.Errorf("%s holds the clear value %q", p, c)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outputs {
		for _, c := range clear {
			if strings.Contains(o, c) {
				t.Errorf("output %d of the runs holds the clear value %q", i, c)
			}
		}
	}
	return files
}

// protectSource is one source database of the protected-columns scenario. Its table people has id (the key),
// name, email (hashed), ssn (excluded), pin (an integer, hashed) and born (a timestamp); every clear value of
// email and ssn holds CLEARMAIL or CLEARSSN, so one search finds any of them.
type protectSource struct {
	stream  string                           // the table's stream name
	exec    func(sql string)                 // runs SQL on the source
	conn    func(tableOptions string) string // the YAML settings of connection src
	rows    func() map[int][2]*string        // id → email, pin (as text) of the source table
	changes string                           // inserts 52..60, updates (new email and ssn where id % 5 = 0, email NULL for 7), deletes (id % 7 = 3)
}

// runProtectScenario (issue #32 item 4): the source removes ssn and replaces email and pin by their HMAC before
// anything leaves the plugin. Snapshot rows, inserts, updates and deletes pass through a pipeline whose WAL is
// uncompressed; afterwards no file of the test's whole directory (WAL, testdest's files, the engine's state)
// and no output of any run holds a clear value or the salt, and the destination's email and pin equal the
// HMACs computed here. A key column or a missing column is refused at start; changing the salt of a running
// pipeline is refused with the re-snapshot as the fix, and the re-snapshot applies the new salt to every row.
func runProtectScenario(t *testing.T, e *harness.Env, src protectSource) {
	e.ExtraEnv = append(e.ExtraEnv, "EMAIL_SALT="+protectSalt)
	out, walDir := filepath.Join(e.Dir, "out"), filepath.Join(e.Dir, "wal")
	paused := ""
	config := func(rules string) {
		e.WriteConfig(fmt.Sprintf(`connections:
  src:
%s
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
      compression: none
%s`, src.conn(rules), out, walDir, paused))
	}
	const rules = `{ exclude_columns: [ssn], hash_columns: { email: { salt: "${EMAIL_SALT}" }, pin: { salt: "${EMAIL_SALT}" } } }`
	var outputs []string
	run := func(args ...string) string {
		t.Helper()
		r := e.MustRun(args...)
		outputs = append(outputs, r.Stdout, r.Stderr)
		return r.Stderr
	}

	// Refused at start, naming table and column, before anything is read.
	config(`{ exclude_columns: [id] }`)
	e.SyncFails("config", "correct exclude_columns / hash_columns", "table "+src.stream+": key column id cannot be excluded")
	config(`{ hash_columns: { mail: { salt: "${EMAIL_SALT}" } } }`)
	e.SyncFails("config", "correct exclude_columns / hash_columns", "table "+src.stream+" has no column mail (hashed)")
	if err := os.RemoveAll(walDir); err != nil {
		t.Fatal(err)
	}

	// Each sync runs first with apply paused, so the WAL still holds the entries when it is searched (applied
	// ones are reclaimed); the digest of a value the entries carry must be found there, so the search sees data.
	inWAL := func(digest string) {
		t.Helper()
		paused = "    apply: { paused: true }\n"
		config(rules)
		run("sync", "--once")
		found := false
		filepath.WalkDir(walDir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				b, _ := os.ReadFile(p)
				found = found || strings.Contains(string(b), digest)
			}
			return nil
		})
		if !found {
			t.Fatalf("no WAL file holds %s: the search for clear values would see nothing", digest)
		}
		grepTree(t, walDir, nil, "CLEARMAIL", "CLEARSSN", protectSalt)
		paused = ""
		config(rules)
		run("sync", "--once")
	}
	inWAL(hmacHex(protectSalt, "u1-CLEARMAIL@example.com"))
	src.exec(src.changes)
	inWAL(hmacHex(protectSalt, "new5-CLEARMAIL@example.com"))
	run("status")

	check := func(salt string) {
		t.Helper()
		st, err := filedest.Load(out)
		if err != nil {
			t.Fatal(err)
		}
		got := st.Tables[src.stream]
		want := src.rows()
		if len(got) != len(want) || len(want) < 50 {
			t.Fatalf("destination has %d rows, source %d", len(got), len(want))
		}
		for id, vals := range want {
			row, ok := got[fmt.Sprint(id)]
			if !ok {
				t.Fatalf("row %d is missing downstream", id)
			}
			if _, ok := row["ssn"]; ok {
				t.Fatalf("row %d carries the excluded column ssn: %v", id, row)
			}
			for i, col := range []string{"email", "pin"} {
				var exp any
				if vals[i] != nil {
					exp = hmacHex(salt, *vals[i])
				}
				if row[col] != exp {
					t.Fatalf("row %d %s = %v, want %v", id, col, row[col], exp)
				}
			}
		}
	}
	check(protectSalt)
	files := grepTree(t, e.Dir, outputs, "CLEARMAIL", "CLEARSSN", protectSalt)
	t.Logf("rows hashed as expected; %d files and %d outputs hold no clear value", files, len(outputs))

	// Another salt on a running pipeline: refused, the fix is a re-snapshot, which applies it to every row.
	e.ExtraEnv = append(e.ExtraEnv, "EMAIL_SALT=another-salt")
	e.SyncFails("config", "put the old rules back, or re-snapshot the table so it is copied again under the new ones: skippr resnapshot PIPELINE "+src.stream,
		"exclude_columns, hash_columns or where of table "+src.stream+" changed")
	run("resnapshot", "orders", src.stream)
	if log := run("sync", "--once"); !strings.Contains(log, "exclude_columns/hash_columns/where changed: the new rules apply from this re-snapshot") ||
		!strings.Contains(log, "table="+src.stream) {
		t.Fatalf("the sync that took the new rules did not say so:\n%s", log)
	}
	check("another-salt")
	grepTree(t, e.Dir, outputs, "CLEARMAIL", "CLEARSSN", protectSalt, "another-salt")
}

// The scenario with the Postgres source.
func TestProtectedColumnsPostgres(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sc, err := pgx.Connect(ctx, db.Server.ConnString(db.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close(context.Background())
	exec := func(sql string) {
		t.Helper()
		if _, err := sc.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`CREATE TABLE people (id int PRIMARY KEY, name text, email text, ssn text, pin int, born timestamptz);
		INSERT INTO people SELECT i, 'n' || i, 'u' || i || '-CLEARMAIL@example.com', 'CLEARSSN-' || i, 4000 + i, '2000-01-01'::timestamptz + i * interval '1 day'
		FROM generate_series(1, 50) i;
		INSERT INTO people VALUES (51, 'nulls', NULL, NULL, NULL, NULL);
		ALTER TABLE people REPLICA IDENTITY FULL -- deletes and updates carry the whole old row, clear values too`)
	runProtectScenario(t, harness.NewEnvWith(t, "postgres", "testdest"), protectSource{
		stream: "public.people",
		exec:   exec,
		conn: func(opts string) string {
			return fmt.Sprintf(`    plugin: postgres
    version: "~> 0.1"
    settings:
      host: %s
      port: %d
      user: postgres
      database: %s
      sslmode: disable
      tables: [public.people]
      table_options: { public.people: %s }`, db.Server.Host, db.Server.Port, db.Name, opts)
		},
		rows: func() map[int][2]*string {
			rows, err := sc.Query(ctx, `SELECT id, email, pin::text FROM people`)
			if err != nil {
				t.Fatal(err)
			}
			out := map[int][2]*string{}
			for rows.Next() {
				var (
					id         int
					email, pin *string
				)
				if err := rows.Scan(&id, &email, &pin); err != nil {
					t.Fatal(err)
				}
				out[id] = [2]*string{email, pin}
			}
			if rows.Err() != nil {
				t.Fatal(rows.Err())
			}
			return out
		},
		changes: `INSERT INTO people SELECT i, 'n' || i, 'u' || i || '-CLEARMAIL@example.com', 'CLEARSSN-' || i, 4000 + i, now() FROM generate_series(52, 60) i;
		UPDATE people SET email = 'new' || id || '-CLEARMAIL@example.com', ssn = 'CLEARSSN-new' || id, name = 'changed' WHERE id % 5 = 0;
		UPDATE people SET email = NULL WHERE id = 7;
		UPDATE people SET id = id + 1000 WHERE id IN (2, 4);
		DELETE FROM people WHERE id % 7 = 3`,
	})
}

// The scenario with the MySQL source (MariaDB): the binlog carries full row images, before and after.
func TestProtectedColumnsMySQL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
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
	exec := func(q string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE DATABASE shop;
		CREATE TABLE shop.people (id int PRIMARY KEY, name varchar(50), email varchar(100), ssn varchar(40), pin int, born datetime(6));
		INSERT INTO shop.people SELECT seq, concat('n', seq), concat('u', seq, '-CLEARMAIL@example.com'), concat('CLEARSSN-', seq), 4000 + seq, '2000-01-01' + INTERVAL seq DAY FROM shop.seq_1_to_50;
		INSERT INTO shop.people VALUES (51, 'nulls', NULL, NULL, NULL, NULL)`)
	e := harness.NewEnvWith(t, "testdest")
	e.MustRun("registry", "add", e.Registry, testplugins.Build(t, "mysql"), "--name", "mysql", "--version", "0.1.0", "--os", "linux", "--arch", "amd64")
	e.MustRun("registry", "sign", e.Registry, "--key", filepath.Join(e.Dir, "keys", "skippr-ed25519.key"))
	runProtectScenario(t, e, protectSource{
		stream: "shop.people",
		exec:   exec,
		conn: func(opts string) string {
			return fmt.Sprintf(`    plugin: mysql
    version: "~> 0.1"
    settings: { host: %s, port: %d, user: root, database: shop, tables: [people], table_options: { people: %s } }`, srv.Host, srv.Port, opts)
		},
		rows: func() map[int][2]*string {
			rows, err := db.QueryContext(ctx, `SELECT id, email, CAST(pin AS CHAR) FROM shop.people`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			out := map[int][2]*string{}
			for rows.Next() {
				var (
					id         int
					email, pin sql.NullString
				)
				if err := rows.Scan(&id, &email, &pin); err != nil {
					t.Fatal(err)
				}
				var v [2]*string
				if email.Valid {
					v[0] = &email.String
				}
				if pin.Valid {
					v[1] = &pin.String
				}
				out[id] = v
			}
			if rows.Err() != nil {
				t.Fatal(rows.Err())
			}
			return out
		},
		changes: `INSERT INTO shop.people SELECT seq, concat('n', seq), concat('u', seq, '-CLEARMAIL@example.com'), concat('CLEARSSN-', seq), 4000 + seq, now() FROM shop.seq_52_to_60;
		UPDATE shop.people SET email = concat('new', id, '-CLEARMAIL@example.com'), ssn = concat('CLEARSSN-new', id), name = 'changed' WHERE id % 5 = 0;
		UPDATE shop.people SET email = NULL WHERE id = 7;
		UPDATE shop.people SET id = id + 1000 WHERE id IN (2, 4);
		DELETE FROM shop.people WHERE id % 7 = 3`,
	})
}

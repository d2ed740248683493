package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
	"github.com/skippr-dev/skippr/test/harness"
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

// Excluded and hashed columns (issue #32 item 4): the Postgres source removes ssn and replaces email and pin by
// their HMAC before anything leaves the plugin. Snapshot rows, inserts, updates (new and old email) and deletes
// pass through a pipeline whose WAL is uncompressed; afterwards no file of the test's whole directory (WAL,
// testdest's files, the engine's state and logs) and no output of any run holds a clear value or the salt, and
// the destination's email and pin equal the HMACs computed here. A key column or a missing column is refused at
// start; changing the salt of a running pipeline is refused with the re-snapshot as the fix, and the re-snapshot
// applies the new salt to every row.
func TestProtectedColumnsPostgres(t *testing.T) {
	src := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sc, err := pgx.Connect(ctx, src.Server.ConnString(src.Name))
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
	// Every clear value holds CLEARSSN or CLEARMAIL, so one grep finds any of them.
	exec(`CREATE TABLE people (id int PRIMARY KEY, name text, email text, ssn text, pin int, born timestamptz);
		INSERT INTO people SELECT i, 'n' || i, 'u' || i || '-CLEARMAIL@example.com', 'CLEARSSN-' || i, 4000 + i, '2000-01-01'::timestamptz + i * interval '1 day'
		FROM generate_series(1, 50) i;
		INSERT INTO people VALUES (51, 'nulls', NULL, NULL, NULL, NULL)`)

	e := harness.NewEnvWith(t, "postgres", "testdest")
	e.ExtraEnv = append(e.ExtraEnv, "EMAIL_SALT="+protectSalt)
	out := filepath.Join(e.Dir, "out")
	paused := ""
	config := func(rules string) {
		s := src.Server
		e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings:
      host: %s
      port: %d
      user: postgres
      database: %s
      sslmode: disable
      tables: [public.people]
      table_options: { public.people: %s }
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
%s`, s.Host, s.Port, src.Name, rules, out, filepath.Join(e.Dir, "wal"), paused))
	}
	const rules = `{ exclude_columns: [ssn], hash_columns: { email: { salt: "${EMAIL_SALT}" }, pin: { salt: "${EMAIL_SALT}" } } }`
	var outputs []string
	run := func(args ...string) {
		t.Helper()
		r := e.MustRun(args...)
		outputs = append(outputs, r.Stdout, r.Stderr)
	}

	// Refused at start, naming table and column, before anything is read.
	config(`{ exclude_columns: [id] }`)
	e.SyncFails("config", "correct exclude_columns / hash_columns", "table public.people: key column id cannot be excluded")
	config(`{ hash_columns: { mail: { salt: "${EMAIL_SALT}" } } }`)
	e.SyncFails("config", "correct exclude_columns / hash_columns", "table public.people has no column mail (hashed)")
	if err := os.RemoveAll(filepath.Join(e.Dir, "wal")); err != nil {
		t.Fatal(err)
	}

	// Each sync runs first with apply paused, so the WAL still holds the entries when it is searched (applied
	// ones are reclaimed); the digest of a value the entries carry must be found there, so the search sees data.
	walDir := filepath.Join(e.Dir, "wal")
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
	exec(`INSERT INTO people SELECT i, 'n' || i, 'u' || i || '-CLEARMAIL@example.com', 'CLEARSSN-' || i, 4000 + i, now() FROM generate_series(52, 60) i;
		UPDATE people SET email = 'new' || id || '-CLEARMAIL@example.com', ssn = 'CLEARSSN-new' || id, name = 'changed' WHERE id % 5 = 0;
		UPDATE people SET email = NULL WHERE id = 7;
		DELETE FROM people WHERE id % 7 = 3`)
	inWAL(hmacHex(protectSalt, "new5-CLEARMAIL@example.com"))
	run("status")

	st, err := filedest.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	check := func(st filedest.State, salt string) {
		t.Helper()
		got := st.Tables["public.people"]
		rows, err := sc.Query(ctx, `SELECT id, email, pin FROM people ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		for rows.Next() {
			var (
				id    int
				email *string
				pin   *int
			)
			if err := rows.Scan(&id, &email, &pin); err != nil {
				t.Fatal(err)
			}
			want++
			row, ok := got[fmt.Sprint(id)]
			if !ok {
				t.Fatalf("row %d is missing downstream", id)
			}
			if _, ok := row["ssn"]; ok {
				t.Fatalf("row %d carries the excluded column ssn: %v", id, row)
			}
			for col, v := range map[string]any{"email": email, "pin": pin} {
				var exp any
				switch v := v.(type) {
				case *string:
					if v != nil {
						exp = hmacHex(salt, *v)
					}
				case *int:
					if v != nil {
						exp = hmacHex(salt, fmt.Sprint(*v))
					}
				}
				if row[col] != exp {
					t.Fatalf("row %d %s = %v, want %v", id, col, row[col], exp)
				}
			}
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		if len(got) != want {
			t.Fatalf("destination has %d rows, source %d", len(got), want)
		}
	}
	check(st, protectSalt)
	files := grepTree(t, e.Dir, outputs, "CLEARMAIL", "CLEARSSN", protectSalt)
	t.Logf("%d rows hashed as expected; %d files and %d outputs hold no clear value", len(st.Tables["public.people"]), files, len(outputs))

	// Another salt on a running pipeline: refused, the fix is a re-snapshot, which applies it to every row.
	e.ExtraEnv = append(e.ExtraEnv, "EMAIL_SALT=another-salt")
	e.SyncFails("config", "put the old rules back, or re-snapshot the table so it is copied again under the new ones: skippr resnapshot PIPELINE public.people", "exclude_columns or hash_columns of table public.people changed")
	run("resnapshot", "orders", "public.people")
	run("sync", "--once")
	st, err = filedest.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	check(st, "another-salt")
	grepTree(t, e.Dir, outputs, "CLEARMAIL", "CLEARSSN", protectSalt, "another-salt")
}

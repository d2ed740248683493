package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestCheck: each misconfiguration fails Check with a message naming the problem and its fix; a correct
// non-superuser setup passes.
func TestCheck(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	owner := db.Server.CreateRole(t, "REPLICATION")
	plain := db.Server.CreateRole(t)
	reader := db.Server.CreateRole(t, "REPLICATION")
	db.Exec(t, `CREATE TABLE good (id int PRIMARY KEY, n int);
		CREATE TABLE nokey (a int);
		CREATE TABLE bag (a int, b text); ALTER TABLE bag REPLICA IDENTITY FULL;
		CREATE TABLE toasty (id int PRIMARY KEY, body text);
		CREATE TABLE nothing (id int PRIMARY KEY); ALTER TABLE nothing REPLICA IDENTITY NOTHING;
		ALTER TABLE good OWNER TO `+owner.Name+`;
		GRANT CREATE ON DATABASE `+db.Name+` TO `+owner.Name+`;
		GRANT SELECT ON good TO `+plain.Name+`;
		CREATE PUBLICATION notrunc FOR TABLE good WITH (publish = 'insert, update, delete');
		CREATE PUBLICATION haskeyless FOR TABLE good, nokey WITH (publish = 'insert, truncate');
		CREATE PUBLICATION haskeyless_append FOR TABLE nokey;
		CREATE PUBLICATION fullkeyless FOR TABLE good, nokey;
		CREATE PUBLICATION fullkeyless_append FOR TABLE nokey WITH (publish = 'insert, truncate');
		CREATE PUBLICATION okappend FOR TABLE good; CREATE PUBLICATION okappend_append FOR TABLE nokey WITH (publish = 'insert, truncate');
		CREATE PUBLICATION filtered FOR TABLE good WHERE (id > 10)`)
	as := func(r pgtest.Role, extra map[string]any) []byte {
		extra["user"], extra["password"] = r.Name, r.Password
		extra["slot"] = slot(db)
		return settings(db, extra)
	}
	src := startPlugin(t)
	for _, tc := range []struct {
		name     string
		settings []byte
		want     []string // every one must appear; none: the check passes
	}{
		{"good non-superuser", as(owner, map[string]any{"tables": []string{"good"}}), nil},
		{"wrong password", as(pgtest.Role{Name: owner.Name, Password: "nope"}, map[string]any{"tables": []string{"good"}}),
			[]string{"wrong password", owner.Name}},
		{"no REPLICATION attribute", as(plain, map[string]any{"tables": []string{"good"}}),
			[]string{"lacks the REPLICATION attribute", "ALTER ROLE"}},
		{"unknown table", as(owner, map[string]any{"tables": []string{"good", "public.missing"}}),
			[]string{"table public.missing does not exist"}},
		{"pattern matching nothing", as(owner, map[string]any{"tables": []string{"good", "sales.*"}}),
			[]string{"pattern sales.* matches no table"}},
		{"pattern matching a table without a key", settings(db, map[string]any{"tables": []string{"goo?", "no*"}, "slot": slot(db)}),
			[]string{"public.nokey has no primary key", "ADD PRIMARY KEY"}},
		{"no primary key", settings(db, map[string]any{"tables": []string{"nokey"}, "slot": slot(db)}),
			[]string{"public.nokey has no primary key", "ADD PRIMARY KEY"}},
		{"no primary key, mode: append", settings(db, map[string]any{"tables": []string{"good", "nokey"}, "slot": slot(db), "publication": "okappend",
			"table_options": map[string]any{"nokey": map[string]any{"mode": "append"}}}), nil},
		{"no primary key, mode: append, the publications made by hand publish its updates", settings(db, map[string]any{"tables": []string{"good", "nokey"}, "slot": slot(db), "publication": "haskeyless",
			"table_options": map[string]any{"nokey": map[string]any{"mode": "append"}}}),
			[]string{`publication "haskeyless_append" holds the tables in mode: append and must publish inserts (and truncates) only`, `publication "haskeyless" does not publish every insert, update and delete`}},
		{"no primary key, mode: append, also in the main publication", settings(db, map[string]any{"tables": []string{"good", "nokey"}, "slot": slot(db), "publication": "fullkeyless",
			"table_options": map[string]any{"nokey": map[string]any{"mode": "append"}}}),
			[]string{`table public.nokey is in mode: append, but publication "fullkeyless" publishes its updates and deletes`, `ALTER PUBLICATION "fullkeyless" DROP TABLE "public"."nokey"`}},
		{"no primary key, mode: full_row", settings(db, map[string]any{"tables": []string{"good", "bag"}, "slot": slot(db),
			"table_options": map[string]any{"bag": map[string]any{"mode": "full_row"}}}), nil},
		{"mode: full_row without REPLICA IDENTITY FULL", settings(db, map[string]any{"tables": []string{"nokey"}, "slot": slot(db),
			"table_options": map[string]any{"nokey": map[string]any{"mode": "full_row"}}}),
			[]string{"table public.nokey is in mode: full_row", `ALTER TABLE "public"."nokey" REPLICA IDENTITY FULL`}},
		{"mode: full_row on a table with a primary key", settings(db, map[string]any{"tables": []string{"good"}, "slot": slot(db),
			"table_options": map[string]any{"good": map[string]any{"mode": "full_row"}}}),
			[]string{"table public.good is in mode: full_row but has a primary key (id)"}},
		{"TOAST without REPLICA IDENTITY FULL", settings(db, map[string]any{"tables": []string{"toasty"}, "slot": slot(db), "unchanged_toast": "require_full"}),
			[]string{"body (text)", "REPLICA IDENTITY FULL", "unchanged_toast: fetch"}},
		{"TOAST with fetch", settings(db, map[string]any{"tables": []string{"toasty"}, "slot": slot(db), "unchanged_toast": "fetch"}), nil},
		{"TOAST with the default (fetch)", settings(db, map[string]any{"tables": []string{"toasty"}, "slot": slot(db)}), nil},
		{"REPLICA IDENTITY NOTHING", settings(db, map[string]any{"tables": []string{"nothing"}, "slot": slot(db)}),
			[]string{"REPLICA IDENTITY NOTHING"}},
		{"cannot read the table", as(reader, map[string]any{"tables": []string{"good"}}),
			[]string{"cannot read table public.good", "GRANT SELECT ON"}},
		{"cannot create the publication", as(reader, map[string]any{"tables": []string{"good"}, "publication": "p_" + db.Name}),
			[]string{"does not exist and role", "cannot create it", "CREATE PUBLICATION"}},
		{"publication without TRUNCATE under truncate: propagate", settings(db, map[string]any{"tables": []string{"good"}, "slot": slot(db), "publication": "notrunc"}),
			[]string{`publication "notrunc" does not publish TRUNCATE`, "truncate: ignore"}},
		{"publication without TRUNCATE under truncate: ignore", settings(db, map[string]any{"tables": []string{"good"}, "slot": slot(db), "publication": "notrunc", "truncate": "ignore"}), nil},
		{"row filter outside the replica identity", settings(db, map[string]any{"tables": []string{"good"}, "slot": slot(db), "publication": "p_" + db.Name,
			"table_options": map[string]any{"good": map[string]any{"where": "n > 0"}}}),
			[]string{"table_options.public.good.where (n > 0) cannot be a row filter", "not part of the replica identity"}},
		{"row filter the publication lacks", settings(db, map[string]any{"tables": []string{"good"}, "slot": slot(db), "publication": "okappend",
			"table_options": map[string]any{"good": map[string]any{"where": "id > 10"}}}),
			[]string{`publication "okappend" publishes every row of public.good`, `ADD TABLE "public"."good" WHERE (id > 10)`}},
		{"row filter the publication has", settings(db, map[string]any{"tables": []string{"good"}, "slot": slot(db), "publication": "filtered",
			"table_options": map[string]any{"good": map[string]any{"where": "id > 10"}}}), nil},
		{"bad settings", settings(db, map[string]any{"tables": []string{"good"}, "batch_size": -1, "truncate": "drop"}),
			[]string{"batch_size must be positive", `truncate "drop"`}},
		{"destination without the right to create", as(plain, map[string]any{"schema": "nope"}),
			[]string{`schema "nope" does not exist`, "CREATE SCHEMA"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := src.Check(ctx, tc.settings)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("check failed: %v", err)
				}
				return
			}
			var ce *client.CheckError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a failed check", err)
			}
			t.Log(ce.Message)
			for _, w := range tc.want {
				if !strings.Contains(ce.Message, w) {
					t.Errorf("message %q lacks %q", ce.Message, w)
				}
			}
		})
	}
}

// TestCheckServerSettings: wal_level below logical and a server without free slots, on servers of their own.
func TestCheckServerSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		conf  map[string]string
		setup string
		want  []string
	}{
		{"wal_level replica", map[string]string{"wal_level": "replica"}, "",
			[]string{`wal_level is "replica"`, "ALTER SYSTEM SET wal_level = logical"}},
		{"slots exhausted", map[string]string{"max_replication_slots": "2"},
			`SELECT pg_create_physical_replication_slot('one'); SELECT pg_create_physical_replication_slot('two')`,
			[]string{"all 2 replication slots are taken", "one, two", "pg_drop_replication_slot"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := pgtest.StartServer(t, pgtest.Options{Settings: tc.conf})
			db := srv.NewDB(t)
			db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY)`)
			if tc.setup != "" {
				db.Exec(t, tc.setup)
			}
			src := startPlugin(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := src.Check(ctx, settings(db, map[string]any{"tables": []string{"t"}, "slot": "s"}))
			var ce *client.CheckError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a failed check", err)
			}
			t.Log(ce.Message)
			for _, w := range tc.want {
				if !strings.Contains(ce.Message, w) {
					t.Errorf("message %q lacks %q", ce.Message, w)
				}
			}
		})
	}
}

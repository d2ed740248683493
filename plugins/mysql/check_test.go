package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// TestCheck: each broken precondition is reported with the statement that fixes it; a user with the
// documented grants passes.
func TestCheck(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY, v text); CREATE TABLE nokey (v text)`)
	srv := db.Server
	good := srv.CreateUser(t, "SELECT ON `"+db.Name+"`.*", "REPLICATION SLAVE, BINLOG MONITOR ON *.*")
	selectOnly := srv.CreateUser(t, "SELECT ON `"+db.Name+"`.*")
	c := startPlugin(t)
	as := func(u mysqltest.User, tables ...string) []byte {
		return settings(db, map[string]any{"tables": tables, "user": u.Name, "password": u.Password})
	}
	for _, tc := range []struct {
		name string
		set  []byte
		want []string // each must be in the error; none: Check passes
	}{
		{"granted", as(good, "a"), nil},
		{"wrong password", settings(db, map[string]any{"tables": []string{"a"}, "user": good.Name, "password": "nope"}),
			[]string{"refused user", "check the user and password"}},
		{"missing grants", as(selectOnly, "a"),
			[]string{"GRANT BINLOG MONITOR ON *.* TO '" + selectOnly.Name + "'", "GRANT REPLICATION SLAVE ON *.* TO '" + selectOnly.Name + "'"}},
		{"no primary key", as(good, "nokey"), []string{"has no primary key", "ADD PRIMARY KEY"}},
		{"unknown table", as(good, "missing"), []string{"does not exist", "check the tables setting"}},
		{"granted, by pattern", as(good, "?"), nil},
		{"pattern matching nothing", as(good, "a", "shop_*"), []string{"pattern shop_* matches no table"}},
		{"pattern matching a table without a key", as(good, "no*"), []string{"has no primary key", "ADD PRIMARY KEY"}},
		{"bad setting", settings(db, map[string]any{"tables": []string{"a"}, "zero_date": "zero"}), []string{`zero_date "zero" is not one of error, null`}},
		{"row filter", settings(db, map[string]any{"tables": []string{"a"}, "user": good.Name, "password": good.Password,
			"table_options": map[string]any{"a": map[string]any{"where": "nope = 1"}}}),
			[]string{"table_options.a.where (nope = 1) cannot be a row filter", "Unknown column 'nope'"}},
		{"volatile row filter", settings(db, map[string]any{"tables": []string{"a"}, "user": good.Name, "password": good.Password,
			"table_options": map[string]any{"a": map[string]any{"where": "id < RAND()"}}}),
			[]string{"RAND is not allowed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err := c.Check(ctx, tc.set)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("check: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("check passed, want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("check error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestCheckServerSettings: a server logging statements (not rows), minimal row images and metadata is
// refused with the statements that fix each.
func TestCheckServerSettings(t *testing.T) {
	t.Parallel()
	srv := mysqltest.StartServer(t, mysqltest.Options{Settings: map[string]string{
		"binlog_format": "STATEMENT", "binlog_row_image": "MINIMAL", "binlog_row_metadata": "MINIMAL"}})
	db := srv.NewDB(t)
	db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY)`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := startPlugin(t).Check(ctx, settings(db, map[string]any{"tables": []string{"a"}}))
	for _, w := range []string{"binlog_format is STATEMENT", "SET GLOBAL binlog_format = 'ROW'", "SET GLOBAL binlog_row_image = 'FULL'", "SET GLOBAL binlog_row_metadata = 'FULL'"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("check error lacks %q:\n%v", w, err)
		}
	}
}

package pgtest

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func TestSharedServer(t *testing.T) {
	db := NewDB(t)
	var walLevel string
	db.QueryRow(t, []any{&walLevel}, `SHOW wal_level`)
	if walLevel != "logical" {
		t.Errorf("wal_level = %q, want logical", walLevel)
	}
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	// A slot left behind must not stop the database from being dropped.
	db.Exec(t, `SELECT pg_create_logical_replication_slot('left_behind', 'pgoutput')`)
	if other := NewDB(t); other.Name == db.Name {
		t.Errorf("two tests got the same database %s", db.Name)
	}
}

func TestRolePassword(t *testing.T) {
	db := NewDB(t)
	r := db.Server.CreateRole(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, db.ConnStringAs(r))
	if err != nil {
		t.Fatalf("connect with the right password: %v", err)
	}
	c.Close(ctx)
	_, err = pgx.Connect(ctx, db.ConnStringAs(Role{Name: r.Name, Password: "wrong"}))
	if err == nil || !strings.Contains(err.Error(), "password authentication failed") {
		t.Fatalf("connect with a wrong password: got %v", err)
	}
}

func TestOwnServerSettings(t *testing.T) {
	s := StartServer(t, Options{Settings: map[string]string{"wal_level": "replica"}})
	db := s.NewDB(t)
	var walLevel string
	db.QueryRow(t, []any{&walLevel}, `SHOW wal_level`)
	if walLevel != "replica" {
		t.Errorf("wal_level = %q, want replica", walLevel)
	}
}

package mysqltest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/testkit/internal/proc"
)

// shared is the test binary's one server: started by the first test that needs it, stopped by Main.
var shared = proc.Shared[*Server]{
	Pkg:     "mysqltest",
	Timeout: 3 * time.Minute,
	StartFn: func(ctx context.Context) (*Server, error) { return Start(ctx, Options{}) },
}

// Main runs the package's tests, stops the shared server, runs cleanups and exits. Call it from TestMain:
//
//	func TestMain(m *testing.M) { mysqltest.Main(m) }
func Main(m *testing.M, cleanups ...func()) { shared.Main(m, cleanups...) }

// Shared returns the test binary's server, starting it on first use. The test fails when MariaDB is not
// installed or the package's TestMain does not call Main.
func Shared(t testing.TB) *Server {
	t.Helper()
	return shared.Get(t)
}

// StartServer starts a server of its own for one test (for settings the shared one must not have, or to purge
// its binary logs), stopped when the test ends.
func StartServer(t testing.TB, opts Options) *Server {
	t.Helper()
	return shared.Own(t, func(ctx context.Context) (*Server, error) { return Start(ctx, opts) })
}

// DB is a database made for one test.
type DB struct {
	Server *Server
	Name   string
}

// NewDB creates a fresh database on the shared server, dropped when the test ends.
func NewDB(t testing.TB) *DB { return Shared(t).NewDB(t) }

// NewDB creates a fresh database on s, dropped when the test ends.
func (s *Server) NewDB(t testing.TB) *DB {
	t.Helper()
	name := fmt.Sprintf("t%d_%s", s.dbSeq.Add(1), proc.Sanitize(t.Name(), 40))
	s.Exec(t, "CREATE DATABASE `"+name+"`")
	db := &DB{Server: s, Name: name}
	t.Cleanup(func() {
		if err := execDSN(s.DSN("", "root", ""), "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("mysqltest: drop database %s: %v", name, err)
		}
	})
	return db
}

// DSN is a go-sql-driver/mysql data source name for root to the database.
func (db *DB) DSN() string { return db.Server.DSN(db.Name, "root", "") }

// Open opens a database/sql handle as root (multi-statements allowed), closed when the test ends.
func (db *DB) Open(t testing.TB) *sql.DB {
	t.Helper()
	h, err := sql.Open("mysql", db.DSN())
	if err != nil {
		t.Fatalf("mysqltest: open %s: %v", db.Name, err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// Exec runs statements as root in the database; the test fails on error.
func (db *DB) Exec(t testing.TB, query string, args ...any) {
	t.Helper()
	if err := execDSN(db.DSN(), query, args...); err != nil {
		t.Fatalf("mysqltest: %s: %v", query, err)
	}
}

// QueryRow runs a query as root and scans its one row into dest; the test fails on error.
func (db *DB) QueryRow(t testing.TB, dest []any, query string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := sql.Open("mysql", db.DSN())
	if err != nil {
		t.Fatalf("mysqltest: open %s: %v", db.Name, err)
	}
	defer h.Close()
	if err := h.QueryRowContext(ctx, query, args...).Scan(dest...); err != nil {
		t.Fatalf("mysqltest: %s: %v", query, err)
	}
}

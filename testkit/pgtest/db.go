package pgtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// shared is the test binary's one server: started by the first test that needs it, stopped by Main.
var shared struct {
	mu   sync.Mutex
	main bool
	srv  *Server
	err  error
}

// Main runs the package's tests, stops the shared server, runs cleanups and exits. Call it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M, cleanups ...func()) {
	shared.mu.Lock()
	shared.main = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	if shared.srv != nil {
		if err := shared.srv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stop shared server: %v\n", err)
		}
		shared.srv = nil
	}
	templates.mu.Lock()
	if templates.dir != "" {
		os.RemoveAll(templates.dir)
		templates.dir = ""
	}
	templates.mu.Unlock()
	shared.mu.Unlock()
	for _, c := range cleanups {
		c()
	}
	os.Exit(code)
}

// Shared returns the test binary's server, starting it on first use. The test fails when PostgreSQL is not
// installed or the package's TestMain does not call Main.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.main {
		t.Fatalf("pgtest: the package's TestMain must call pgtest.Main(m), so the shared server is stopped after the tests")
	}
	if shared.srv == nil && shared.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared.srv, shared.err = Start(ctx, Options{})
	}
	if shared.err != nil {
		t.Fatalf("pgtest: %v", shared.err)
	}
	return shared.srv
}

// StartServer starts a server of its own for one test (for settings the shared one must not have), stopped
// when the test ends.
func StartServer(t testing.TB, opts Options) *Server {
	t.Helper()
	shared.mu.Lock()
	ok := shared.main
	shared.mu.Unlock()
	if !ok {
		t.Fatalf("pgtest: the package's TestMain must call pgtest.Main(m)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return s
}

// DB is a database made for one test.
type DB struct {
	Server *Server
	Name   string
}

// NewDB creates a fresh database on the shared server, dropped (with its replication slots) when the test ends.
func NewDB(t testing.TB) *DB { return Shared(t).NewDB(t) }

// NewDB creates a fresh database on s, dropped (with its replication slots) when the test ends.
func (s *Server) NewDB(t testing.TB) *DB {
	t.Helper()
	name := fmt.Sprintf("t%d_%s", s.dbSeq.Add(1), sanitize(t.Name(), 50))
	s.Exec(t, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	db := &DB{Server: s, Name: name}
	t.Cleanup(func() {
		if err := db.drop(); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return db
}

// drop removes the database's replication slots (ending the sessions that hold them) and the database.
func (db *DB) drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, db.Server.LocalConnString("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	for {
		rows, err := c.Query(ctx, `SELECT slot_name, coalesce(active_pid, 0) FROM pg_replication_slots WHERE database = $1`, db.Name)
		if err != nil {
			return fmt.Errorf("list replication slots: %w", err)
		}
		type slot struct {
			name string
			pid  int32
		}
		var slots []slot
		for rows.Next() {
			var s slot
			if err := rows.Scan(&s.name, &s.pid); err != nil {
				return err
			}
			slots = append(slots, s)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(slots) == 0 {
			break
		}
		for _, s := range slots {
			if s.pid != 0 {
				_, err = c.Exec(ctx, `SELECT pg_terminate_backend($1)`, s.pid)
			} else {
				_, err = c.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, s.name)
			}
			// The slot may have been dropped or released meanwhile: the next round looks again.
			_ = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replication slots of %s still active: %w", db.Name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	_, err = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db.Name}.Sanitize()+" WITH (FORCE)")
	return err
}

// ConnString is a keyword/value connection string for the superuser.
func (db *DB) ConnString() string { return db.Server.ConnString(db.Name) }

// ConnStringAs is a keyword/value connection string for role r.
func (db *DB) ConnStringAs(r Role) string { return db.Server.connString(db.Name, r.Name, r.Password) }

// Connect opens a superuser connection, closed when the test ends.
func (db *DB) Connect(t testing.TB) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, db.Server.LocalConnString(db.Name))
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", db.Name, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// Exec runs statements as the superuser; the test fails on error.
func (db *DB) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, db.Server.LocalConnString(db.Name))
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", db.Name, err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// QueryRow runs a query as the superuser and scans its one row into dest; the test fails on error.
func (db *DB) QueryRow(t testing.TB, dest []any, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, db.Server.LocalConnString(db.Name))
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", db.Name, err)
	}
	defer c.Close(context.Background())
	if err := c.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// Package dest is the DuckDB destination. An Apply is one DuckDB transaction: it creates missing tables from
// the stream's Arrow schema, adds the columns a grown schema brings, folds the rows so the last change of each
// key wins, loads the survivors with the appender into a temporary staging table and merges them into the
// table (by key: the keys' rows deleted, the survivors appended; a table without a key only appends), and records the
// sequence number in <schema>._skippr_state in the same transaction. A sequence number at or below the
// recorded one is skipped, so delivery is exactly-once. A coalesced range is committed in parts, each ending
// on a WAL entry with its own fence: when an entry alters a table an earlier entry of the transaction wrote
// (DuckDB refuses that commit; apply.go, writeEntry), and when the entries written into the open transaction
// reach Settings.PartBytes (a quarter of memory_limit), so that DuckDB's memory stays under memory_limit
// whatever the range (README, Memory).
//
// DuckDB lets one process at a time open a file for writing, so the destination keeps one database and one
// connection per file for the life of the plugin process, and Close releases the file.
package dest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

// StateTable holds, per pipeline, the last applied sequence number and the last one that touched each stream.
const StateTable = "_skippr_state"

// LockWait bounds how long the destination waits for another process to let go of the file: after a SIGKILL
// of the engine its orphaned plugin holds the lock until it notices its parent is gone (about half a second).
const LockWait = 30 * time.Second

// Destination applies WAL sequence numbers into DuckDB files. It implements serve.SessionDestination.
type Destination struct {
	Version string
	Log     *slog.Logger
	// SetMemoryLimit, when set, receives Settings.GoLimit when a database is opened (main passes
	// debug.SetMemoryLimit unless GOMEMLIMIT is set; tests in one process with other code leave it nil).
	SetMemoryLimit func(int64) int64

	// mu serialises every use of the databases: DuckDB has one writer per file anyway, and the last release
	// must not pull a database from under a running apply.
	mu  sync.Mutex
	dbs map[string]*openDB // by absolute path
}

// openDB is a database file open in this process, shared by the sessions (and checks) that name it: DuckDB
// must not open one file twice in a process.
type openDB struct {
	db   *sql.DB
	refs int
}

var _ serve.SessionDestination = (*Destination)(nil)

func (d *Destination) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.Default()
}

func (d *Destination) Spec() serve.Spec {
	return serve.Spec{Name: "duckdb", Version: d.Version, Kind: serve.KindDestination,
		Description:    "a DuckDB database file, exactly-once with upserts and deletes by primary key",
		SettingsSchema: json.RawMessage(SettingsSchema)}
}

// acquire returns the open database of s.Path, opening it if no one holds it. Callers hold d.mu and release it.
func (d *Destination) acquire(ctx context.Context, s Settings) (*sql.DB, error) {
	if o, ok := d.dbs[s.Path]; ok {
		o.refs++
		return o.db, nil
	}
	db, err := Open(ctx, s.Path, false, LockWait)
	if err != nil {
		return nil, err
	}
	// DuckDB's memory_limit is the database instance's; the file's first session sets it.
	if s.MemoryLimit != "" {
		if _, err := db.ExecContext(ctx, fmt.Sprintf("SET memory_limit = '%dKiB'", s.DuckDBLimit()>>10)); err != nil {
			db.Close()
			return nil, fault.ConfigErr(fmt.Errorf("database %s: memory_limit %q: %w", s.Path, s.MemoryLimit, err), "set the connection's memory_limit to a size such as 2GiB")
		}
		if d.SetMemoryLimit != nil {
			d.SetMemoryLimit(s.GoLimit())
		}
	}
	if d.dbs == nil {
		d.dbs = map[string]*openDB{}
	}
	d.dbs[s.Path] = &openDB{db: db, refs: 1}
	d.log().Debug("opened database", "path", s.Path)
	return db, nil
}

// release lets go of the database of path; the last one closes it, which checkpoints its WAL into the file and
// releases the file lock. Callers hold d.mu.
func (d *Destination) release(path string) error {
	o := d.dbs[path]
	if o == nil {
		return nil
	}
	if o.refs--; o.refs > 0 {
		return nil
	}
	delete(d.dbs, path)
	if err := o.db.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

// Open parses the settings and opens the database file (see Open): the session holds it until Close.
func (d *Destination) Open(ctx context.Context, raw json.RawMessage) (serve.Session, error) {
	s, err := ParseSettings(raw)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	db, err := d.acquire(ctx, s)
	if err != nil {
		return nil, err
	}
	return &session{d: d, s: s, db: db}, nil
}

// session is the destination open for one settings value.
type session struct {
	d  *Destination
	s  Settings
	db *sql.DB
}

// Close releases the database file.
func (x *session) Close() error {
	x.d.mu.Lock()
	defer x.d.mu.Unlock()
	return x.d.release(x.s.Path)
}

// Open opens a DuckDB file with a single connection (temporary staging tables live in a connection, and
// DuckDB has one writer anyway), creating the file and its directory unless readOnly. While another process
// holds the file it retries until ctx ends or wait passes.
func Open(ctx context.Context, path string, readOnly bool, wait time.Duration) (*sql.DB, error) {
	dsn := path
	if readOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("database %s: %w", path, err)
		}
		dsn += "?access_mode=READ_ONLY"
	} else if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fault.ConfigErr(fmt.Errorf("database %s: create its directory: %w", path, err), "set the connection's path to a file in a directory the plugin can create and write")
	}
	deadline := time.Now().Add(wait)
	for {
		c, err := duckdb.NewConnector(dsn, nil)
		if err == nil {
			db := sql.OpenDB(c)
			db.SetMaxOpenConns(1)
			db.SetMaxIdleConns(1)
			db.SetConnMaxLifetime(0)
			db.SetConnMaxIdleTime(0)
			return db, nil
		}
		if !isLockConflict(err) || time.Now().After(deadline) {
			return nil, explainOpen(path, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("database %s: %w (while waiting for: %v)", path, ctx.Err(), explainOpen(path, err))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func isLockConflict(err error) bool {
	return strings.Contains(err.Error(), "Could not set lock on file")
}

func explainOpen(path string, err error) error {
	msg := err.Error()
	switch {
	case isLockConflict(err):
		return fault.TransientErr(fmt.Errorf("database %s is open in another process (another skippr sync, or a DuckDB client holding it); DuckDB allows one writer per file: %w", path, err))
	case strings.Contains(msg, "Permission denied") || strings.Contains(msg, "Read-only file system"):
		return fault.ConfigErr(fmt.Errorf("database %s is not writable by this user (check the file's and its directory's permissions): %w", path, err), "make the file and its directory writable by the user running skippr, or set path elsewhere")
	case strings.Contains(msg, "Corrupt database file"), strings.Contains(msg, "Corrupt WAL file"):
		// Not retried: the same bytes fail the same way. DuckDB (1.5, and 2.0 too) can leave a torn block behind
		// a process killed while it writes a checkpoint (README, Crash safety); no setting of ours prevents it.
		return fault.ConfigErr(fmt.Errorf("database %s is damaged (a block's checksum does not match): %w", path, err),
			"keep the file for a report, move it and its .wal aside, and fill a new file from a fresh pipeline (a new name and wal.url): the destination's rows and its exactly-once record are in the damaged file")
	case strings.Contains(msg, "not a valid DuckDB database file"), strings.Contains(msg, "database file") && strings.Contains(msg, "version"):
		return fault.ConfigErr(fmt.Errorf("%s is not a DuckDB database this plugin can open (another program's file, or a newer DuckDB's): %w", path, err), "set the connection's path to a new file or to a database written by this DuckDB version")
	}
	return fmt.Errorf("open database %s: %w", path, err)
}

// Check opens the file (creating it), makes sure the schema and the state table exist, and writes and removes
// a probe file beside it, since DuckDB writes its WAL (path.wal) in the same directory on every commit.
func (d *Destination) Check(ctx context.Context, raw json.RawMessage) error {
	s, err := ParseSettings(raw)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(s.Path); err == nil && fi.IsDir() {
		return fault.ConfigErr(fmt.Errorf("path %s is a directory; name the .duckdb file inside it", s.Path), "set the connection's path to a .duckdb file")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	db, err := d.acquire(ctx, s)
	if err != nil {
		return err
	}
	defer d.release(s.Path)
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("database %s: %w", s.Path, err)
	}
	defer conn.Close()
	if err := ensureState(ctx, conn, s); err != nil {
		return err
	}
	probe, err := os.CreateTemp(filepath.Dir(s.Path), ".skippr-check-*")
	if err != nil {
		return fault.ConfigErr(fmt.Errorf("directory %s is not writable, but DuckDB writes %s.wal there on every commit: %w", filepath.Dir(s.Path), filepath.Base(s.Path), err), "make the directory writable by the user running skippr, or set path elsewhere")
	}
	probe.Close()
	if err := os.Remove(probe.Name()); err != nil {
		return fmt.Errorf("remove probe %s: %w", probe.Name(), err)
	}
	return nil
}

// Capabilities: exactly-once (the state row commits with the data), deletes, added columns, truncates,
// coalesced ranges, re-snapshots (resnapshot.go) and streams matched by full row (fullrow.go).
func (d *Destination) Capabilities(_ context.Context, raw json.RawMessage) (serve.Capabilities, error) {
	if _, err := ParseSettings(raw); err != nil {
		return serve.Capabilities{}, err
	}
	return serve.Capabilities{ExactlyOnce: true, Deletes: true, SchemaEvolution: true, Truncate: true, Coalesce: true, Resnapshot: true, FullRow: true, RenamedStream: true}, nil
}

// stateName is the state table's qualified name.
func stateName(s Settings) string { return ducksql.Ident(s.Schema) + "." + ducksql.Ident(StateTable) }

// execer is what both a connection and the applier's transaction run statements on.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ensureState creates the schema and the state table when missing.
func ensureState(ctx context.Context, x execer, s Settings) error {
	if _, err := x.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+ducksql.Ident(s.Schema)); err != nil {
		return fmt.Errorf("database %s: create schema %s: %w", s.Path, s.Schema, err)
	}
	if _, err := x.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+stateName(s)+
		" (pipeline VARCHAR PRIMARY KEY, sequence UBIGINT NOT NULL, streams VARCHAR NOT NULL DEFAULT '{}')"); err != nil {
		return fmt.Errorf("database %s: create %s: %w", s.Path, stateName(s), err)
	}
	return nil
}

// tableExists says whether schema.name exists; DuckDB resolves names without regard to case, and so does this.
func tableExists(ctx context.Context, x execer, schema, name string) (bool, error) {
	var n int
	err := x.QueryRowContext(ctx, `SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database()
		AND lower(schema_name) = lower(?) AND lower(table_name) = lower(?) AND NOT temporary`, schema, name).Scan(&n)
	return n > 0, err
}

// readState returns the pipeline's state row; a pipeline never applied has sequence 0.
func readState(ctx context.Context, x execer, s Settings, pipeline string) (serve.Applied, error) {
	a := serve.Applied{Streams: map[string]uint64{}}
	ok, err := tableExists(ctx, x, s.Schema, StateTable)
	if err != nil {
		return a, fmt.Errorf("database %s: %w", s.Path, err)
	}
	if !ok {
		return a, nil
	}
	var streams string
	err = x.QueryRowContext(ctx, "SELECT sequence, streams FROM "+stateName(s)+" WHERE pipeline = ?", pipeline).Scan(&a.Sequence, &streams)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return a, nil
	case err != nil:
		return a, fmt.Errorf("database %s: read %s: %w", s.Path, stateName(s), err)
	}
	if err := json.Unmarshal([]byte(streams), &a.Streams); err != nil {
		return a, fmt.Errorf("database %s: %s row of pipeline %s: streams %q: %w", s.Path, stateName(s), pipeline, streams, err)
	}
	return a, nil
}

// LastApplied reads the pipeline's state row.
func (x *session) LastApplied(ctx context.Context, pipeline string) (serve.Applied, error) {
	x.d.mu.Lock()
	defer x.d.mu.Unlock()
	return readState(ctx, x.db, x.s, pipeline)
}

// Apply commits one WAL sequence number, or a coalesced range of them, atomically with its record in the
// state table. Each entry of a range is written into the transaction once its last item arrived, so memory
// holds one entry, not the range.
func (x *session) Apply(ctx context.Context, r *serve.Range) (serve.ApplyResult, error) {
	x.d.mu.Lock()
	defer x.d.mu.Unlock()
	conn, err := x.db.Conn(ctx)
	if err != nil {
		return serve.ApplyResult{}, fmt.Errorf("database %s: %w", x.s.Path, err)
	}
	defer conn.Close()
	a := &applier{s: x.s, conn: conn, log: x.d.log()}
	return a.apply(ctx, r)
}

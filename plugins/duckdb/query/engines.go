package query

import (
	"container/list"
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

// DefaultEngineCacheBytes bounds the memory of the databases a WALCache keeps between statements (see
// engineCache): what DuckDB reports its databases use after they were built (the WAL part's tables, the
// small helper tables), summed. 256 MiB holds the newest versions of ≈ 2M narrow WAL rows; the most recently
// used database is kept even when it alone is larger.
const DefaultEngineCacheBytes = 256 << 20

// errOthersBuildFailed: the statement waited for a database another statement was building, and that build
// failed (with the other statement's context, perhaps): the statement builds its own.
var errOthersBuildFailed = errors.New("a concurrent statement's build of the database failed")

// engine is one in-memory DuckDB database holding a request's views: the lake part of each table (its plan's
// files read with read_parquet) and the WAL part (the newest versions, materialised). It is locked down
// (lockDown) before any user SQL runs in it, so every statement it answers is read-only towards the outside,
// and it answers only single SELECT statements (readOnlySQL), so no statement changes what another sees.
type engine struct {
	key     string
	db      *sql.DB
	dir     string   // DuckDB's allowed directory: spill files, and each statement's result files
	names   []string // the tables' names, sorted, for the "known tables" hint
	schemas []string // the search path (the lakes' namespaces, then main)
	bytes   int64
	batches map[int64]bool // the WAL cache's batches it holds rows of

	// Owned by engineCache.mu:
	refs  int
	dead  bool          // evicted or its batches dropped: closed when refs reaches 0
	elem  *list.Element // its place in the cache's LRU list; nil when out of it
	ready chan struct{} // closed once built (err says how)
	err   error
}

// engineCache keeps the databases a server's statements built, keyed by everything they depend on: each
// table's plan (a plan names the snapshot's files, schema and fence: the same plan is the same lake view),
// the WAL batches above its fence that the statement sees, and the request's options. A statement whose key
// is in the cache runs in a new connection of that database and builds nothing; concurrent statements with
// one key wait for one build. The WAL cache drops the databases holding rows of batches it drops
// (reclaimed, or its log replaced), and the least recently used go past the byte bound.
type engineCache struct {
	parent string // where each database's directory is made
	limit  int64

	mu      sync.Mutex
	entries map[string]*engine
	lru     *list.List // front: most recently used
	bytes   int64
	// builds counts the databases built for the cache; tests read it.
	builds int

	// selects remembers readOnlySQL's verdict per statement text: it is the parser's alone, and a dashboard
	// or a prepared statement sends the same text again (the check was ≈ 0.8 ms of a 13 ms point lookup).
	selects map[string]bool
}

// maxSelects bounds engineCache.selects; the map is emptied when full.
const maxSelects = 1024

// singleSelect is readOnlySQL remembered by statement text.
func (c *engineCache) singleSelect(ctx context.Context, conn *sql.Conn, q string) (bool, error) {
	c.mu.Lock()
	ok, known := c.selects[q]
	c.mu.Unlock()
	if known {
		return ok, nil
	}
	ok, err := readOnlySQL(ctx, conn, q)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	if c.selects == nil || len(c.selects) >= maxSelects {
		c.selects = map[string]bool{}
	}
	c.selects[q] = ok
	c.mu.Unlock()
	return ok, nil
}

func newEngineCache(parent string, limit int64) *engineCache {
	return &engineCache{parent: parent, limit: limit, entries: map[string]*engine{}, lru: list.New()}
}

// engineKey is the cache key of a request's database: the tables with their plans and WAL batch files, and
// the options that change the views or the database's settings.
func engineKey(tables []*table, asOfLake, includeDeleted bool, limit string) (string, error) {
	type tk struct {
		Pipeline, Namespace string
		Plan                lakequery.TablePlan
		WAL                 []string
		Truncated           bool
	}
	k := struct {
		Tables                   []tk
		AsOfLake, IncludeDeleted bool
		Limit                    string
	}{AsOfLake: asOfLake, IncludeDeleted: includeDeleted, Limit: limit}
	for _, t := range tables {
		k.Tables = append(k.Tables, tk{t.pipeline, t.namespace, t.plan, t.wal, t.truncated})
	}
	b, err := json.Marshal(k)
	if err != nil {
		return "", fmt.Errorf("query engine key: %w", err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:]), nil
}

// get returns the database of key, building it with build when the cache has none; release ends the
// statement's use of it.
func (c *engineCache) get(ctx context.Context, key string, batches map[int64]bool, build func(dir string) (*engine, error)) (e *engine, release func(), err error) {
	c.mu.Lock()
	e = c.entries[key]
	if e != nil {
		e.refs++
		if e.elem != nil {
			c.lru.MoveToFront(e.elem)
		}
		c.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			c.release(e)
			return nil, nil, ctx.Err()
		}
		if e.err != nil {
			c.release(e)
			return nil, nil, fmt.Errorf("%w: %v", errOthersBuildFailed, e.err)
		}
		return e, func() { c.release(e) }, nil
	}
	e = &engine{key: key, refs: 1, ready: make(chan struct{}), batches: batches}
	c.entries[key] = e
	c.builds++
	c.mu.Unlock()

	built, err := c.build(key, build)
	c.mu.Lock()
	if err != nil {
		e.err = err
		delete(c.entries, key)
		close(e.ready)
		e.refs--
		c.mu.Unlock()
		return nil, nil, err
	}
	e.db, e.dir, e.names, e.schemas, e.bytes = built.db, built.dir, built.names, built.schemas, built.bytes
	close(e.ready)
	if e.dead {
		// Its batches were dropped while it was built: this statement may still use it (its batch files were
		// held), no later one will.
		delete(c.entries, key)
	} else {
		e.elem = c.lru.PushFront(e)
		c.bytes += e.bytes
		c.evictLocked()
	}
	c.mu.Unlock()
	return e, func() { c.release(e) }, nil
}

func (c *engineCache) build(key string, build func(dir string) (*engine, error)) (*engine, error) {
	dir, err := os.MkdirTemp(c.parent, "skippr-engine-")
	if err != nil {
		return nil, fmt.Errorf("query engine: %w", err)
	}
	e, err := build(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return e, nil
}

func (c *engineCache) release(e *engine) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	if e.refs == 0 && e.dead {
		e.close()
	}
}

// evictLocked drops the least recently used databases while the cache is over its bound, keeping the newest.
func (c *engineCache) evictLocked() {
	for c.bytes > c.limit && c.lru.Len() > 1 {
		c.dropLocked(c.lru.Back().Value.(*engine))
	}
}

// dropLocked takes e out of the cache; it closes when its last statement ends.
func (c *engineCache) dropLocked(e *engine) {
	if e.elem != nil {
		c.lru.Remove(e.elem)
		e.elem = nil
		c.bytes -= e.bytes
	}
	if c.entries[e.key] == e {
		delete(c.entries, e.key)
	}
	e.dead = true
	if e.refs == 0 {
		e.close()
	}
}

// dropBatches drops the databases holding rows of the WAL cache's batches ids.
func (c *engineCache) dropBatches(ids []int64) {
	if len(ids) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		for _, id := range ids {
			if e.batches[id] {
				c.dropLocked(e)
				break
			}
		}
	}
}

// closeAll closes every database no statement uses, and marks the others to close when their statements end.
func (c *engineCache) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.entries {
		c.dropLocked(e)
	}
}

// close closes the database and removes its directory (the cache's lock held, or the engine never shared).
func (e *engine) close() {
	if e.db != nil {
		e.db.Close()
		e.db = nil
	}
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}

// buildEngine opens an in-memory database under dir and defines the tables' views in it, then locks it down.
func buildEngine(ctx context.Context, tables []*table, asOfLake, includeDeleted bool, limit, dir string) (_ *engine, err error) {
	// searchPath is set once the views exist; each connection opened after that starts with it (connInit),
	// so a statement's connection, new or reused from the pool, needs no SET of its own (≈ 0.3 ms of a lookup).
	var searchPath atomic.Pointer[string]
	connector, err := duckdb.NewConnector("", func(ex driver.ExecerContext) error {
		if p := searchPath.Load(); p != nil {
			if _, err := ex.ExecContext(context.Background(), setSearchPath(*p), nil); err != nil {
				return fmt.Errorf("search path %s: %w", *p, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("open duckdb: %w", err)
	}
	db := sql.OpenDB(connector)
	defer func() {
		if err != nil {
			db.Close()
		}
	}()
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("open duckdb: %w", err)
	}
	defer conn.Close()
	settings := []string{
		"SET temp_directory = " + ducksql.Literal(filepath.Join(dir, "spill")),
		// The merge's anti-join of the lake (millions of rows) against the WAL's keys (thousands) was flipped to
		// build its hash table on the lake side, which doubled a full aggregate's time (EXPLAIN ANALYZE, 1M-row
		// lake: 0.26 s in the join, 0.02 s unflipped). The join order optimizer still puts the smaller side of
		// a user's own joins on the build side.
		"SET disabled_optimizers = 'build_side_probe_side'",
		// A database answers many statements over the same files: each file's footer is read once.
		"SET parquet_metadata_cache = true",
	}
	if limit != "" {
		settings = append(settings, "SET memory_limit = "+ducksql.Literal(limit))
	}
	for _, s := range settings {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return nil, fmt.Errorf("%s: %w", s, err)
		}
	}
	e := &engine{db: db, dir: dir}
	seenSchema := map[string]bool{}
	for i, t := range tables {
		if err := t.create(ctx, conn, i, asOfLake, includeDeleted); err != nil {
			return nil, err
		}
		e.names = append(e.names, t.plan.Name)
		if s := t.schemaName(); !seenSchema[s] {
			seenSchema[s] = true
			e.schemas = append(e.schemas, s)
		}
	}
	sort.Strings(e.names)
	if len(e.schemas) > 0 {
		e.schemas = append(e.schemas, "main")
	}
	if err := lockDown(ctx, conn, tables, dir); err != nil {
		return nil, err
	}
	if len(e.schemas) > 0 {
		// Bare table names resolve in the lakes' namespaces (the first that has the name wins). The build's
		// connection goes back to the pool too, so it gets the path here; later ones get it from connInit.
		path := strings.Join(e.schemas, ",")
		if _, err := conn.ExecContext(ctx, setSearchPath(path)); err != nil {
			return nil, fmt.Errorf("search path %s: %w", path, err)
		}
		searchPath.Store(&path)
	}
	// What the database holds now (the WAL part's tables); the buffers a statement uses come and go.
	if err := conn.QueryRowContext(ctx, "SELECT coalesce(sum(memory_usage_bytes), 0)::BIGINT FROM duckdb_memory()").Scan(&e.bytes); err != nil {
		return nil, fmt.Errorf("query engine memory: %w", err)
	}
	return e, nil
}

// setSearchPath is the statement that makes bare table names resolve in path's schemas.
func setSearchPath(path string) string { return "SET search_path = " + ducksql.Literal(path) }

// conn is a connection of the database, its search path set (buildEngine). A statement may only be a single
// SELECT, which changes no setting of the connection, so a connection reused from the pool is as new.
func (e *engine) conn(ctx context.Context) (*sql.Conn, error) {
	conn, err := e.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("open duckdb connection: %w", err)
	}
	return conn, nil
}

// readOnlySQL says whether q is one SELECT statement, which a cached database may answer: it reads, and
// leaves nothing another statement of the database would see. DuckDB's parser says so (json_serialize_sql
// serializes SELECT statements only); anything else — DDL, SET, several statements, EXPLAIN ANALYZE of a
// statement that writes, or SQL that does not parse — is answered in a database of its own, which dies with
// it. (Preparing q would not do: duckdb-go runs all but the last of several statements to prepare the last.)
func readOnlySQL(ctx context.Context, conn *sql.Conn, q string) (bool, error) {
	var js string
	if err := conn.QueryRowContext(ctx, "SELECT json_serialize_sql(?::VARCHAR)::VARCHAR", q).Scan(&js); err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, nil
	}
	var parsed struct {
		Error      bool              `json:"error"`
		Statements []json.RawMessage `json:"statements"`
	}
	if err := json.Unmarshal([]byte(js), &parsed); err != nil {
		return false, nil
	}
	return !parsed.Error && len(parsed.Statements) == 1, nil
}

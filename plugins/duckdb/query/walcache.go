package query

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

// WALCache keeps the WAL entries a long-lived server (`skippr serve`) sent between its queries
// (lakequery.ServiceWALCache): each entry crosses the plugin boundary and is encoded as Parquet once, and the
// newest version of each key of a table's WAL rows is built once per (lake fence, WAL tail) and reused by every
// query that sees the same entries, instead of once per query.
//
// What a query sees stays exactly what the request names (lakequery.WALState): for each table the entries
// above its plan's fence and at or below Through. A request that builds on entries the cache does not hold —
// another Log (the engine started over), a Base above what arrived, or a plan whose fence is below entries
// dropped since (a newer request's Floor) — fails with lakequery.ErrStale before it reads anything, and the
// engine sends the statement again with every entry.
//
// The merged rows live in DuckDB database files that each query attaches read-only in its own in-memory
// database (so a query's SQL can neither change them nor see another query's objects); a file is deleted once
// no running query uses it and its stream's queries used keepRecent newer ones since.
type WALCache struct {
	parent string // where dir is made, at the first query that uses the cache
	dir    string

	mu     sync.Mutex
	util   *sql.DB // builds the merged files; no user SQL runs here
	pipes  map[string]*pipeWAL
	merged map[mergeKey]*mergedFile
	recent map[streamKey][]mergeKey // the merged files each stream's queries used last (keepRecent), kept while unused
	order  int64                    // the next WAL row's place in the log
	ids    int64                    // names batch and merged files
	// builds counts the merged files built (not reused); tests read it.
	builds int
}

// pipeWAL is what the cache holds of one pipeline's WAL: the entries in (lo, hi] of Log, as batch files in log
// order.
type pipeWAL struct {
	log     string
	lo, hi  uint64
	batches []*cachedBatch
}

// cachedBatch is one batch of a WAL entry written to Parquet (as collect writes them), or a truncate.
type cachedBatch struct {
	id       int64
	seq      uint64
	stream   string
	path     string
	truncate bool
	key      []string
	uuids    map[string]bool
}

// mergeKey names a merged file by the run of batches it holds (ids are never reused) and the key it merged on.
type mergeKey struct {
	first, last int64
	key         string
}

type mergedFile struct {
	path string
	refs int // running queries that attached it
}

// NewWALCache returns a cache keeping its files under a new directory in dir (the system's temp directory when
// ""), made when a query first uses the cache (a plugin process that answers no server's query makes none).
// Close removes them.
func NewWALCache(dir string) *WALCache {
	return &WALCache{parent: dir, pipes: map[string]*pipeWAL{}, merged: map[mergeKey]*mergedFile{}, recent: map[streamKey][]mergeKey{}}
}

// Close removes the cache's files.
func (c *WALCache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if c.util != nil {
		err = c.util.Close()
		c.util = nil
	}
	if c.dir != "" {
		err = errors.Join(err, os.RemoveAll(c.dir))
		c.dir = ""
	}
	return err
}

// collect is the cached counterpart of the package's collect: it takes the stream's new entries into the cache
// and gives each table the merged file of the WAL rows the request sees (table.walDB). release ends the query's
// use of those files.
func (c *WALCache) collect(ctx context.Context, req lakequery.Request, rd *lakequery.Reader) (tables []*table, release func(), err error) {
	tables, _, err = requestTables(req)
	if err != nil {
		return nil, nil, err
	}
	states := map[string]lakequery.WALState{}
	for _, ws := range req.WAL {
		states[ws.Pipeline] = ws
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp(c.parent, "skippr-walcache-"); err != nil {
			return nil, nil, fmt.Errorf("WAL cache: %w", err)
		}
	}
	for _, ws := range req.WAL {
		p := c.pipes[ws.Pipeline]
		if p == nil || p.log != ws.Log {
			if ws.Base != 0 {
				return nil, nil, fmt.Errorf("%w: pipeline %s: the stream builds on entries up to %d of log %s, which this engine never received", lakequery.ErrStale, ws.Pipeline, ws.Base, ws.Log)
			}
			if p != nil {
				c.dropBatches(p, len(p.batches))
			}
			p = &pipeWAL{log: ws.Log}
			c.pipes[ws.Pipeline] = p
		}
		if ws.Base > p.hi {
			return nil, nil, fmt.Errorf("%w: pipeline %s: the stream builds on entries up to %d, the engine holds up to %d", lakequery.ErrStale, ws.Pipeline, ws.Base, p.hi)
		}
	}
	if err := c.ingest(rd, states); err != nil {
		return nil, nil, err
	}
	for _, ws := range req.WAL {
		p := c.pipes[ws.Pipeline]
		if ws.Floor > p.lo {
			// Applied everywhere and reclaimed: every plan from now on has its fence at or above the floor.
			n := 0
			for n < len(p.batches) && p.batches[n].seq <= ws.Floor {
				n++
			}
			c.dropBatches(p, n)
			p.lo = ws.Floor
		}
	}
	var used []*mergedFile
	releaseLocked := func() {
		for _, m := range used {
			m.refs--
		}
		c.sweep()
	}
	release = func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		releaseLocked()
	}
	for _, t := range tables {
		ws, ok := states[t.pipeline]
		if !ok {
			continue
		}
		m, err := c.tableWAL(ctx, t, ws)
		if err != nil {
			releaseLocked()
			return nil, nil, err
		}
		if m != nil {
			m.refs++
			used = append(used, m)
		}
	}
	return tables, release, nil
}

// ingest writes the stream's entries that the cache does not hold yet to batch files.
func (c *WALCache) ingest(rd *lakequery.Reader, states map[string]lakequery.WALState) error {
	for {
		e, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p, ok := c.pipes[e.Pipeline]
		if _, named := states[e.Pipeline]; !ok || !named {
			return fmt.Errorf("query stream: entry %d of pipeline %s, which the request's WAL states do not name", e.Seq, e.Pipeline)
		}
		if e.Seq <= p.hi || e.Seq <= p.lo {
			continue // held already (a stream sent again in full), or reclaimed
		}
		n := len(p.batches)
		for _, b := range e.Batches {
			c.ids++
			wb := &cachedBatch{id: c.ids, seq: e.Seq, stream: b.Stream, truncate: b.Truncate}
			if !b.Truncate {
				wb.path = filepath.Join(c.dir, fmt.Sprintf("wal-%08d.parquet", wb.id))
				rows, key, uuids, err := writeWALBatch(wb.path, b.IPC, &c.order)
				if err != nil {
					os.Remove(wb.path)
					c.dropTail(p, n) // the entry is taken whole or not at all
					return fmt.Errorf("pipeline %s: WAL entry %d: stream %s: %w", e.Pipeline, e.Seq, b.Stream, err)
				}
				if rows == 0 {
					os.Remove(wb.path)
					continue
				}
				wb.key, wb.uuids = key, uuids
			}
			p.batches = append(p.batches, wb)
		}
		p.hi = e.Seq
	}
}

// tableWAL gives t the WAL rows the request sees: the batches of its stream above its fence (or the floor,
// for a table without one) and at or below Through, after the last truncate among them. It returns the merged
// file t reads, nil when there are no rows.
func (c *WALCache) tableWAL(ctx context.Context, t *table, ws lakequery.WALState) (*mergedFile, error) {
	p := c.pipes[t.pipeline]
	from := max(t.plan.Fence, ws.Floor)
	if p.lo > from {
		return nil, fmt.Errorf("%w: table %s: the plan's fence %d is below WAL entries dropped since (through %d)", lakequery.ErrStale, t.plan.Name, t.plan.Fence, p.lo)
	}
	var run []*cachedBatch
	for _, b := range p.batches {
		if b.stream != t.plan.Stream || b.seq <= from || b.seq > ws.Through {
			continue
		}
		if b.truncate {
			t.truncated = true
			run = run[:0]
			continue
		}
		run = append(run, b)
	}
	if len(run) == 0 {
		return nil, nil
	}
	for _, b := range run {
		if len(b.key) > 0 {
			t.walKey = b.key
		}
	}
	key := t.key()
	k := mergeKey{first: run[0].id, last: run[len(run)-1].id, key: strings.Join(key, "\x00")}
	m := c.merged[k]
	if m == nil {
		var err error
		if m, err = c.build(ctx, k, run, key); err != nil {
			return nil, fmt.Errorf("table %s: WAL rows: %w", t.plan.Name, err)
		}
		c.merged[k] = m
	}
	sk := streamKey{t.pipeline, t.plan.Stream}
	r := slices.DeleteFunc(c.recent[sk], func(x mergeKey) bool { return x == k })
	c.recent[sk] = append(r[max(0, len(r)+1-keepRecent):], k)
	t.walDB = m.path
	return m, nil
}

// build writes the newest version of each key among the run's rows (every row, for a table without a key) to
// a new DuckDB file, in table w, with UUIDs cast as the temp table of an uncached query casts them.
func (c *WALCache) build(ctx context.Context, k mergeKey, run []*cachedBatch, key []string) (*mergedFile, error) {
	if c.util == nil {
		db, err := sql.Open("duckdb", "")
		if err != nil {
			return nil, fmt.Errorf("open duckdb: %w", err)
		}
		db.SetMaxOpenConns(1)
		if _, err := db.ExecContext(ctx, "SET temp_directory = "+ducksql.Literal(filepath.Join(c.dir, "spill"))); err != nil {
			db.Close()
			return nil, err
		}
		c.util = db
	}
	c.ids++
	path := filepath.Join(c.dir, fmt.Sprintf("merged-%08d.duckdb", c.ids))
	files := make([]string, len(run))
	uuids := map[string]bool{}
	for i, b := range run {
		files[i] = ducksql.Literal(b.path)
		maps.Copy(uuids, b.uuids)
	}
	sel := "*"
	if len(uuids) > 0 {
		var repl []string
		for _, col := range slices.Sorted(maps.Keys(uuids)) {
			expr := uuidFromBlob(ducksql.Ident(col))
			if uuids[col] {
				expr = uuidListFromBlobs(ducksql.Ident(col))
			}
			repl = append(repl, expr+" AS "+ducksql.Ident(col))
		}
		sel = "* REPLACE (" + strings.Join(repl, ", ") + ")"
	}
	q := fmt.Sprintf("SELECT %s FROM read_parquet([%s], union_by_name = true)", sel, strings.Join(files, ", "))
	if len(key) > 0 {
		// Sorted by key, so that a lookup by key reads few of the file's row groups.
		q = fmt.Sprintf("SELECT * FROM (%s) QUALIFY row_number() OVER (PARTITION BY %s ORDER BY %s DESC) = 1 ORDER BY %s",
			q, strings.Join(quoteAll(key), ", "), orderColumn, strings.Join(quoteAll(key), ", "))
	}
	const alias = "_skippr_merged"
	for _, s := range []string{
		"ATTACH " + ducksql.Literal(path) + " AS " + alias,
		"CREATE TABLE " + alias + ".w AS " + q,
		"DETACH " + alias,
	} {
		if _, err := c.util.ExecContext(ctx, s); err != nil {
			c.util.ExecContext(context.WithoutCancel(ctx), "DETACH DATABASE IF EXISTS "+alias)
			os.Remove(path)
			return nil, fmt.Errorf("%s: %w", s, err)
		}
	}
	c.builds++
	return &mergedFile{path: path}, nil
}

// dropBatches removes the first n batches of p.
func (c *WALCache) dropBatches(p *pipeWAL, n int) {
	for _, b := range p.batches[:n] {
		if b.path != "" {
			os.Remove(b.path)
		}
	}
	p.batches = slices.Delete(p.batches, 0, n)
}

// dropTail removes p's batches from index n on.
func (c *WALCache) dropTail(p *pipeWAL, n int) {
	for _, b := range p.batches[n:] {
		if b.path != "" {
			os.Remove(b.path)
		}
	}
	p.batches = p.batches[:n]
}

// keepRecent merged files of each stream stay while no query uses them: concurrent statements that started
// at different WAL tails (or saw different fences) take turns without building their merged rows again.
const keepRecent = 3

// sweep deletes the merged files no running query uses that are not among their stream's recent ones.
func (c *WALCache) sweep() {
	keep := map[mergeKey]bool{}
	for _, ks := range c.recent {
		for _, k := range ks {
			keep[k] = true
		}
	}
	for k, m := range c.merged {
		if m.refs == 0 && !keep[k] {
			os.Remove(m.path)
			os.Remove(m.path + ".wal")
			delete(c.merged, k)
		}
	}
}

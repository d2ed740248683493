package query

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

// WALCache keeps the WAL entries a long-lived server (`skippr serve`) sent between its queries
// (lakequery.ServiceWALCache): each entry crosses the plugin boundary, is decoded and is encoded as Parquet
// once, and every later query that sees it reads the same file.
//
// What a query sees stays exactly what the request names (lakequery.WALState): for each table the entries
// above its plan's fence and at or below Through, after the last truncate among them. A request that builds
// on entries the cache does not hold — another Log (the engine started over), a Base above what arrived, or a
// plan whose fence is below entries dropped since (a newer request's Floor) — fails with lakequery.ErrStale
// before it reads anything, and the engine sends the statement again with every entry.
//
// A statement's database (its views over the lake's files and the newest versions of the WAL rows it sees)
// is kept too (engineCache): the next statement with the same plans and WAL batches runs in a new connection
// of it and loads nothing. The newest versions live in that in-memory database's tables: materialising them in
// a DuckDB or Parquet file was tried and lost the sign of a -0 float whenever 0 and -0 shared a column (DuckDB
// 1.5.6 stores them as one value once persisted; TestTypeMatrixIntoIceberg over Flight SQL caught it). The
// files are loaded before the database's lock-down, so no SQL can read or write them; a batch dropped
// (reclaimed, or its log replaced) while a query loads it is deleted when that query ends, and the databases
// holding its rows are closed when their last statement ends.
type WALCache struct {
	parent string // where dir is made, at the first query that uses the cache
	dir    string

	mu    sync.Mutex
	pipes map[string]*pipeWAL
	dead  []*cachedBatch // dropped while a query held them
	order int64          // the next WAL row's place in the log
	ids   int64          // names batch files
	// written counts the batch files written; tests read it.
	written int
	// engines keeps the databases statements built over the cached batches (and over the lake alone).
	engines *engineCache
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
	refs     int // queries loading it
	id       int64
	seq      uint64
	stream   string
	path     string
	truncate bool
	key      []string
	uuids    map[string]bool
}

// NewWALCache returns a cache keeping its files under a new directory in dir (the system's temp directory when
// ""), made when a query first uses the cache (a plugin process that answers no server's query makes none).
// Close removes them.
func NewWALCache(dir string) *WALCache {
	return &WALCache{parent: dir, pipes: map[string]*pipeWAL{}, engines: newEngineCache(dir, DefaultEngineCacheBytes)}
}

// Close removes the cache's files and closes its databases (those a query still uses when it ends).
func (c *WALCache) Close() error {
	c.engines.closeAll()
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if c.dir != "" {
		err = errors.Join(err, os.RemoveAll(c.dir))
		c.dir = ""
	}
	return err
}

// collect is the cached counterpart of the package's collect: it takes the stream's new entries into the cache
// and gives each table the batch files of the WAL rows the request sees (table.wal). release ends the query's
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
	var used []*cachedBatch
	releaseLocked := func() {
		for _, b := range used {
			b.refs--
		}
		c.dead = slices.DeleteFunc(c.dead, func(b *cachedBatch) bool {
			if b.refs > 0 {
				return false
			}
			os.Remove(b.path)
			return true
		})
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
		run, err := c.tableWAL(t, ws)
		if err != nil {
			releaseLocked()
			return nil, nil, err
		}
		for _, b := range run {
			b.refs++
		}
		used = append(used, run...)
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
				c.written++
			}
			p.batches = append(p.batches, wb)
		}
		p.hi = e.Seq
	}
}

// tableWAL gives t the WAL rows the request sees: the batches of its stream above its fence (or the floor,
// for a table without one) and at or below Through, after the last truncate among them. It returns them.
func (c *WALCache) tableWAL(t *table, ws lakequery.WALState) ([]*cachedBatch, error) {
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
	for _, b := range run {
		t.wal = append(t.wal, b.path)
		t.walIDs = append(t.walIDs, b.id)
		if len(b.key) > 0 {
			t.walKey = b.key
		}
		for col, list := range b.uuids {
			if t.walUUID == nil {
				t.walUUID = map[string]bool{}
			}
			t.walUUID[col] = list
		}
	}
	return run, nil
}

// dropBatches removes the first n batches of p; the files of those a query holds go when it ends.
func (c *WALCache) dropBatches(p *pipeWAL, n int) {
	ids := make([]int64, 0, n)
	for _, b := range p.batches[:n] {
		ids = append(ids, b.id)
		switch {
		case b.refs > 0:
			c.dead = append(c.dead, b)
		case b.path != "":
			os.Remove(b.path)
		}
	}
	p.batches = slices.Delete(p.batches, 0, n)
	c.engines.dropBatches(ids)
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

// Package lakequery runs `skippr query`: SQL over the tables of the pipelines' lake destinations, merged with
// the entries committed to each pipeline's WAL but not applied yet (the contract between the parts is the
// SDK's package lakequery).
// Console is how the command talks to a person (a prompt with history) or a script (stdin), and Compact runs
// `skippr lake compact` through the same service lookup.
//
// Nothing here names a plugin. A lake is any destination whose plugin offers the lake.plan service; the query
// engine is any plugin offering query.engine: the connection `query: {connection: NAME}` names, else DuckDB
// (see queryConnection). Every
// plugin is started through engine/connector, so the same checksum pinning, protocol negotiation, identity and
// settings checks apply as to a sync, and a third party's lake destination works with `skippr query` without a
// change here. The query engine's settings are not checked: it is called without them, and its connection may
// be one made up here (QueryPlugin).
package lakequery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/engine/wal"
	sdk "github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

// QueryPlugin is the query engine used when the config names none: a connection whose plugin is this name
// pins its version or path.
const QueryPlugin = "duckdb"

// ErrNoLake: no selected pipeline writes to a destination offering lake.plan.
var ErrNoLake = errors.New("no lake to query")

// Options say what to query and how.
type Options struct {
	Config    *config.Config
	Pipelines []*config.Pipeline // the pipelines whose lakes are queried (default: all of the config)
	Host      connector.Starter
	// OpenWAL opens a pipeline's log for reading; the querier takes no lease and never blocks a sync.
	OpenWAL func(ctx context.Context, p *config.Pipeline) (*wal.Log, error)
	// WALCacheBytes of decoded WAL entries are kept between statements (walTail), per pipeline; 0 keeps
	// none, as the one-shot `skippr query` wants. Commit records already seen are never listed again.
	WALCacheBytes int64
	// EngineKeepsWAL: a server that runs many statements with one Querier; when the query engine offers
	// sdk.ServiceWALCache, each WAL entry is sent to it once and it keeps the rows between statements.
	EngineKeepsWAL bool
}

// Querier answers queries over one config's lakes. Its plugins run until Close.
type Querier struct {
	opts    Options
	lakes   []lake
	tails   map[string]*walTail // by pipeline
	engine  *connector.Plugin
	running []*connector.Plugin
	// keepsWAL: the engine keeps the WAL entries it was sent (Options.EngineKeepsWAL and the service).
	keepsWAL bool
	// session names this Querier's WAL streams to the engine (sdk.WALState.Log, with the tail's generation).
	session string
	// fetchDir holds the lake files that are not local, fetched for the engine, for the Querier's life: a
	// file fetched once serves every statement (and keeps the lake plugin's cached plans' paths valid).
	fetchDir string
	// logs are the pipelines' WALs, opened at their first statement and kept until Close: opening one per
	// statement built an S3 client (its configuration, a new connection) each time. A Log opened without its
	// lease holds no state about the log's contents, so a kept one reads what another process wrote since.
	logMu sync.Mutex
	logs  map[string]*wal.Log
}

// lake is a pipeline and one of its destinations offering lake.plan.
type lake struct {
	p      *config.Pipeline
	conn   string
	plugin *connector.Plugin
}

// Open starts the selected pipelines' destination plugins, keeps those that offer lake.plan, and starts the
// query engine.
func Open(ctx context.Context, opts Options) (*Querier, error) {
	// The plugins started before an error are killed here: the caller gets no Querier to close.
	q := &Querier{opts: opts, tails: map[string]*walTail{}, logs: map[string]*wal.Log{}}
	if err := q.open(ctx); err != nil {
		q.Close()
		return nil, err
	}
	return q, nil
}

func (q *Querier) open(ctx context.Context) error {
	opts := q.opts
	var err error
	if q.fetchDir, err = os.MkdirTemp("", "skippr-query-"); err != nil {
		return err
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	q.session = hex.EncodeToString(id[:])
	pipes := opts.Pipelines
	if pipes == nil {
		pipes = opts.Config.Pipelines
	}
	started := map[string]*connector.Plugin{} // by connection; nil: starts, but offers no lake.plan
	for _, p := range pipes {
		for _, d := range p.Destinations {
			cn, ok := opts.Config.Connection(d)
			if !ok {
				return fmt.Errorf("pipeline %s: no connection %q", p.Name, d)
			}
			c, seen := started[cn.Name]
			if !seen {
				var err error
				if c, err = q.start(ctx, connector.Start, cn, sdk.ServicePlan); err != nil {
					return err
				}
				started[cn.Name] = c
			}
			if c == nil {
				continue
			}
			q.lakes = append(q.lakes, lake{p: p, conn: cn.Name, plugin: c})
			if q.tails[p.Name] == nil {
				q.tails[p.Name] = newWALTail(opts.WALCacheBytes)
			}
		}
	}
	if len(q.lakes) == 0 {
		return fmt.Errorf("%w: no pipeline in %s writes to a destination whose plugin offers %s (such as iceberg)", ErrNoLake, opts.Config.Path, sdk.ServicePlan)
	}
	qc, err := queryConnection(opts.Config)
	if err != nil {
		return err
	}
	if q.engine, err = q.start(ctx, connector.StartUnconfigured, qc, sdk.ServiceQuery); err != nil {
		return err
	}
	if q.engine == nil {
		return fmt.Errorf("connection %s: plugin %s offers no %s service: it cannot answer queries", qc.Name, qc.Plugin, sdk.ServiceQuery)
	}
	q.keepsWAL = opts.EngineKeepsWAL && q.engine.Spec.Offers(sdk.ServiceWALCache)
	return nil
}

// lakeFetchDir is lake i's directory for fetched files.
func (q *Querier) lakeFetchDir(i int) (string, error) {
	dir := filepath.Join(q.fetchDir, fmt.Sprintf("lake-%d", i))
	return dir, os.MkdirAll(dir, 0o700)
}

// queryConnection is the connection of the query engine: the one `query: {connection: NAME}` names, else the
// first connection of plugin QueryPlugin (which pins its version or path), else one made up for QueryPlugin.
func queryConnection(cfg *config.Config) (*config.Connection, error) {
	if name := cfg.Query.Connection; name != "" {
		cn, ok := cfg.Connection(name)
		if !ok { // the loader checks this; a Config built in code may not have been
			return nil, fmt.Errorf("query.connection: no connection %q in %s", name, cfg.Path)
		}
		return cn, nil
	}
	for _, cn := range cfg.Connections {
		if cn.Plugin == QueryPlugin {
			return cn, nil
		}
	}
	return &config.Connection{Name: "query", Plugin: QueryPlugin}, nil
}

// start starts a connection's plugin and keeps it running until Close; it returns nil when the plugin does not
// offer service.
func (q *Querier) start(ctx context.Context, start startFunc, cn *config.Connection, service string) (*connector.Plugin, error) {
	c, err := startOffering(ctx, start, q.opts.Host, cn, service)
	if c != nil {
		q.running = append(q.running, c)
	}
	return c, err
}

// startFunc is connector.Start or connector.StartUnconfigured.
type startFunc func(context.Context, connector.Starter, *config.Connection) (*connector.Plugin, error)

// startOffering starts a connection's plugin; it returns nil (and stops the plugin) when the plugin does not
// offer service.
func startOffering(ctx context.Context, start startFunc, host connector.Starter, cn *config.Connection, service string) (*connector.Plugin, error) {
	c, err := start(ctx, host, cn)
	if err != nil {
		return nil, err
	}
	if !c.Spec.Offers(service) {
		c.Kill()
		return nil, nil
	}
	return c, nil
}

// Close stops the plugins.
func (q *Querier) Close() {
	for _, c := range q.running {
		c.Kill()
	}
	q.running = nil
	q.logMu.Lock()
	for name, l := range q.logs {
		l.Close()
		delete(q.logs, name)
	}
	q.logMu.Unlock()
	if q.fetchDir != "" {
		os.RemoveAll(q.fetchDir)
	}
}

// Request is one statement.
type Request struct {
	SQL      string
	Format   string // sdk.Format…
	AsOfLake bool   // the lake alone, without the WAL's unapplied rows
	// IncludeDeleted shows rows a soft-deleting destination flagged deleted (sdk.Request.IncludeDeleted).
	IncludeDeleted bool
	// MemoryLimit bounds the query engine's memory for this statement (sdk.Request.MemoryLimit).
	MemoryLimit string
	// Timings, when set, is filled with where the statement's time went (`skippr serve` logs it at debug).
	Timings *Timings
}

// Timings is where one statement's time went outside the query engine's own work, so that a slow statement
// in the server's log says which part was slow. Each figure sums over the statement's attempts (Run retries
// a stale one).
type Timings struct {
	Attempts int
	// WAL: opening, listing and reading each pipeline's WAL (the walTail); Plan: the lake plugins' plans.
	WAL, Plan time.Duration
	// Send: encoding and sending the query stream to the engine; Entries and StreamBytes are what it held.
	Send        time.Duration
	Entries     int
	StreamBytes int64
	// FirstByte: from the engine call to the engine's first output byte; Engine: to its last.
	FirstByte, Engine time.Duration
}

// Run answers one statement, writing the result to out; it returns the engine's summary (rows, time). An error
// in the SQL wraps sdk.ErrSQL.
//
// The WAL is read before the lake is planned: an entry applied in between is then both in the lake and in the
// WAL part, and the table's fence drops it from the latter. The other order could miss an entry applied and
// reclaimed in between.
//
// When the engine keeps the WAL entries it was sent (keepsWAL), the stream holds only the entries above what
// earlier streams held; an engine that does not hold those (it restarted, or a newer statement moved past
// this one's plan) answers sdk.ErrStale before any output, and the statement runs again from the WAL read on,
// sending every entry.
func (q *Querier) Run(ctx context.Context, req Request, out io.Writer) (string, error) {
	for attempt := 1; ; attempt++ {
		if req.Timings != nil {
			req.Timings.Attempts = attempt
		}
		summary, err := q.run(ctx, req, out)
		if errors.Is(err, sdk.ErrStale) && attempt < staleAttempts {
			for _, t := range q.tails {
				t.forget()
			}
			continue
		}
		return summary, err
	}
}

// staleAttempts bounds the runs of a statement the engine found stale (each a full resend after the first).
const staleAttempts = 3

func (q *Querier) run(ctx context.Context, req Request, out io.Writer) (string, error) {
	tm := req.Timings
	if tm == nil {
		tm = &Timings{}
	}
	var err error
	wals := make([]walEntries, len(q.lakes))
	start := time.Now()
	if !req.AsOfLake {
		for i, l := range q.lakes {
			if wals[i], err = q.readWAL(ctx, l.p); err != nil {
				return "", err
			}
		}
	}
	tm.WAL += time.Since(start)
	start = time.Now()
	sreq := sdk.Request{SQL: req.SQL, Format: req.Format, AsOfLake: req.AsOfLake, IncludeDeleted: req.IncludeDeleted, MemoryLimit: req.MemoryLimit}
	if q.keepsWAL && !req.AsOfLake {
		seen := map[string]bool{}
		for i, l := range q.lakes {
			if seen[l.p.Name] {
				continue
			}
			seen[l.p.Name] = true
			w := wals[i]
			sreq.WAL = append(sreq.WAL, sdk.WALState{Pipeline: l.p.Name, Log: fmt.Sprintf("%s-%d", q.session, w.gen),
				Base: w.base, Through: w.through, Floor: w.floor})
		}
	}
	for i, l := range q.lakes {
		fetch, err := q.lakeFetchDir(i)
		if err != nil {
			return "", err
		}
		plan, err := l.plugin.LakePlan(ctx, sdk.PlanRequest{Pipeline: l.p.Name, Streams: wals[i].streams, FetchDir: fetch})
		if err != nil {
			return "", fmt.Errorf("plan lake of connection %s: %w", l.conn, err)
		}
		sreq.Lakes = append(sreq.Lakes, sdk.Lake{Pipeline: l.p.Name, Plan: plan})
	}
	tm.Plan += time.Since(start)
	start = time.Now()
	tw := &timedWriter{w: out, start: start}
	// The stream is written on the SDK client's goroutine, which may still run when Query fails: its figures
	// pass through sendMu.
	var (
		sendMu sync.Mutex
		sent   Timings
	)
	defer func() {
		tm.Engine += time.Since(start)
		tm.FirstByte += tw.first
		sendMu.Lock()
		tm.Send, tm.Entries, tm.StreamBytes = tm.Send+sent.Send, tm.Entries+sent.Entries, tm.StreamBytes+sent.StreamBytes
		sendMu.Unlock()
	}()
	return q.engine.Query(ctx, func(w io.Writer) error {
		sendStart := time.Now()
		cw := &countingWriter{w: w}
		err := q.writeStream(cw, sreq, wals)
		sendMu.Lock()
		sent.Send, sent.StreamBytes = time.Since(sendStart), cw.n
		for i := range wals {
			for _, f := range wals[i].frames {
				if f != nil {
					sent.Entries++
				}
			}
		}
		sendMu.Unlock()
		if err != nil {
			return err
		}
		if sreq.WAL != nil {
			for i, l := range q.lakes {
				q.tails[l.p.Name].markSent(wals[i].gen, wals[i].through)
			}
		}
		return nil
	}, tw)
}

// timedWriter notes when its first byte came, after start.
type timedWriter struct {
	w     io.Writer
	start time.Time
	first time.Duration
}

func (t *timedWriter) Write(p []byte) (int, error) {
	if t.first == 0 {
		t.first = time.Since(t.start)
	}
	return t.w.Write(p)
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// walEntries are one pipeline's committed, unreclaimed WAL entries and the streams they hold.
type walEntries struct {
	seqs    []uint64
	frames  [][]wal.Frame // nil: sent in an earlier stream (at or below base), not sent again
	streams []string
	// gen, base, through and floor are sdk.WALState's: the tail's generation, the newest entry sent before
	// (0 unless the engine keeps the WAL), the newest listed, and the log's reclaimed-through.
	gen, base, through, floor uint64
}

// readWAL reads a pipeline's committed entries without taking its lease, through the pipeline's walTail. An
// entry reclaimed while being read was applied by every destination, so the plan (made after) holds it: it
// is skipped.
func (q *Querier) readWAL(ctx context.Context, p *config.Pipeline) (walEntries, error) {
	l, err := q.openWAL(ctx, p)
	if err != nil {
		return walEntries{}, err
	}
	return q.tails[p.Name].read(ctx, l, p.Name, q.keepsWAL)
}

// openWAL returns pipeline p's log, opening it the first time (Querier.logs).
func (q *Querier) openWAL(ctx context.Context, p *config.Pipeline) (*wal.Log, error) {
	q.logMu.Lock()
	defer q.logMu.Unlock()
	if l, ok := q.logs[p.Name]; ok {
		return l, nil
	}
	l, err := q.opts.OpenWAL(ctx, p)
	if err != nil {
		return nil, err
	}
	q.logs[p.Name] = l
	return l, nil
}

// writeStream writes the query stream: the request, then every lake's pipeline's WAL entries in order.
func (q *Querier) writeStream(w io.Writer, req sdk.Request, wals []walEntries) error {
	qw, err := sdk.NewWriter(w, req)
	if err != nil {
		return err
	}
	for i, l := range q.lakes {
		for j, seq := range wals[i].seqs {
			if wals[i].frames[j] == nil {
				continue // the engine holds it
			}
			if err := qw.Entry(l.p.Name, seq); err != nil {
				return err
			}
			for _, f := range wals[i].frames[j] {
				switch f.Kind {
				case wal.FrameBatch:
					err = qw.Batch(f.Stream, f.Rows, f.Data)
				case wal.FrameSchema:
					err = qw.Schema(f.Stream, f.Data)
				case wal.FrameTruncate:
					err = qw.Truncate(f.Stream)
				}
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ErrNoService: no connection's plugin offers the service asked for.
var ErrNoService = errors.New("no plugin offers the service")

// Offering starts the plugin of the named connection, or of each connection of the config when name is "",
// and returns the one connection's plugin that offers service, running (its Conn is the connection); the caller
// kills it. Several offering it without a name is an error that lists them.
func Offering(ctx context.Context, cfg *config.Config, host connector.Starter, name, service string) (*connector.Plugin, error) {
	conns := cfg.Connections
	if name != "" {
		cn, ok := cfg.Connection(name)
		if !ok {
			return nil, fmt.Errorf("no connection %q in %s (known: %v)", name, cfg.Path, cfg.ConnectionNames())
		}
		conns = []*config.Connection{cn}
	}
	var found []*config.Connection
	var running []*connector.Plugin
	stop := func() {
		for _, c := range running {
			c.Kill()
		}
	}
	for _, cn := range conns {
		c, err := startOffering(ctx, connector.Start, host, cn, service)
		if err != nil {
			stop()
			return nil, err
		}
		if c != nil {
			found, running = append(found, cn), append(running, c)
		}
	}
	switch len(found) {
	case 1:
		return running[0], nil
	case 0:
		if name != "" {
			return nil, fmt.Errorf("%w: connection %s (plugin %s) does not offer %s", ErrNoService, name, conns[0].Plugin, service)
		}
		return nil, fmt.Errorf("%w: no connection in %s has a plugin offering %s", ErrNoService, cfg.Path, service)
	}
	stop()
	var names []string
	for _, cn := range found {
		names = append(names, cn.Name)
	}
	return nil, fmt.Errorf("%s has several connections offering %s (%v): pick one with --connection", cfg.Path, service, names)
}

// Compact runs the lake.compact service of the named connection's plugin (name "" when one connection alone
// offers it) and returns its report. ErrNoService when none offers it.
func Compact(ctx context.Context, cfg *config.Config, host connector.Starter, name string, req sdk.CompactRequest) ([]byte, error) {
	plugin, err := Offering(ctx, cfg, host, name, sdk.ServiceCompact)
	if err != nil {
		return nil, err
	}
	defer plugin.Kill()
	report, err := plugin.LakeCompact(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("lake compact %s: %w", req.Table, err)
	}
	return report, nil
}

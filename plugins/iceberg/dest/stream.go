package dest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/util"
	"github.com/apache/iceberg-go/catalog"

	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

var _ serve.SessionDestination = (*Destination)(nil)

// Open parses the settings and connects to the catalog (Destination.catalog: the lake services share the
// connection).
func (d *Destination) Open(ctx context.Context, raw json.RawMessage) (serve.Session, error) {
	s, err := ParseSettings(raw)
	if err != nil {
		return nil, err
	}
	if _, err := d.catalog(ctx, raw, s); err != nil {
		return nil, err
	}
	return &session{d: d, s: s, raw: raw}, nil
}

// session is the destination open for one settings value. It asks d for the catalog on every call rather than
// holding it, as the lake services and Destination.Close share d's.
type session struct {
	d   *Destination
	s   Settings
	raw json.RawMessage
}

// Close closes the catalog connection of the session's settings.
func (x *session) Close() error { return x.d.closeCatalog(x.raw) }

// LastApplied returns the pipeline's completion marker as Sequence, and each table's own fence in Streams.
func (x *session) LastApplied(ctx context.Context, pipeline string) (serve.Applied, error) {
	oc, err := x.d.catalog(ctx, x.raw, x.s)
	if err != nil {
		return serve.Applied{}, err
	}
	return lastApplied(ctx, oc, x.s, pipeline)
}

// Apply commits one WAL sequence number, or a range: one Iceberg commit per table touched, each recording the
// sequence number in the same commit, then the pipeline's completion marker. See doc.go for why both exist.
// Items are buffered per table; when the buffered batches outgrow the memory budget, the largest tables' buffers are folded and
// written out as data files that the table's commit will add (spill.go). After the last item, the tables
// commit in parallel, and the completion marker is set once all of them did.
func (x *session) Apply(ctx context.Context, r *serve.Range) (serve.ApplyResult, error) {
	d, s, req := x.d, x.s, r.ApplyRequest
	d.limitMemory(s)
	oc, err := d.catalog(ctx, x.raw, s)
	if err != nil {
		return serve.ApplyResult{}, err
	}
	// Shared with other applies; a compaction holding it exclusively makes this wait (lock.go).
	lk, err := lockCatalog(ctx, s, false)
	if err != nil {
		return serve.ApplyResult{}, fmt.Errorf("apply %d: %w", req.Sequence, err)
	}
	defer func() { lk.unlock() }()
	ns := s.NamespaceIdent()
	marker, err := readMarker(ctx, oc.cat, ns, req.Pipeline)
	if err != nil {
		return serve.ApplyResult{}, err
	}
	if req.Covers(marker) {
		return serve.ApplyResult{Skipped: true}, nil
	}
	if err := ensureNamespace(ctx, oc.cat, ns); err != nil {
		return serve.ApplyResult{}, err
	}
	b := &applyBuffer{d: d, oc: oc, s: s, req: req, marker: marker, byTable: map[string]*tableBuf{}, fences: map[string]uint64{}, budget: s.bufferBudget(),
		now: time.Now().UTC().Truncate(time.Microsecond)}
	if err := b.loadRenames(ctx); err != nil {
		return serve.ApplyResult{}, fmt.Errorf("apply %d: %w", req.Sequence, err)
	}
	if d.hooks.bufferBudget > 0 {
		b.budget = d.hooks.bufferBudget
	}
	committed := false
	defer func() {
		b.release()
		if !committed {
			b.abort(context.WithoutCancel(ctx))
		}
	}()
	// Entries skips what the marker covers; b.add skips, per table, what its own fence covers beyond it.
	for st, err := range r.Entries(marker) {
		if err != nil {
			return serve.ApplyResult{}, fmt.Errorf("apply %d: %w", req.Sequence, err)
		}
		if st.End {
			continue // tables are buffered across the range's entries
		}
		if err := b.add(ctx, st.Item); err != nil {
			return serve.ApplyResult{}, fmt.Errorf("apply %d: %w", req.Sequence, err)
		}
	}
	res, err := b.commitAll(ctx)
	committed = true // from here on each table's commit has cleaned up after itself
	if err != nil {
		return serve.ApplyResult{}, fmt.Errorf("apply %d: %w", req.Sequence, err)
	}
	// Every table now holds req.Sequence; only now may LastApplied report it.
	// The marker covers the renames this apply did or followed (tablerename.go): their intents go with it.
	if _, err := oc.cat.UpdateNamespaceProperties(ctx, ns, b.doneRenames(), map[string]string{seqKey(req.Pipeline): strconv.FormatUint(req.Sequence, 10)}); err != nil {
		return serve.ApplyResult{}, fmt.Errorf("apply %d: record completion in namespace %s of %s: %w", req.Sequence, s.Namespace, oc.name, err)
	}
	if s.AutoCompact != nil && !res.Skipped {
		// The compaction takes the lock exclusively: this apply's share must go first.
		lk.unlock()
		lk = nil
		d.autoCompact(ctx, oc, s, x.raw, b.groups())
	}
	return res, nil
}

// limitMemory hands the configured cap to the Go runtime (see main.go) when it changes; "off" lifts it.
func (d *Destination) limitMemory(s Settings) {
	if d.SetMemoryLimit == nil {
		return
	}
	limit := int64(s.MemoryLimit)
	if s.MemoryLimit == NoMemoryLimit {
		limit = math.MaxInt64 // the runtime's own "no limit"
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.memLimit != limit {
		d.memLimit = limit
		d.SetMemoryLimit(limit)
	}
}

// applyBuffer holds the part of an apply not written out yet, per table, in log order.
type applyBuffer struct {
	d       *Destination
	oc      *openCatalog
	s       Settings
	req     serve.ApplyRequest
	marker  uint64 // the pipeline's completion marker when the apply began
	tables  []*tableBuf
	byTable map[string]*tableBuf
	fences  map[string]uint64 // per table met: what it holds already (see fence)
	now     time.Time         // the apply's time: _skippr_synced_at
	budget  int64             // bytes of batches to buffer before spilling; 0: no limit
	bytes   int64             // bytes of batches buffered
	renames *tableRenames     // renamed streams (tablerename.go)
}

// tableBuf is one table's part of an apply: the items not written out yet, and what was written (spilled).
type tableBuf struct {
	g     *tableGroup // items buffered, records retained
	fence uint64      // items of entries up to here are in the table already (a replay of part of a range)
	bytes int64
	sp    *spilledTable // nil until the table first outgrew the buffer
}

func (b *applyBuffer) add(ctx context.Context, it serve.Item) error {
	if it.Record == nil && it.Schema == nil && !it.Truncate && it.Resnapshot == serve.ResnapshotNone {
		return fmt.Errorf("stream %s: item holds neither a batch, a schema, a truncate nor a re-snapshot mark", it.Stream)
	}
	if err := b.followRename(ctx, &it); err != nil {
		return err
	}
	meta, err := b.s.For(it.Stream)
	if err != nil {
		return err
	}
	name := b.s.TableName(it.Stream)
	if meta.History && !it.Truncate && it.Resnapshot == serve.ResnapshotNone {
		// The history table takes every change and schema, before the mirror's truncates drop rows.
		hist := meta
		hist.SoftDelete = false
		htb, err := b.table(ctx, b.renames.history(name), it, hist, true)
		if err != nil {
			return err
		}
		if htb != nil {
			b.hold(htb, it)
		}
	}
	tb, err := b.table(ctx, name, it, meta, false)
	if err != nil || tb == nil {
		return err
	}
	if it.Truncate {
		b.truncate(ctx, tb)
		return nil
	}
	b.hold(tb, it)
	if b.budget > 0 && b.bytes > b.room() {
		return b.spill(ctx)
	}
	return nil
}

// hold buffers the item for the table.
func (b *applyBuffer) hold(tb *tableBuf, it serve.Item) {
	if it.Record != nil {
		it.Record.Retain() // the stream releases what it yielded once we ask for the next item
		n := int64(util.TotalRecordSize(it.Record))
		tb.bytes += n
		b.bytes += n
	}
	tb.g.items = append(tb.g.items, it)
}

// table returns the buffer of the named table for the item, made on first use; nil when the item's entry is
// at or below the table's fence (the table holds it already). meta and history describe the group.
func (b *applyBuffer) table(ctx context.Context, name string, it serve.Item, meta rowmeta.Options, history bool) (*tableBuf, error) {
	tb, ok := b.byTable[name]
	if !ok {
		// A table whose items all lie below its fence gets no buffer: it takes no part in the commits.
		fence, known := b.fences[name]
		if !known {
			var err error
			if fence, err = b.fence(ctx, name); err != nil {
				return nil, fmt.Errorf("table %s: %w", name, err)
			}
			b.fences[name] = fence
		}
		if b.below(it, fence) {
			return nil, nil
		}
		tb = &tableBuf{g: &tableGroup{stream: it.Stream, table: name, meta: meta, history: history, syncedAt: b.now}, fence: fence}
		b.byTable[name] = tb
		b.tables = append(b.tables, tb)
	} else if tb.g.stream != it.Stream || tb.g.history != history {
		return nil, fmt.Errorf("streams %s and %s both map to table %s", tb.g.stream, it.Stream, name)
	}
	if b.below(it, tb.fence) {
		return nil, nil
	}
	return tb, nil
}

// below says the item's entry is at or below fence: the table holds it already.
func (b *applyBuffer) below(it serve.Item, fence uint64) bool {
	seq := it.Sequence
	if seq == 0 {
		seq = b.req.Sequence // an item from a caller that does not tag items belongs to the apply's entry
	}
	return seq <= fence
}

// fence is what the table holds of this apply's range already: the marker, or, when a crash came between the
// tables' commits of an earlier range, the table's own fence. Only a range can lie partly below a table's fence:
// for one entry the table's commit (begin) skips it whole, so no load is needed here.
func (b *applyBuffer) fence(ctx context.Context, name string) (uint64, error) {
	if b.req.FirstSequence >= b.req.Sequence {
		return b.marker, nil
	}
	tbl, err := b.oc.cat.LoadTable(ctx, append(b.s.NamespaceIdent(), name))
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return b.marker, nil
	}
	if err != nil {
		return 0, fmt.Errorf("load: %w", err)
	}
	done, err := tableSeq(tbl, b.req.Pipeline)
	return max(done, b.marker), err
}

// room is what the buffer may hold now: the budget less what the key indexes take, which the same cap covers,
// but never less than a quarter of the budget, so that chunks do not shrink to nothing when several tables'
// indexes add up (each goes to disk beyond about half the budget, keyruns.go, except a soft-delete table's).
func (b *applyBuffer) room() int64 {
	var index int64
	for _, tb := range b.tables {
		if tb.sp != nil && tb.sp.index != nil {
			index += tb.sp.index.bytes
		}
	}
	return max(b.budget-index, b.budget/4)
}

// spill writes out the largest tables' buffers until they fill at most half the room, so that one spill makes
// room for many batches and files do not come out tiny.
func (b *applyBuffer) spill(ctx context.Context) error {
	for b.bytes > b.room()/2 {
		var big *tableBuf
		for _, tb := range b.tables {
			if big == nil || tb.bytes > big.bytes {
				big = tb
			}
		}
		if big == nil || big.bytes == 0 {
			return nil
		}
		if big.sp == nil {
			big.sp = &spilledTable{d: b.d, oc: b.oc, s: b.s, req: b.req, g: big.g}
		}
		if err := big.sp.add(ctx, big.g.items); err != nil {
			return fmt.Errorf("table %s: spill: %w", big.g.table, err)
		}
		if err := b.shedIndexes(); err != nil {
			return fmt.Errorf("table %s: spill: %w", big.g.table, err)
		}
		b.d.spills.Add(1)
		big.releaseItems()
		b.bytes -= big.bytes
		big.bytes = 0
	}
	return nil
}

// shedIndexes keeps the key indexes of all spilled tables within half the budget together (each keeps itself
// within half on its own): the largest goes to disk, or writes its run buffer out, until they fit. Without it,
// an apply spilling many tables would hold an index share per table.
func (b *applyBuffer) shedIndexes() error {
	for {
		var total int64
		var big *spilledTable
		for _, tb := range b.tables {
			if tb.sp == nil || tb.sp.index == nil {
				continue
			}
			ki := tb.sp.index
			total += ki.bytes
			if ki.limit > 0 && ki.bytes > 0 && (big == nil || ki.bytes > big.index.bytes) {
				big = tb.sp
			}
		}
		if big == nil || total <= big.indexLimit()/2 {
			return nil
		}
		was := big.index.onDisk()
		if err := big.index.shed(); err != nil {
			return fmt.Errorf("table %s: %w", big.g.table, err)
		}
		if !was && big.index.onDisk() {
			b.d.indexSpills.Add(1)
		}
	}
}

// truncate forgets the table's rows buffered or written out so far in this apply, keeping its schema changes
// (the table still evolves through them), and marks the table to be emptied in its commit.
func (b *applyBuffer) truncate(ctx context.Context, tb *tableBuf) {
	if tb.sp != nil {
		// Files written for rows the truncate removes: never committed, so nobody else refers to them.
		tb.sp.cleanup(context.WithoutCancel(ctx))
		tb.sp = nil
	}
	kept := tb.g.items[:0]
	for _, it := range tb.g.items {
		if it.Record != nil {
			it.Record.Release()
			continue
		}
		kept = append(kept, it)
	}
	clear(tb.g.items[len(kept):])
	tb.g.items = kept
	b.bytes -= tb.bytes
	tb.bytes = 0
	tb.g.truncated = true
}

func (tb *tableBuf) releaseItems() {
	for _, it := range tb.g.items {
		if it.Record != nil {
			it.Record.Release()
		}
	}
	tb.g.items = nil
}

func (b *applyBuffer) release() {
	for _, tb := range b.tables {
		tb.releaseItems()
	}
	b.bytes = 0
}

// abort removes the files of tables that spilled when the apply fails before their commits.
func (b *applyBuffer) abort(ctx context.Context) {
	for _, tb := range b.tables {
		if tb.sp != nil {
			tb.sp.cleanup(ctx)
		}
	}
}

func (b *applyBuffer) groups() []*tableGroup {
	out := make([]*tableGroup, len(b.tables))
	for i, tb := range b.tables {
		out[i] = tb.g
	}
	return out
}

// commitAll commits every table's part, up to GOMAXPROCS tables at a time, each its own Iceberg commit. A
// table that fails does not stop the others: what committed stays committed (its fence makes a replay skip
// it), and the apply reports the first error.
func (b *applyBuffer) commitAll(ctx context.Context) (serve.ApplyResult, error) {
	var (
		wg      sync.WaitGroup
		sem     = make(chan struct{}, runtime.GOMAXPROCS(0))
		results = make([]tableResult, len(b.tables))
		errs    = make([]error, len(b.tables))
	)
	for i, tb := range b.tables {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = fmt.Errorf("table %s: %w", tb.g.table, context.Cause(ctx))
				if tb.sp != nil {
					tb.sp.cleanup(context.WithoutCancel(ctx))
				}
				return
			}
			defer func() { <-sem }()
			results[i], errs[i] = b.commitTable(ctx, tb)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("table %s: %w", tb.g.table, errs[i])
			}
		}()
	}
	wg.Wait()
	res := serve.ApplyResult{Skipped: len(b.tables) > 0}
	for i, r := range results {
		if errs[i] != nil {
			return serve.ApplyResult{}, errs[i]
		}
		res.Skipped = res.Skipped && r.skipped
		res.Rows += r.rows
	}
	return res, nil
}

func (b *applyBuffer) commitTable(ctx context.Context, tb *tableBuf) (tableResult, error) {
	if tb.sp == nil && !hasRows(tb.g.items) && (tb.g.truncated || len(tb.g.items) > 0) {
		// Only a truncate or marks: a table that does not exist has nothing to remove, and nothing to create it
		// from (a re-snapshot of a stream without a table yet: every row it will have arrives after the begin).
		_, err := b.oc.cat.LoadTable(ctx, append(b.s.NamespaceIdent(), tb.g.table))
		if errors.Is(err, catalog.ErrNoSuchTable) {
			return tableResult{}, nil
		}
		if err != nil {
			return tableResult{}, fmt.Errorf("load: %w", err)
		}
	}
	if tb.sp == nil {
		return b.d.applyTable(ctx, b.oc, b.s, b.req, tb.g)
	}
	if len(tb.g.items) > 0 {
		if err := tb.sp.add(ctx, tb.g.items); err != nil {
			tb.sp.cleanup(context.WithoutCancel(ctx))
			return tableResult{}, fmt.Errorf("spill: %w", err)
		}
		tb.releaseItems()
	}
	return tb.sp.commit(ctx)
}

// hasRows says whether items hold a batch or a schema: something a table can be created from.
func hasRows(items []serve.Item) bool {
	for _, it := range items {
		if it.Record != nil || it.Schema != nil {
			return true
		}
	}
	return false
}

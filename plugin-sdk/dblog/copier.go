package dblog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
)

// Progress is how far the copy of one table has come. Sources keep it in their checkpoints (JSON), by table.
type Progress struct {
	Key   []string `json:"key,omitempty"` // the last key copied (the source's checkpoint form), nil before the first chunk
	Rows  int64    `json:"rows,omitempty"`
	Total int64    `json:"total,omitempty"` // the server's estimate when the copy began
	Begun bool     `json:"begun,omitempty"` // the begin mark is out (before this checkpoint)
}

// Chunk is what Source.ReadChunk read: up to the chunk size of rows after the last key copied, in key order.
type Chunk struct {
	Rec  arrow.RecordBatch // the rows; nil when none is left after the key. The Copier releases it.
	Keys []string          // each row's key, in the form Copier.Saw is given
	Last []string          // the last row's key in checkpoint form (Progress.Key)
	Rows int               // the rows read
}

// ErrGone is what Source.Prepare returns for a table that is no longer there to copy (dropped or renamed away
// since the copy was asked for): its copy ends without another chunk.
var ErrGone = errors.New("the table is gone")

// Source is what the Copier asks of a source: the steps that depend on its server. Its methods run on the
// goroutine that calls the Copier's.
type Source interface {
	// Prepare readies the next chunk of table (a connection, a check of its key); ErrGone ends its copy.
	Prepare(ctx context.Context, table string) error
	// Begin starts the copy of table: what the stream built so far goes out, then the begin mark to the
	// destination. It returns the server's estimate of the table's rows.
	Begin(ctx context.Context, table string) (estimate int64, err error)
	// WriteMark writes a watermark into the log, in a transaction of its own. mark is opaque: the source hands
	// it back to Copier.Mark when it comes out of the log.
	WriteMark(ctx context.Context, table, mark string) error
	// ReadChunk reads up to the chunk size of rows of table after the key after (from the first when nil), in
	// key order, seeing every transaction committed before the read began.
	ReadChunk(ctx context.Context, table string, after []string) (Chunk, error)
	// Settle is called when the chunk's high mark came out of the log, before any of its rows go out: what the
	// stream built so far goes out first. It says whether the chunk is still good; a chunk read with a
	// definition of the table it no longer has is dropped, and read again by the next Step.
	Settle(ctx context.Context, table string) (keep bool, err error)
	// Emit sends a run of kept rows of table as snapshot reads. rows is released after Emit returns.
	Emit(ctx context.Context, table string, rows arrow.RecordBatch) error
	// Copied says a chunk of table went out, kept rows of it, and the copy is now at p; done: it was the table's
	// last (or the table is gone, p.Begun saying whether its begin mark went out), and the end mark is due.
	// The next checkpoint must carry the progress.
	Copied(ctx context.Context, table string, p Progress, kept int64, done bool) error
}

// Config is what a Copier needs to know of its source.
type Config struct {
	ChunkRows int    // the rows a chunk reads at most: a shorter chunk is the table's last
	Log       string // the source's log as messages name it ("slot", "binary log")
}

// Copier runs the copies of one Read; see the package doc. Its methods must be called from one goroutine.
type Copier struct {
	src      Source
	cfg      Config
	progress map[string]Progress
	nonce    string // the marks of this Copier carry it: those of a replayed log are someone else's
	seq      int
	inflight *pending
}

// pending is a chunk read and waiting for its high mark to come out of the log.
type pending struct {
	id     string
	table  string
	c      Chunk
	window map[string]bool // keys of the table changed in the log since the chunk was started
	low    bool            // its low mark came out
}

// mark is a watermark's payload.
type mark struct {
	ID    string `json:"id"`
	Table string `json:"table"`
	High  bool   `json:"high,omitempty"`
}

// New returns a Copier of the tables in progress, each where its Progress says (the zero Progress: from the
// start).
func New(src Source, cfg Config, progress map[string]Progress) *Copier {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return &Copier{src: src, cfg: cfg, progress: maps.Clone(progress), nonce: hex.EncodeToString(b)}
}

// Add starts the copy of table from its start, unless it is being copied already: a table that joins the Read
// while it streams (a Postgres table created later that matches a pattern of tables). Its begin mark goes out when
// its first chunk starts, as for a table the Read began with.
func (c *Copier) Add(table string) {
	if c.progress == nil {
		c.progress = map[string]Progress{}
	}
	if _, ok := c.progress[table]; !ok {
		c.progress[table] = Progress{}
	}
}

// Active says a table is being copied.
func (c *Copier) Active() bool { return len(c.progress) > 0 }

// Progress is each table's progress, for a checkpoint (nil when none is being copied).
func (c *Copier) Progress() map[string]Progress {
	if len(c.progress) == 0 {
		return nil
	}
	out := make(map[string]Progress, len(c.progress))
	for k, v := range c.progress {
		v.Key = slices.Clone(v.Key)
		out[k] = v
	}
	return out
}

// InFlight names the table of the chunk in flight and says whether its low mark came out; ok is false when no
// chunk is in flight.
func (c *Copier) InFlight() (table string, low, ok bool) {
	if c.inflight == nil {
		return "", false, false
	}
	return c.inflight.table, c.inflight.low, true
}

// Watching says a chunk of table is in flight: its changes must be reported with Saw.
func (c *Copier) Watching(table string) bool { return c.inflight != nil && c.inflight.table == table }

// Saw notes a change of table's row with key key in the log; only the table of the chunk in flight counts.
func (c *Copier) Saw(table, key string) {
	if c.Watching(table) {
		c.inflight.window[key] = true
	}
}

// Step starts the next chunk when none is in flight and a table is left: the low mark, the read, the high mark.
// It must run between two transactions of the log.
func (c *Copier) Step(ctx context.Context) error {
	if c.inflight != nil || len(c.progress) == 0 {
		return nil
	}
	table := slices.Sorted(maps.Keys(c.progress))[0]
	prog := c.progress[table]
	if err := c.src.Prepare(ctx, table); err != nil {
		if errors.Is(err, ErrGone) {
			return c.copied(ctx, table, prog, 0, true)
		}
		return err
	}
	if !prog.Begun {
		total, err := c.src.Begin(ctx, table)
		if err != nil {
			return err
		}
		prog.Begun, prog.Total = true, total
		c.progress[table] = prog
	}
	c.seq++
	pc := &pending{id: fmt.Sprintf("%s.%d", c.nonce, c.seq), table: table, window: map[string]bool{}}
	c.inflight = pc
	if err := c.writeMark(ctx, mark{ID: pc.id, Table: table}); err != nil {
		return err
	}
	ch, err := c.src.ReadChunk(ctx, table, prog.Key)
	if err != nil {
		return err
	}
	pc.c = ch
	return c.writeMark(ctx, mark{ID: pc.id, Table: table, High: true})
}

func (c *Copier) writeMark(ctx context.Context, m mark) error {
	b, _ := json.Marshal(m)
	return c.src.WriteMark(ctx, m.Table, string(b))
}

// Mark handles a watermark that came out of the log (what Source.WriteMark wrote, by this Copier or another):
// the low mark of the chunk in flight opens it, its high mark sends it; any other is ignored.
func (c *Copier) Mark(ctx context.Context, payload []byte) error {
	pc := c.inflight
	if pc == nil {
		return nil
	}
	var m mark
	if json.Unmarshal(payload, &m) != nil || m.ID != pc.id {
		return nil // another Read's, or another pipeline's
	}
	if !m.High {
		pc.low = true
		return nil
	}
	if !pc.low {
		return fmt.Errorf("re-snapshot of %s: watermark %s: the high mark came out of the %s before the low one", pc.table, pc.id, c.cfg.Log)
	}
	c.inflight = nil
	return c.send(ctx, pc)
}

// send emits the chunk's rows the log did not change since the chunk started, and moves the progress on.
func (c *Copier) send(ctx context.Context, pc *pending) error {
	if pc.c.Rec != nil {
		defer pc.c.Rec.Release()
	}
	keep, err := c.src.Settle(ctx, pc.table)
	if err != nil || !keep {
		return err
	}
	prog := c.progress[pc.table]
	var kept int64
	if pc.c.Rec != nil {
		// Runs of kept rows go out as slices of the chunk: no copy.
		kept, err = KeptRuns(pc.c.Keys, pc.window, func(start, end int) error {
			sl := pc.c.Rec.NewSlice(int64(start), int64(end))
			defer sl.Release()
			return c.src.Emit(ctx, pc.table, sl)
		})
		if err != nil {
			return err
		}
		prog.Key = pc.c.Last
	}
	prog.Rows += kept
	return c.copied(ctx, pc.table, prog, kept, pc.c.Rows < c.cfg.ChunkRows)
}

// copied reports a chunk (or the end of a table) to the source and keeps the progress, or forgets the table.
func (c *Copier) copied(ctx context.Context, table string, prog Progress, kept int64, done bool) error {
	if err := c.src.Copied(ctx, table, prog, kept, done); err != nil {
		return err
	}
	if done {
		delete(c.progress, table)
	} else {
		c.progress[table] = prog
	}
	return nil
}

// Close releases the chunk in flight, if any.
func (c *Copier) Close() {
	if c.inflight != nil && c.inflight.c.Rec != nil {
		c.inflight.c.Rec.Release()
	}
	c.inflight = nil
}

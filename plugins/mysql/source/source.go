// Package source is the MySQL/MariaDB change source: a consistent snapshot of the configured tables, then
// the binary log (row format) from exactly the snapshot's position. plugins/mysql/README.md describes the
// design; position.go the checkpoint format.
//
// Nothing is held on the server for a pipeline: the binary log is kept by the server's own retention
// (binlog_expire_logs_seconds), not by a slot the reader advances. Ack therefore releases nothing; a
// checkpoint's coordinate is only ever the end of a transaction the engine was handed whole, and a restart
// resumes from the last checkpoint the engine made durable, so nothing after it is lost. What can be lost is
// the binary log itself: a restart first checks that the saved file still exists, and says to re-snapshot
// when the server purged it.
package source

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"vitess.io/vitess/go/mysql"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/mempool"
	"github.com/skippr-dev/skippr/plugin-sdk/protect"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/mysql/config"
)

// Flavours of server, as positions record them.
const (
	flavorMariaDB = "mariadb"
	flavorMySQL   = "mysql"
)

// Source reads changes.
type Source struct {
	// chunkRead, when set (by tests), runs between a re-snapshot chunk's select and its high watermark: the
	// test changes rows there, as a writer racing the copy would.
	chunkRead func(ctx context.Context, stream string, keys []string)
}

// New returns a source.
func New() *Source { return &Source{} }

// Discover describes the configured tables as streams.
func (s *Source) Discover(ctx context.Context, raw json.RawMessage) ([]serve.Stream, error) {
	cfg, err := config.Parse(raw)
	if err != nil {
		return nil, err
	}
	conn, err := cfg.Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := (&reader{cfg: cfg}).expandInto(conn, &cfg); err != nil {
		return nil, err
	}
	tables, err := loadTables(conn, cfg)
	if err != nil {
		return nil, err
	}
	out := make([]serve.Stream, len(tables))
	for i, t := range tables {
		st := t.stream()
		// Discover does not know whether the pipeline runs: a missing column is Read's to refuse at a first start.
		if err := cfg.Protect.Check(st.Name, st.Schema, st.PrimaryKey, true); err != nil {
			return nil, err
		}
		out[i] = cfg.Protect.Stream(st)
	}
	return out, nil
}

func loadTables(conn *mysql.Conn, cfg config.Settings) ([]*Table, error) {
	var out []*Table
	for _, name := range cfg.Tables {
		t, err := loadTable(conn, cfg, name)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Ack releases nothing: the server keeps its binary log by its own retention, not for a reader (see the
// package doc). The checkpoint is still decoded, so a foreign one is refused.
func (s *Source) Ack(ctx context.Context, checkpoint []byte) error {
	inner, _, err := protect.Unwrap(checkpoint)
	if err != nil {
		return err
	}
	_, err = DecodePosition(inner)
	return err
}

// reader is one Read.
type reader struct {
	cfg config.Settings
	// exact are the tables named in the settings; cfg.Tables adds those the patterns captured (patterns.go).
	exact []string
	// tables are the captured tables by name, nil for one that is gone (dropped, renamed away) at this point
	// of the binary log.
	tables map[string]*Table
	order  []*Table // the existing ones in settings order (what a snapshot copies)
	hist   *history // their definitions, followed through DDL
	out    serve.Emitter
	log    *slog.Logger
	flavor string
	// mem builds the batches: it hands the buffers of sent batches out again (plugin-sdk/mempool), instead of
	// fresh zeroed memory for every batch.
	mem memory.Allocator
	// chunkRead is Source.chunkRead.
	chunkRead func(ctx context.Context, stream string, keys []string)
	// filters are the compiled row filters (rowfilter.go), by table definition: a DDL builds a new *Table.
	filters map[*Table]*rowFilter
}

// Read emits the snapshot (unless the checkpoint is past it or snapshots are off), then binlog changes.
func (s *Source) Read(ctx context.Context, req serve.ReadRequest, out serve.Emitter) error {
	cfg, err := config.ParseFor(req.Settings, req.Pipeline)
	if err != nil {
		return err
	}
	inner, _, err := protect.Unwrap(req.Checkpoint)
	if err != nil {
		return fault.ResnapshotErr(err, "start the pipeline from an empty checkpoint (a new snapshot)")
	}
	pos, err := DecodePosition(inner)
	if err != nil {
		return fault.ResnapshotErr(err, "start the pipeline from an empty checkpoint (a new snapshot)")
	}
	wrapped := false
	if pos != nil {
		// Only a copy started now is taken under new rules: one in progress began under the old ones.
		var fresh, known []string
		for _, n := range req.Resnapshot {
			if _, ok := pos.Resnapshot[n]; !ok {
				fresh = append(fresh, n)
			}
		}
		for _, n := range pos.Tables {
			known = append(known, cfg.Stream(n))
		}
		if wrapped, err = cfg.Protect.Resume(req.Checkpoint, known, fresh, slog.Default()); err != nil {
			return err
		}
	}
	conn, err := cfg.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	r := &reader{cfg: cfg, tables: map[string]*Table{}, out: out, log: slog.Default().With("database", cfg.Database), mem: mempool.New(), chunkRead: s.chunkRead}
	r.flavor = flavorMySQL
	if isMariaDB(conn) {
		r.flavor = flavorMariaDB
	}
	if pos != nil && pos.Flavor != r.flavor {
		return fault.ResnapshotErr(fmt.Errorf("the checkpoint was taken on a %s server, this one is %s", pos.Flavor, r.flavor),
			"point the pipeline back at its server, or start it from an empty checkpoint (a new snapshot)")
	}
	// Patterns become tables here, before anything compares the tables with the checkpoint's.
	if err := r.expand(conn, pos); err != nil {
		return err
	}
	cfg = r.cfg
	if pos != nil {
		pos.Patterns = cfg.Patterns
	}
	if pos != nil && pos.Phase == PhaseSnapshot && pos.copiedAll() {
		// A snapshot whose every table is durable is over, even when its closing checkpoint never became
		// durable (a `sync --once` that ended on it): tables added since are copied while streaming.
		pos = pos.streamPhase()
	}
	if pos != nil {
		if err := r.checkTables(pos); err != nil {
			return err
		}
		if err := r.addResnapshots(pos, req.Resnapshot); err != nil {
			return err
		}
	}
	defs, err := r.startDefs(conn, pos)
	if err != nil {
		return err
	}
	if err := r.useDefs(defs); err != nil {
		return err
	}
	if pos != nil && pos.Phase == PhaseStream {
		r.hist.shadows = cloneDefs(pos.Shadows)
	}
	// A rule naming a column a table lacks, or its key, stops the Read before anything is emitted; then every
	// batch, schema change and checkpoint of the Read (snapshot, binlog, re-snapshot) leaves through protect.
	for _, t := range r.order {
		st := t.stream()
		if err := cfg.Protect.Check(st.Name, st.Schema, st.PrimaryKey, pos != nil); err != nil {
			return err
		}
	}
	// A row filter the server or the evaluator cannot apply stops the Read before anything is read.
	for _, t := range r.order {
		if err := r.checkFilter(conn, t); err != nil {
			return err
		}
		if err := r.checkFullRow(conn, t); err != nil {
			return err
		}
	}
	var names []string
	for _, n := range cfg.Tables {
		names = append(names, cfg.Stream(n))
	}
	r.out = cfg.Protect.Emitter(r.out, r.mem, names, wrapped)
	if pos != nil {
		pos.Schemas = cloneDefs(defs)
	}
	switch {
	case pos == nil && !*cfg.Snapshot:
		if pos, err = r.currentPosition(conn); err != nil {
			return err
		}
		if err := r.out.Checkpoint(ctx, serve.Checkpoint{Position: pos.Encode()}); err != nil {
			return err
		}
	case pos == nil:
		pos = &Position{V: positionVersion, Phase: PhaseSnapshot, Flavor: r.flavor, Tables: cfg.Tables, Progress: map[string]TableProgress{}, Schemas: cloneDefs(defs), Patterns: cfg.Patterns}
		if pos, err = r.snapshot(ctx, conn, pos, true); err != nil {
			return err
		}
	case pos.Phase == PhaseSnapshot:
		if pos, err = r.snapshot(ctx, conn, pos, false); err != nil {
			return err
		}
	}
	conn.Close()
	return r.stream(ctx, pos)
}

// checkTables refuses a checkpoint of another table set: its snapshot did not copy the tables added since. In
// the stream phase a table added to the settings is the exception: it is copied while streaming, as a
// re-snapshot (addedTables).
func (r *reader) checkTables(pos *Position) error {
	if pos.Phase == PhaseStream && r.addedTables(pos) {
		return nil
	}
	if len(pos.Tables) != len(r.cfg.Tables) {
		return fault.ConfigErr(fmt.Errorf("the checkpoint covers tables %v, the settings list %v", pos.Tables, r.cfg.Tables),
			"restore the tables setting, or start the pipeline from an empty checkpoint (a new snapshot of every table)")
	}
	for i, name := range r.cfg.Tables {
		if pos.Tables[i] != name {
			return fault.ConfigErr(fmt.Errorf("the checkpoint covers tables %v, the settings list %v", pos.Tables, r.cfg.Tables),
				"restore the tables setting, or start the pipeline from an empty checkpoint (a new snapshot of every table)")
		}
	}
	return nil
}

// currentPosition is where the binary log ends now (snapshot: false).
func (r *reader) currentPosition(conn *mysql.Conn) (*Position, error) {
	pos := &Position{V: positionVersion, Phase: PhaseStream, Flavor: r.flavor, Tables: r.cfg.Tables, Schemas: cloneDefs(r.hist.defs), Patterns: r.cfg.Patterns}
	var err error
	pos.File, pos.Pos, pos.GTID, err = binlogStatus(conn, r.flavor)
	return pos, err
}

// startDefs are the captured tables' definitions where the Read starts. Streaming decodes from the
// checkpoint's coordinate, so a table the checkpoint has a definition of keeps it (the server's catalog may
// already be past later DDL, which the stream will replay); the catalog gives the others. One exception: a
// snapshot resumed while a table's copy is unfinished and its columns changed cannot continue, since its
// first chunks were copied with the old columns and the rest would come with the new ones.
func (r *reader) startDefs(conn *mysql.Conn, pos *Position) (map[string]TableDef, error) {
	defs := map[string]TableDef{}
	for _, name := range r.cfg.Tables {
		old, ok := pos.schema(name)
		if ok && (pos.Phase == PhaseStream || pos.Progress[name].Done) {
			defs[name] = old
			continue
		}
		d, err := loadDef(conn, r.cfg, name)
		if err != nil {
			return nil, err
		}
		if ok && !sameLayout(old, d) {
			return nil, fault.ResnapshotErr(fmt.Errorf("table %s changed its columns while the snapshot was being copied", r.cfg.Stream(name)),
				"start the pipeline from an empty checkpoint (a new snapshot of the new schema)")
		}
		if ok {
			d = old
		}
		defs[name] = d
	}
	return defs, nil
}

// schema is a table's definition in the checkpoint, if it holds one.
func (p *Position) schema(name string) (TableDef, bool) {
	if p == nil || p.Schemas == nil {
		return TableDef{}, false
	}
	d, ok := p.Schemas[name]
	return d, ok
}

// useDefs builds the tables from their definitions and starts their history.
func (r *reader) useDefs(defs map[string]TableDef) error {
	h, err := newHistory(r.cfg.Database, r.cfg.Tables, defs)
	if err != nil {
		return err
	}
	r.hist, r.order = h, nil
	for _, name := range r.cfg.Tables {
		d := defs[name]
		if d.Gone {
			r.tables[name] = nil
			continue
		}
		t, err := d.build(name, r.cfg.Stream(name), r.cfg.FullRow(name))
		if err != nil {
			return err
		}
		hide(r.cfg, t)
		r.tables[name], r.order = t, append(r.order, t)
	}
	return nil
}

// hide marks the table's excluded and hashed columns, whose values then appear in no error.
func hide(cfg config.Settings, t *Table) {
	for i := range t.Columns {
		t.Columns[i].Hidden = cfg.Protect.Hides(t.Stream, t.Columns[i].Name)
	}
}

func cloneDefs(m map[string]TableDef) map[string]TableDef {
	out := make(map[string]TableDef, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

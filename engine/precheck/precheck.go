// Package precheck decides, before a pipeline reads anything, whether it can run at all: the source's and every
// destination's own Check (settings, credentials, privileges, tables without a key, replica identities...), and
// whether every destination can hold each column type the source's streams carry.
//
// A pipeline that fails here is refused: the error matches ErrRefused and fault.ErrConfig, and carries the
// fix, so `skippr sync` exits 2 (bad configuration) at once instead of failing hours later at the first value
// a destination cannot take. A check that fails for a reason a retry can fix
// (a server restarting: fault.ErrTransient) is returned as it is, and the run is retried like any other
// transient failure; one of class data or resnapshot (a slot that lost its WAL) fails the pipeline with that
// class, since no setting gets past it.
//
// A destination that adds columns of its own (soft_delete, metadata_columns: plugin-sdk/rowmeta) is refused,
// naming table and column, when a source stream already has a column of that name; each stream is checked
// with its own options (the connection's, with its table_options over them). A table_options key that names
// no stream the source discovers is refused too, naming the key and the streams there are: a misspelt key
// would otherwise silently leave the stream at the connection's settings. (When the destination connection
// serves other pipelines too, the key may name one of their streams: it is logged instead.)
//
// A stream matched by full row (change.FullRow: a keyless table whose deletes carry the whole old row) is refused
// for every destination whose capabilities lack full_row or whose soft_delete is on, all such destinations named at once: one that cannot
// find the one row a delete means would lose or multiply rows.
//
// The type check matches type names (arrow.DataType.Name(), e.g. "decimal256") that a destination lists in
// its Capabilities.UnsupportedTypes, at any depth of a column's type (a list's element, a struct's fields, a
// map's keys and items, a dictionary's values). Names, not whole types, because that is what a destination
// can state once for every pipeline; a destination that accepts a type only within limits (a precision, a
// unit) checks those limits itself when it creates the table.
package precheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
)

// ErrRefused matches every refusal of this package.
var ErrRefused = errors.New("pipeline refused at start")

// Source is what the checks need of a source plugin (a *connector.Plugin, which holds its settings).
type Source interface {
	Check(ctx context.Context) error
	Discover(ctx context.Context) ([]connector.Stream, error)
}

// Destination is what the checks need of a destination plugin (a *connector.Plugin).
type Destination interface {
	Check(ctx context.Context) error
	Capabilities(ctx context.Context) (connector.Capabilities, error)
}

// Endpoint is a connection: its name in the config and its plugin.
type Endpoint[T any] struct {
	Name   string
	Plugin T
	// Settings are the connection's settings as sent to the plugin (JSON): a destination's soft_delete,
	// metadata_columns and table_options (plugin-sdk/rowmeta) are read from them. Nil: none.
	Settings []byte
	// Shared says the connection is a destination of other pipelines too, whose sources may have the
	// streams its table_options name.
	Shared bool
}

// Config is one pipeline's start.
type Config struct {
	Pipeline     string
	Source       Endpoint[Source]
	Destinations []Endpoint[Destination]
	Streams      []string // the pipeline's streams; empty: all the source discovers
	// Logger gets what is worth a look but no refusal (nil: slog.Default()).
	Logger *slog.Logger
}

// Refusal is a pipeline refused at start. It matches ErrRefused and its class's sentinel; fault.FixOf gives
// the fix.
type Refusal struct {
	Err error // classified (fault.New), with the fix
}

func (r *Refusal) Error() string   { return r.Err.Error() }
func (r *Refusal) Unwrap() []error { return []error{r.Err, ErrRefused} }

func refuse(class fault.Class, msg, fix string) error {
	return &Refusal{Err: fault.New(class, errors.New(msg), fix)}
}

// Run runs the checks — the source's Check, each destination's Check, then the types — and returns the first
// refusal in that order, or an error a retry may fix, or nil.
//
// The checks are round trips to the plugins and through them to their servers (a Postgres source's check is a
// dozen queries and a replication session), so they run at once, with the source's Discover beside them when
// a destination needs the streams described: an hourly job's start waits for the slowest of them, not for
// their sum (issue #31: the source's first row within 300 ms of the command). A Discover answered while a
// check fails is dropped; its error counts only once every check passed.
//
// The checks begin before the destinations are asked for their capabilities (a round trip to each plugin the
// checks do not need): whether the source must describe its streams is known only from those.
func Run(ctx context.Context, cfg Config) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	checks := make([]error, 1+len(cfg.Destinations))
	wg.Go(func() { checks[0] = check(ctx, "source", cfg.Source.Name, cfg.Source.Plugin.Check) })
	for i, d := range cfg.Destinations {
		wg.Go(func() { checks[1+i] = check(ctx, "destination", d.Name, d.Plugin.Check) })
	}
	limits := make([][]string, len(cfg.Destinations))
	metas := make([]rowmeta.Settings, len(cfg.Destinations))
	fullRow := make([]bool, len(cfg.Destinations))
	anyLimits := false
	for i, d := range cfg.Destinations {
		caps, err := d.Plugin.Capabilities(ctx)
		if err != nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("capabilities of destination %s: %w", d.Name, err)
		}
		limits[i] = caps.UnsupportedTypes
		metas[i] = rowMeta(d.Settings)
		fullRow[i] = caps.FullRow
		anyLimits = anyLimits || len(caps.UnsupportedTypes) > 0 || metas[i].AnyStream() || len(metas[i].TableOptions) > 0 || !fullRow[i]
	}
	var streams []connector.Stream
	var discoverErr error
	if anyLimits {
		wg.Go(func() { streams, discoverErr = cfg.Source.Plugin.Discover(ctx) })
	}
	wg.Wait()
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	if !anyLimits {
		return nil // no destination limits its types, adds columns or names streams: the source need not describe its streams
	}
	if discoverErr != nil {
		return fmt.Errorf("discover source %s: %w", cfg.Source.Name, discoverErr)
	}
	schemas := map[string]*arrow.Schema{}
	var names, discovered []string
	for _, st := range streams {
		discovered = append(discovered, st.Name)
		if len(cfg.Streams) > 0 && !slices.Contains(cfg.Streams, st.Name) {
			continue
		}
		sc, err := protocol.DecodeSchema(memory.DefaultAllocator, st.ArrowSchema)
		if err != nil {
			return fmt.Errorf("discover source %s: stream %s: %w", cfg.Source.Name, st.Name, err)
		}
		schemas[st.Name] = sc
		names = append(names, st.Name)
	}
	if err := fullRowRefusal(cfg, names, schemas, fullRow, metas); err != nil {
		return err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	for i, d := range cfg.Destinations {
		if err := tableOptionKeys(cfg, d, metas[i], discovered, log); err != nil {
			return err
		}
		for _, n := range names {
			o, err := metas[i].For(n)
			if err == nil {
				err = o.CheckSchema(n, schemas[n])
			}
			if err != nil {
				return &Refusal{Err: fmt.Errorf("pipeline %s: destination %s: %w", cfg.Pipeline, d.Name, err)}
			}
		}
		if len(limits[i]) == 0 {
			continue
		}
		var problems []string
		for _, n := range names {
			for _, c := range Unsupported(schemas[n], limits[i]) {
				problems = append(problems, fmt.Sprintf("table %s, column %s: type %s", n, c.Column, c.Type))
			}
		}
		if len(problems) > 0 {
			return refuse(fault.Config,
				fmt.Sprintf("pipeline %s: destination %s cannot hold %s", cfg.Pipeline, d.Name, strings.Join(problems, "; ")),
				fmt.Sprintf("change the column's type in the source to one destination %s holds, leave the table out of the pipeline, or send it to another destination", d.Name))
		}
	}
	return nil
}

// fullRowRefusal refuses the pipeline when a stream is matched by full row and a destination does not apply
// such streams (can[i] false) or keeps soft-deleted rows for it (soft_delete has no meaning yet for one of
// several identical rows), naming the tables and every destination that cannot.
func fullRowRefusal(cfg Config, names []string, schemas map[string]*arrow.Schema, can []bool, metas []rowmeta.Settings) error {
	var tables, dests []string
	for _, n := range names {
		if !change.FullRow(schemas[n]) {
			continue
		}
		tables = append(tables, n)
		for i, d := range cfg.Destinations {
			o, _ := metas[i].For(n)
			if (!can[i] || o.SoftDelete) && !slices.Contains(dests, d.Name) {
				dests = append(dests, d.Name)
			}
		}
	}
	if len(tables) == 0 || len(dests) == 0 {
		return nil
	}
	return refuse(fault.Config,
		fmt.Sprintf("pipeline %s: table %s is keyless and matched by full row (mode: full_row), which destination %s cannot apply (a delete must remove exactly one row equal to the old row)",
			cfg.Pipeline, strings.Join(tables, ", "), strings.Join(dests, ", ")),
		fmt.Sprintf("send the table to a destination that applies full_row streams (postgres, duckdb, without soft_delete) in a pipeline of its own, or in the source's table_options set mode: append (inserts only) or key_columns instead of mode: full_row, or give the table a primary key (destination %s)", strings.Join(dests, ", ")))
}

// rowMeta reads the soft_delete, metadata_columns, history and table_options of a destination's settings.
// The keys belong to the SDK (plugin-sdk/rowmeta): a plugin that does not offer them refuses them by its
// settings schema before this runs, and one that does checks them in its own Check, so settings this cannot
// read add nothing here.
func rowMeta(settings []byte) rowmeta.Settings {
	var s rowmeta.Settings
	if len(settings) == 0 || json.Unmarshal(settings, &s) != nil {
		return rowmeta.Settings{}
	}
	if s.Check() != nil {
		return rowmeta.Settings{}
	}
	return s
}

// tableOptionKeys refuses a table_options key of destination d that names none of the streams the source
// discovered (only logs it when d serves other pipelines too).
func tableOptionKeys(cfg Config, d Endpoint[Destination], s rowmeta.Settings, discovered []string, log *slog.Logger) error {
	for _, key := range slices.Sorted(maps.Keys(s.TableOptions)) {
		if slices.Contains(discovered, key) {
			continue
		}
		if d.Shared {
			log.Warn("a table_options key names no stream of this pipeline's source; it may be another pipeline's",
				"pipeline", cfg.Pipeline, "destination", d.Name, "key", key, "streams", strings.Join(discovered, ", "))
			continue
		}
		have := slices.Sorted(slices.Values(discovered))
		const show = 20
		list := strings.Join(have[:min(len(have), show)], ", ")
		if len(have) > show {
			list += fmt.Sprintf(" and %d more", len(have)-show)
		}
		if list == "" {
			list = "none"
		}
		return refuse(fault.Config,
			fmt.Sprintf("pipeline %s: destination %s: table_options names %s, which is no stream of source %s (its streams: %s)", cfg.Pipeline, d.Name, key, cfg.Source.Name, list),
			fmt.Sprintf("spell the key as the source names the stream (one of those listed), or remove table_options.%s from connection %s", key, d.Name))
	}
	return nil
}

// check runs one plugin's Check: a failed check is a refusal, any other error is returned for a retry.
func check(ctx context.Context, role, name string, fn func(context.Context) error) error {
	err := fn(ctx)
	if err == nil {
		return nil
	}
	var ce *client.CheckError
	if !errors.As(err, &ce) || (ce.Class.Permanent() && ce.Class != fault.Config) {
		// Transient: retried. Data or resnapshot (a slot that lost its WAL): the pipeline fails with that
		// class — the configuration is not what must change.
		return fmt.Errorf("check %s %s: %w", role, name, err)
	}
	fix := ce.Fix
	if fix == "" {
		fix = fmt.Sprintf("fix what the check of connection %s says, then run again (`skippr connect %s` repeats the check)", name, name)
	}
	return refuse(fault.Config, fmt.Sprintf("check of %s %s failed: %s", role, name, ce.Message), fix)
}

// Column is a column whose type holds a type a destination cannot.
type Column struct {
	Column string // the column's name
	Type   string // its whole type, e.g. list<item: decimal256(65, 30)>
}

// Unsupported returns the columns of s whose type has one of the named types at any depth.
func Unsupported(s *arrow.Schema, names []string) []Column {
	var out []Column
	for _, f := range s.Fields() {
		if has(f.Type, names) {
			out = append(out, Column{Column: f.Name, Type: f.Type.String()})
		}
	}
	return out
}

func has(dt arrow.DataType, names []string) bool {
	if slices.Contains(names, dt.Name()) {
		return true
	}
	switch t := dt.(type) {
	case arrow.ListLikeType: // list, large_list, fixed_size_list, list views, map
		if m, ok := t.(*arrow.MapType); ok {
			return has(m.KeyType(), names) || has(m.ItemType(), names)
		}
		return has(t.Elem(), names)
	case arrow.NestedType: // struct, unions, run_end_encoded
		for _, f := range t.Fields() {
			if has(f.Type, names) {
				return true
			}
		}
	case *arrow.DictionaryType:
		return has(t.ValueType, names) || has(t.IndexType, names)
	case arrow.ExtensionType:
		return has(t.StorageType(), names)
	}
	return false
}

// Package rowmeta is what a destination adds to the rows it writes beyond the source's columns: soft deletes
// and sync metadata columns. The settings are the same for every destination, parsed and checked here once;
// each destination writes the columns in its own SQL. The user-facing description is the README's "Soft
// deletes and sync metadata"; this file is the one definition.
//
// The settings, on a destination connection:
//
//	soft_delete: true                                                 # default false
//	metadata_columns: [synced_at, source_committed_at, op, position]  # default none; any subset, each once
//	history: true                                                     # default false: <table>_history too
//	table_options:                                                    # per stream, overriding the three above
//	  public.orders: { soft_delete: false, history: true, metadata_columns: [op] }
//
// A table_options key is a stream's name as the source emits it (the destination's own table name may differ,
// as Iceberg's tables mapping allows). An override replaces the connection's value for that stream only;
// metadata_columns is replaced whole, not merged. A key that names no stream of the pipeline is not an error
// the destination can see (it learns streams as they come); the engine's start check (engine/precheck) refuses
// it, naming the streams the source has, or logs it when the destination connection serves other pipelines.
//
// The columns, added to every table the destination writes (created with the table, or added to an existing
// one, where the rows already there hold NULL; _skippr_deleted false where the destination can fill it in the
// apply's transaction, else NULL, which means not deleted: read it with IS TRUE / IS NOT TRUE):
//
//	_skippr_deleted              boolean    soft_delete only: true when the row's newest change is a delete
//	_skippr_synced_at            timestamp  UTC: the time of the destination transaction that wrote the row
//	                                        (its start, as SQL's now() gives it: every row of one apply alike)
//	_skippr_source_committed_at  timestamp  UTC: when the source committed the row's newest change: the change
//	                                        protocol's _skippr_committed_at (package change), at the source's
//	                                        precision (Postgres µs, MySQL/MariaDB seconds, HTTP the receive
//	                                        time); NULL for a snapshot row and for a change whose batch has no
//	                                        commit time (a WAL entry from before sources filled it)
//	_skippr_op                   text       the row's newest change: insert, update, delete or snapshot
//	_skippr_position             int64      the WAL entry (serve.Item.Sequence) that carried that change
//
// Soft delete semantics, the same in every destination:
//
//   - A delete sets _skippr_deleted = true and keeps the row's last values. A key-only delete (the usual
//     delete, whose non-key columns are null) only flips the flag; when the row's insert or update was folded
//     into the same apply (change.Last.HasValues), the destination writes those values with the flag, so the
//     result does not depend on how the engine cut the WAL into applies. A delete of a key the destination
//     never held and whose values it never saw leaves nothing (there are no values to keep).
//   - An insert, update or snapshot read of a key sets _skippr_deleted = false: a deleted key inserted again
//     is live again.
//   - A TRUNCATE removes the table's rows, soft-deleted ones included, exactly as without soft_delete: it is
//     not a delete of each row, and a source emits it for a statement that empties the table, which a
//     warehouse copy of it should show. (Keeping them marked deleted would make the result differ with how
//     a truncate and the rows before it are grouped into applies.)
//   - A re-snapshot's end removes nothing: the rows the source no longer has are marked deleted, as their
//     deletes would have.
//   - Exactly-once: the columns are written in the apply's transaction with its fence, so a replayed range
//     is skipped whole or applies only the entries above the fence, exactly as without these settings; the
//     values written do not depend on anything but the entry (except _skippr_synced_at, the commit time).
//
// A source column with one of these names would be silently overwritten, so CheckSchema refuses it (a config
// fault naming the stream and column): the engine runs it at start over the source's discovered streams
// (engine/precheck, reading these two keys from each destination's settings), and a destination runs it again
// on every schema it meets, for streams that gain the column later.
//
// A destination that does not support a setting refuses it: a plugin leaves the keys out of its settings
// schema (SchemaProperties), so the engine refuses them when it loads the config, naming the connection and
// the key. Every destination of this repository (Postgres, DuckDB, Iceberg, Snowflake, BigQuery) has them all.
package rowmeta

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// The column names a destination adds.
const (
	Deleted           = "_skippr_deleted"
	SyncedAt          = "_skippr_synced_at"
	SourceCommittedAt = "_skippr_source_committed_at"
	Op                = "_skippr_op"
	Position          = "_skippr_position"
)

// The names metadata_columns takes.
const (
	NameSyncedAt          = "synced_at"
	NameSourceCommittedAt = "source_committed_at"
	NameOp                = "op"
	NamePosition          = "position"
)

// Settings are the keys a destination's settings embed (`json:",inline"` is not Go: embed the struct
// anonymously so its fields are the settings object's own).
type Settings struct {
	// SoftDelete keeps deleted rows, flagged in _skippr_deleted.
	SoftDelete bool `json:"soft_delete"`
	// MetadataColumns names the sync metadata columns to add: synced_at, source_committed_at, op, position.
	MetadataColumns []string `json:"metadata_columns"`
	// History appends every change to <table>_history beside the mirrored table.
	History bool `json:"history"`
	// TableOptions overrides the settings above per stream.
	TableOptions map[string]TableSettings `json:"table_options"`
}

// TableSettings are one stream's overrides: a nil field keeps the connection's value.
type TableSettings struct {
	SoftDelete      *bool     `json:"soft_delete,omitempty"`
	MetadataColumns *[]string `json:"metadata_columns,omitempty"`
	History         *bool     `json:"history,omitempty"`
}

// The JSON Schema of each key, shared by SchemaProperties and the per-stream overrides.
const (
	softDeleteSchema      = `{"type": "boolean", "default": false, "description": "keep deleted rows: a delete sets _skippr_deleted = true and keeps the row's last values; a later insert of the key clears it; a truncate still removes every row"}`
	metadataColumnsSchema = `{"type": "array", "uniqueItems": true, "items": {"enum": ["synced_at", "op", "position", "source_committed_at"]}, "description": "columns to add to every table: synced_at (_skippr_synced_at, when the destination wrote the row, UTC), source_committed_at (_skippr_source_committed_at, when the source committed the row's newest change, UTC; NULL for snapshot rows), op (_skippr_op: insert, update, delete, snapshot), position (_skippr_position: the WAL entry)"}`
	historySchema         = `{"type": "boolean", "default": false, "description": "append every change, in order, to <table>_history beside each mirrored table (the values, _skippr_op, _skippr_source_committed_at, _skippr_position, _skippr_seq), exactly once"}`
)

// SchemaProperties is the JSON Schema of Settings' keys, as properties to add to a destination's settings
// schema (after a comma). A plugin with a table_options of its own (the Postgres plugin's, shared with its
// source role) uses SchemaPropertiesConnection and adds TableSchemaProperties to its own.
const SchemaProperties = SchemaPropertiesConnection + `,
    "table_options": {"type": "object", "description": "per stream (its name as the source emits it): soft_delete, metadata_columns and history overriding the connection's", "additionalProperties": {"type": "object", "additionalProperties": false, "properties": {` + TableSchemaProperties + `}}}`

// SchemaPropertiesConnection is SchemaProperties without table_options.
const SchemaPropertiesConnection = `"soft_delete": ` + softDeleteSchema + `,
    "metadata_columns": ` + metadataColumnsSchema + `,
    "history": ` + historySchema

// TableSchemaProperties are the properties of one stream's overrides.
const TableSchemaProperties = `"soft_delete": ` + softDeleteSchema + `, "metadata_columns": ` + metadataColumnsSchema + `, "history": ` + historySchema

// Kind is a metadata column's type, which each destination spells in its SQL.
type Kind int

const (
	Bool      Kind = iota + 1 // boolean
	Timestamp                 // a UTC instant (timestamptz, TIMESTAMP WITH TIME ZONE)
	Text                      // text
	Int64                     // a 64-bit integer
)

// Column is one column a destination adds.
type Column struct {
	Name string
	Kind Kind
}

// Options are Settings checked: what a destination writes. The zero value adds nothing.
type Options struct {
	SoftDelete        bool
	SyncedAt          bool
	SourceCommittedAt bool
	Op                bool
	Position          bool
	// History is not a column of the mirrored table (Any and Columns leave it out): the destination keeps
	// <table>_history too.
	History bool
}

// Options checks the connection's settings, without its per-stream overrides: every metadata column name
// known, none twice. The error is a config fault with the fix. Check checks the overrides too.
func (s Settings) Options() (Options, error) {
	o, err := options(s.SoftDelete, s.MetadataColumns)
	o.History = s.History
	return o, err
}

// For is the options of one stream: the connection's, with the stream's table_options over them.
func (s Settings) For(stream string) (Options, error) {
	t, ok := s.TableOptions[stream]
	if !ok {
		return s.Options()
	}
	soft, cols, hist := s.SoftDelete, s.MetadataColumns, s.History
	if t.SoftDelete != nil {
		soft = *t.SoftDelete
	}
	if t.MetadataColumns != nil {
		cols = *t.MetadataColumns
	}
	if t.History != nil {
		hist = *t.History
	}
	o, err := options(soft, cols)
	if err != nil {
		return Options{}, fault.ConfigErr(fmt.Errorf("table_options.%s: %w", stream, err), fault.FixOf(err))
	}
	o.History = hist
	return o, nil
}

// Check checks the connection's settings and every stream's overrides, so a destination refuses a bad
// override at start rather than when the stream first arrives.
func (s Settings) Check() error {
	if _, err := s.Options(); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(s.TableOptions)) {
		if _, err := s.For(name); err != nil {
			return err
		}
	}
	return nil
}

// AnyStream says whether some stream gets a column or a history table: the connection's settings or any
// override. A destination that needs no setup without them can skip it when this is false.
func (s Settings) AnyStream() bool {
	if o, _ := s.Options(); o.Any() || o.History {
		return true
	}
	for name := range s.TableOptions {
		if o, _ := s.For(name); o.Any() || o.History {
			return true
		}
	}
	return false
}

func options(softDelete bool, metadataColumns []string) (Options, error) {
	o := Options{SoftDelete: softDelete}
	seen := map[string]bool{}
	for _, n := range metadataColumns {
		if seen[n] {
			return Options{}, fault.ConfigErr(fmt.Errorf("settings: metadata_columns lists %q twice", n), "list each metadata column once")
		}
		seen[n] = true
		switch n {
		case NameSyncedAt:
			o.SyncedAt = true
		case NameOp:
			o.Op = true
		case NamePosition:
			o.Position = true
		case NameSourceCommittedAt:
			o.SourceCommittedAt = true
		default:
			return Options{}, fault.ConfigErr(fmt.Errorf("settings: metadata_columns: unknown column %q", n),
				"use synced_at, source_committed_at, op or position")
		}
	}
	return o, nil
}

// Any says the destination adds at least one column.
func (o Options) Any() bool {
	return o.SoftDelete || o.SyncedAt || o.SourceCommittedAt || o.Op || o.Position
}

// Columns are the columns the destination adds, in this order: deleted, synced_at, source_committed_at, op,
// position.
func (o Options) Columns() []Column {
	var out []Column
	if o.SoftDelete {
		out = append(out, Column{Deleted, Bool})
	}
	if o.SyncedAt {
		out = append(out, Column{SyncedAt, Timestamp})
	}
	if o.SourceCommittedAt {
		out = append(out, Column{SourceCommittedAt, Timestamp})
	}
	if o.Op {
		out = append(out, Column{Op, Text})
	}
	if o.Position {
		out = append(out, Column{Position, Int64})
	}
	return out
}

// CheckSchema refuses a change schema of stream holding a column the destination adds: the source's values
// would be overwritten (or, as every _skippr_ column but _skippr_meta is reserved, dropped), silently.
// _skippr_op is the protocol's own op column in every change batch, so it cannot clash. Names are compared
// without regard to case, since DuckDB and Snowflake resolve them so.
func (o Options) CheckSchema(stream string, s *arrow.Schema) error {
	for _, c := range o.Columns() {
		if c.Name == Op {
			continue
		}
		for _, f := range s.Fields() {
			if strings.EqualFold(f.Name, c.Name) {
				return fault.ConfigErr(
					fmt.Errorf("table %s has a column %s, which this destination adds itself (soft_delete or metadata_columns)", stream, f.Name),
					fmt.Sprintf("rename the source column %s, exclude it (exclude_columns), or turn the destination's soft_delete/metadata_columns setting off", f.Name))
			}
		}
	}
	return nil
}

// OpName is the _skippr_op text of a row's newest change.
func OpName(op change.Op) string {
	switch op {
	case change.OpRead:
		return "snapshot"
	case change.OpInsert:
		return "insert"
	case change.OpUpdate:
		return "update"
	case change.OpDelete:
		return "delete"
	}
	return op.String()
}

// Has says whether name is one of the columns the destination adds (compared without regard to case).
func (o Options) Has(name string) bool {
	return slices.ContainsFunc(o.Columns(), func(c Column) bool { return strings.EqualFold(c.Name, name) })
}

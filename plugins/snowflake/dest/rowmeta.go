package dest

import (
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugins/snowflake/sfsql"
)

// Soft deletes and sync metadata columns (plugin-sdk/rowmeta has the semantics), decided per stream
// (Settings.For). Each row's values of the columns are staged in the load's Parquet file beside its data
// (extra): in a coalesced range each row's newest change came in its own WAL entry, at its own commit time,
// so they cannot be constants of the statement. The MERGE copies them; _SKIPPR_SYNCED_AT alone is a constant,
// the apply's one time (sfsql.TimestampLiteral).
//
// Soft delete is in the MERGE (sfsql.Merge with Meta.SoftDelete): a delete sets _SKIPPR_DELETED and keeps the
// row's last values, and needs no lookup: when the range also held the key's insert or update
// (change.Last.HasValues) the staged row carries those values with the flag, else it is staged key-only and
// the MERGE flips the flag of the row the table holds, or inserts nothing. A TRUNCATE still deletes every
// row. The plugin has no re-snapshot (its Capabilities do not offer it), so no re-snapshot end marks rows.

// metaColumns are the columns o adds to a stream's table. _SKIPPR_DELETED is DEFAULT FALSE: a table that had
// soft_delete turned on later gets the column by an ADD COLUMN outside the apply's transaction (DDL commits
// in Snowflake), and the default fills the rows already there, with no UPDATE of every row in the apply.
func metaColumns(o rowmeta.Options) []sfsql.Column {
	var out []sfsql.Column
	for _, c := range o.Columns() {
		col := sfsql.Column{Name: sfsql.Name(c.Name)}
		switch c.Kind {
		case rowmeta.Bool:
			col.Type, col.DefaultFalse = sfsql.Type{Base: "BOOLEAN"}, true
		case rowmeta.Timestamp:
			col.Type = sfsql.Type{Base: "TIMESTAMP_TZ"}
		case rowmeta.Int64:
			col.Type = sfsql.Type{Base: "NUMBER", Precision: 20, Scale: 0}
		default:
			col.Type = sfsql.Type{Base: "TEXT"}
		}
		out = append(out, col)
	}
	return out
}

// mirrorExtras are the staged columns a load into a stream's table needs under o.
func mirrorExtras(o rowmeta.Options) []extra {
	var out []extra
	if o.SoftDelete {
		out = append(out, extraDeleted, extraKeyOnly)
	}
	if o.SourceCommittedAt {
		out = append(out, extraCommitted)
	}
	if o.Op {
		out = append(out, extraOpName)
	}
	if o.Position {
		out = append(out, extraPosition)
	}
	return out
}

// mirrorMeta is what a MERGE or INSERT into a stream's table writes under o; synced is the apply's time as
// a constant.
func mirrorMeta(o rowmeta.Options, synced string) sfsql.Meta {
	m := sfsql.Meta{SoftDelete: o.SoftDelete}
	for _, c := range o.Columns() {
		name := sfsql.Name(c.Name)
		v := sfsql.Staged(name)
		switch c.Name {
		case rowmeta.SyncedAt:
			v = synced
		case rowmeta.Op:
			v = sfsql.Staged(sfsql.OpNameColumn)
		}
		m.Sets = append(m.Sets, sfsql.Set{Column: name, Value: v})
	}
	return m
}

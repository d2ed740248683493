package source

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/postgres/config"
	"github.com/skippr-dev/skippr/plugins/postgres/typemap"
)

// column is a replicated column: pgoutput sends every column that is neither dropped nor generated, in
// attnum order, and so does the snapshot.
type column struct {
	Name    string
	TypeOID uint32
	Typmod  int32
	Type    *typemap.Type
	// Toastable: a varlena stored out of line when large (storage extended or external).
	Toastable bool
	// Missing is the value rows that existed before the column was added hold (attmissingval, set by ADD
	// COLUMN … DEFAULT x), in text form; nil when there is none.
	Missing *string
	NotNull bool
	// Attnum is the column's number in pg_attribute, 0 when unknown (a column of a Relation message that the
	// catalog, read later, no longer has under that name).
	Attnum int16
	// RenamedFrom is the column's name at the table's previous Relation message when it has been renamed
	// since (renamedColumns), announced as change.RenamedFromMeta.
	RenamedFrom string
}

// table is what the catalog says about a configured table.
type table struct {
	Name      config.TableName
	OID       uint32
	Kind      string // r: table, p: partitioned table
	Columns   []column
	Generated []string // generated columns: pgoutput (before PostgreSQL 18) does not send them
	// Key is the primary key, or the replica identity index's columns when there is no primary key.
	Key           []string
	HasPrimaryKey bool
	// ReplicaIdentity is d (default), f (full), i (index) or n (nothing); for a partitioned table, that of
	// its partitions, "mixed" when they differ.
	ReplicaIdentity string
	// IdentityIsKey is false when the replica identity index is not the primary key.
	IdentityIsKey bool
	// ExplicitKey: Key comes from the table's key_columns setting, not from the catalog.
	ExplicitKey bool
	// Append: the table is in mode: append (inserts only, through the append publication).
	Append bool
	// FullRow: the table is in mode: full_row (no key, REPLICA IDENTITY FULL): its stream is matched by full
	// row (change.MatchFullRow), an update sent as a delete of the old row and an insert of the new one.
	FullRow bool
	// Filter is the table's row filter (table_options where), "" for none: the snapshot's WHERE and the
	// publication's (rowfilter.go).
	Filter    string
	CanSelect bool
	Owned     bool
	Estimate  int64 // pg_class.reltuples over the leaves, 0 when never analysed
}

// errNoTable marks a configured table the database does not have.
var errNoTable = errors.New("no such table")

// loadTable reads a table's description. Types are resolved with r.
//
// The table's row, its columns with their types, its key's indexes and its partitions are read in one round
// trip (a batch, each statement finding the table by name): a start reads each configured table in its check,
// its discovery and its Read, and on a busy server each round trip costs milliseconds (issue #31). Only a
// column of a domain or array type costs one more (its base or element type).
func loadTable(ctx context.Context, q querier, r *typemap.Resolver, name config.TableName) (*table, error) {
	const rel = `(SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2)`
	b := &pgx.Batch{}
	b.Queue(`
		SELECT c.oid, c.relkind::text, c.relreplident::text, GREATEST(c.reltuples, 0)::bigint,
		       has_table_privilege(c.oid, 'SELECT'), pg_has_role(c.relowner, 'USAGE')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, name.Schema, name.Name)
	b.Queue(`
		SELECT a.attname, a.atttypid, a.atttypmod, a.attgenerated <> '', a.attstorage IN ('x', 'e') AND t.typlen = -1,
		       CASE WHEN a.atthasmissing THEN a.attmissingval::text END, a.attnotnull, a.attnum,
		       `+typemap.TypeRowSQL("a.atttypmod")+`
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = `+rel+` AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, name.Schema, name.Name)
	b.Queue(`
		SELECT i.indisprimary, i.indisreplident,
		       array(SELECT a.attname FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(n, o)
		             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n ORDER BY k.o)
		FROM pg_index i WHERE i.indrelid = `+rel+` AND (i.indisprimary OR i.indisreplident)`, name.Schema, name.Name)
	// Replica identity and size live on the leaves: a partitioned table has neither itself. (For a plain
	// table this is the table itself, unused.)
	b.Queue(`
		SELECT c.relreplident::text, GREATEST(c.reltuples, 0)::bigint
		FROM pg_partition_tree(`+rel+`) p JOIN pg_class c ON c.oid = p.relid WHERE p.isleaf`, name.Schema, name.Name)
	res := q.SendBatch(ctx, b)
	t, rows, err := readTable(res, name)
	if cerr := res.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("table %s: read the catalog: %w", name, cerr)
	}
	if err != nil {
		return nil, err
	}
	for i := range t.Columns {
		typ, err := r.ResolveRow(ctx, q, t.Columns[i].TypeOID, t.Columns[i].Typmod, rows[i])
		if err != nil {
			return nil, fmt.Errorf("table %s column %s: %w", name, t.Columns[i].Name, err)
		}
		t.Columns[i].Type = typ
	}
	return t, nil
}

// readTable reads loadTable's batch: the table and, for each of its columns, its type's row.
func readTable(res pgx.BatchResults, name config.TableName) (*table, []typemap.TypeRow, error) {
	t := &table{Name: name}
	var relreplident string
	err := res.QueryRow().Scan(&t.OID, &t.Kind, &relreplident, &t.Estimate, &t.CanSelect, &t.Owned)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, fmt.Errorf("table %s: %w", name, errNoTable)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("table %s: look up in pg_class: %w", name, err)
	}
	if t.Kind != "r" && t.Kind != "p" {
		return nil, nil, fmt.Errorf("table %s is not a table (relkind %s): only tables and partitioned tables can be replicated", name, t.Kind)
	}
	rows, err := res.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("table %s: read columns: %w", name, err)
	}
	var types []typemap.TypeRow
	for rows.Next() {
		var (
			c       column
			gen     bool
			missing *string
			tr      typemap.TypeRow
		)
		if err := rows.Scan(append([]any{&c.Name, &c.TypeOID, &c.Typmod, &gen, &c.Toastable, &missing, &c.NotNull, &c.Attnum}, tr.Scan()...)...); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("table %s: read columns: %w", name, err)
		}
		if missing != nil {
			// attmissingval is a one-element array of the column's type.
			elems, err := typemap.ParseArray(*missing)
			if err != nil || len(elems) != 1 {
				rows.Close()
				return nil, nil, fmt.Errorf("table %s column %s: missing value %q: want one element (%v)", name, c.Name, *missing, err)
			}
			c.Missing = elems[0]
		}
		if gen {
			t.Generated = append(t.Generated, c.Name)
			continue
		}
		t.Columns = append(t.Columns, c)
		types = append(types, tr)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("table %s: read columns: %w", name, err)
	}
	// The key: the primary key, else the replica identity index.
	var pk, ident []string
	rows, err = res.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("table %s: read indexes: %w", name, err)
	}
	for rows.Next() {
		var (
			primary, replident bool
			cols               []string
		)
		if err := rows.Scan(&primary, &replident, &cols); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("table %s: read indexes: %w", name, err)
		}
		if primary {
			pk = cols
		}
		if replident {
			ident = cols
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("table %s: read indexes: %w", name, err)
	}
	t.HasPrimaryKey = pk != nil
	t.Key = pk
	if t.Key == nil {
		t.Key = ident
	}
	t.IdentityIsKey = ident == nil || strings.Join(ident, ",") == strings.Join(t.Key, ",")
	rows, err = res.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("table %s: read partitions: %w", name, err)
	}
	defer rows.Close()
	if t.Kind == "r" {
		t.ReplicaIdentity = relreplident
		return t, types, nil
	}
	t.Estimate = 0
	idents := map[string]bool{}
	for rows.Next() {
		var (
			ri string
			n  int64
		)
		if err := rows.Scan(&ri, &n); err != nil {
			return nil, nil, fmt.Errorf("table %s: read partitions: %w", name, err)
		}
		idents[ri] = true
		t.Estimate += n
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("table %s: read partitions: %w", name, err)
	}
	switch {
	case len(idents) == 1:
		for ri := range idents {
			t.ReplicaIdentity = ri
		}
	case len(idents) == 0:
		t.ReplicaIdentity = relreplident // no partitions yet
	default:
		t.ReplicaIdentity = "mixed"
	}
	return t, types, nil
}

// loadConfigured is loadTable with the table's settings applied (table_options).
func loadConfigured(ctx context.Context, q querier, r *typemap.Resolver, cfg config.Settings, name config.TableName) (*table, error) {
	t, err := loadTable(ctx, q, r, name)
	if err != nil {
		return nil, err
	}
	opt := cfg.Options[name]
	t.Append = opt.Mode == config.ModeAppend
	t.FullRow = opt.Mode == config.ModeFullRow
	t.Filter = opt.Where
	if len(opt.KeyColumns) > 0 {
		// The old row carries every column under REPLICA IDENTITY FULL, else only the identity's.
		t.IdentityIsKey = t.ReplicaIdentity == "f" || slices.Equal(opt.KeyColumns, t.Key)
		t.Key, t.ExplicitKey = opt.KeyColumns, true
	}
	return t, nil
}

// exact says the table has no key to tell a copy's rows from the stream's, so its copies are exact (exact.go):
// mode: append and mode: full_row.
func (t *table) exact() bool { return t.Append || t.FullRow }

// keyColumnProblems says what is wrong with a table's key_columns: a column it does not have, or one that
// may hold NULL (a row without its key cannot be applied).
func (t *table) keyColumnProblems() []string {
	if !t.ExplicitKey {
		return nil
	}
	var out []string
	for _, k := range t.Key {
		i := slices.IndexFunc(t.Columns, func(c column) bool { return c.Name == k })
		switch {
		case i < 0:
			out = append(out, fmt.Sprintf("table %s has no column %q, which its key_columns setting lists (check table_options.%s.key_columns)", t.Name, k, t.Name))
		case !t.Columns[i].NotNull:
			out = append(out, fmt.Sprintf("column %s of table %s is a key column (key_columns) but may hold NULL: run ALTER TABLE %s ALTER COLUMN %s SET NOT NULL",
				k, t.Name, t.Name.Quoted(), pgx.Identifier{k}.Sanitize()))
		}
	}
	return out
}

// querier is what catalog reads need: a *pgx.Conn, a pgx.Tx or a *pgxpool.Pool.
type querier interface {
	typemap.Querier
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// schema builds the change schema of columns with key; the snapshot and the stream both use it, so an
// unchanged table never looks like a schema change. The policy adds _skippr_meta after the columns (at index
// len(cols)) when it records replaced values, whatever the data holds.
// fullRow marks the schema as matched by full row (mode: full_row), which then has no key.
func schema(cols []column, key []string, policy values.Policy, fullRow bool) *arrow.Schema {
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		fields[i] = typemap.Field(c.Name, c.Type)
		if c.Missing != nil {
			md := fields[i].Metadata
			fields[i].Metadata = arrow.NewMetadata(append(md.Keys(), values.MetaExistingRows), append(md.Values(), *c.Missing))
		}
		fields[i] = change.MarkRenamed(fields[i], c.RenamedFrom)
	}
	if fullRow {
		return change.WithFullRow(change.TimedSchema(policy.Fields(fields), nil))
	}
	return change.TimedSchema(policy.Fields(fields), key)
}

// stream is the table as a serve.Stream.
func (t *table) stream(policy values.Policy) serve.Stream {
	return serve.Stream{Name: t.Name.String(), Schema: schema(t.Columns, t.Key, policy, t.FullRow), PrimaryKey: t.Key,
		Modes: []serve.SyncMode{serve.ModeSnapshot, serve.ModeCDC}}
}

// toastable lists the columns an update may leave out (unchanged TOAST values).
func (t *table) toastable() []string {
	var out []string
	for _, c := range t.Columns {
		if c.Toastable {
			out = append(out, fmt.Sprintf("%s (%s)", c.Name, c.Type.Name))
		}
	}
	return out
}

// renamedColumns marks the columns of cur, a table's columns at a Relation message, that a RENAME COLUMN gave a
// new name since prev, its columns at the previous one. pgoutput sends the columns in attnum order but not
// their attnums, so a rename is read from positions: the same number of columns, and at one position a column
// of the same type under a name prev did not have while prev's name is gone (a swap of two names is not a
// rename here). Where the catalog gave both columns an attnum they must agree: a dropped last column and an
// added one of the same type differ there. When the catalog had moved on (neither name in it when read), the
// positions alone decide; plugins/postgres/README.md states the limit.
func renamedColumns(prev, cur []column) {
	if len(prev) != len(cur) {
		return
	}
	has := func(cols []column, name string) bool {
		return slices.ContainsFunc(cols, func(c column) bool { return c.Name == name })
	}
	for i := range cur {
		p, c := prev[i], &cur[i]
		if p.Name == c.Name || p.TypeOID != c.TypeOID || has(prev, c.Name) || has(cur, p.Name) {
			continue
		}
		if p.Attnum != 0 && c.Attnum != 0 && p.Attnum != c.Attnum {
			continue
		}
		c.RenamedFrom = p.Name
	}
}

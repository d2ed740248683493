package query

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

// Columns the WAL part carries besides the stream's: the op (from the change schema) and the row's place in
// the log, so the newest version of a key wins. The _skippr_ prefix is reserved: no stream has such a column.
const (
	opColumn    = "_skippr_op"
	orderColumn = "_skippr_order"
	opDelete    = 3 // change.OpDelete
)

// table is one queryable table: a lake plan and the WAL rows above its fence.
type table struct {
	pipeline  string
	namespace string
	plan      lakequery.TablePlan
	schema    *arrow.Schema   // the lake's current schema; nil when the table does not exist yet
	wal       []string        // Parquet files of WAL batches, in log order
	walIDs    []int64         // the WAL cache's batches of those files (when it gave them)
	walKey    []string        // the primary key the WAL batches declare
	walUUID   map[string]bool // columns of the WAL batches that hold UUIDs (written to Parquet as plain 16 bytes), true for lists of them
	// truncated: a WAL entry above the fence truncated the stream, so the lake's rows are gone and wal holds
	// only the rows after the last truncate.
	truncated bool
}

// schemaName is the DuckDB schema of the table: the lake's namespace.
func (t *table) schemaName() string {
	if t.namespace == "" {
		return "main"
	}
	return t.namespace
}

func (t *table) tableName() string { return t.plan.Table }

func (t *table) qualified() string {
	return ducksql.Ident(t.schemaName()) + "." + ducksql.Ident(t.tableName())
}

// create defines the table as a view in the database: the lake snapshot with its deletes applied, merged
// with the WAL rows. n makes the helper objects' names unique. A table with a _skippr_deleted column (a
// soft-deleting destination's, plugin-sdk/rowmeta) shows only the rows not flagged deleted, unless
// includeDeleted; a delete still in the WAL removes its row in both cases, as it does in every table.
func (t *table) create(ctx context.Context, conn *sql.Conn, n int, asOfLake, includeDeleted bool) error {
	if t.plan.ArrowSchema != nil {
		sc, err := protocol.DecodeSchema(memory.DefaultAllocator, t.plan.ArrowSchema)
		if err != nil {
			return fmt.Errorf("table %s: lake schema: %w", t.plan.Name, err)
		}
		t.schema = sc
	}
	lake, err := t.lakeSQL(ctx, conn, n)
	if err != nil {
		return fmt.Errorf("table %s: %w", t.plan.Name, err)
	}
	if t.truncated && !asOfLake && lake != "" {
		lake = "SELECT * FROM (" + lake + ") WHERE false" // the lake's columns, none of its rows
	}
	body := lake
	if !asOfLake && len(t.wal) > 0 {
		w := fmt.Sprintf("main._skippr_wal_%d", n)
		files := make([]string, len(t.wal))
		for i, f := range t.wal {
			files[i] = ducksql.Literal(f)
		}
		sel := "*"
		if len(t.walUUID) > 0 {
			var repl []string
			for _, c := range slices.Sorted(maps.Keys(t.walUUID)) {
				expr := uuidFromBlob(ducksql.Ident(c))
				if t.walUUID[c] {
					expr = uuidListFromBlobs(ducksql.Ident(c))
				}
				repl = append(repl, expr+" AS "+ducksql.Ident(c))
			}
			sel = "* REPLACE (" + strings.Join(repl, ", ") + ")"
		}
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("CREATE TABLE %s AS SELECT %s FROM read_parquet([%s], union_by_name = true)",
			w, sel, strings.Join(files, ", "))); err != nil {
			return fmt.Errorf("table %s: load WAL rows: %w", t.plan.Name, err)
		}
		// The newest version of each key and the WAL's keys are materialised once per database (in memory:
		// a persisted DuckDB table, or DuckDB's Parquet, keeps one of 0 and -0 of a float column — see
		// WALCache), so a statement neither windows the WAL rows nor reads a row of them it does not need.
		live, keys := fmt.Sprintf("main._skippr_live_%d", n), fmt.Sprintf("main._skippr_keys_%d", n)
		for _, q := range t.materializeSQL(w, live, keys, lake != "") {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("table %s: newest WAL versions: %w", t.plan.Name, err)
			}
		}
		body = t.mergeSQL(lake, live, keys)
	} else if lake == "" {
		return nil
	}
	if !includeDeleted && t.schema != nil && len(t.schema.FieldIndices(rowmeta.Deleted)) > 0 {
		body = "SELECT * FROM (" + body + ") WHERE " + ducksql.Ident(rowmeta.Deleted) + " IS NOT TRUE"
	}
	if _, err := conn.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+ducksql.Ident(t.schemaName())); err != nil {
		return fmt.Errorf("table %s: %w", t.plan.Name, err)
	}
	if _, err := conn.ExecContext(ctx, "CREATE VIEW "+t.qualified()+" AS "+body); err != nil {
		return fmt.Errorf("table %s: %w", t.plan.Name, err)
	}
	return nil
}

// lakeSQL is a query for the current snapshot: the data files read with columns matched by field id (so a
// renamed column or one added later reads right), minus the rows position and equality deletes remove.
// DuckDB's read_parquet applies no Iceberg deletes, so this does. "" when there is no lake table.
func (t *table) lakeSQL(ctx context.Context, conn *sql.Conn, n int) (string, error) {
	if t.schema == nil {
		return "", nil
	}
	// Columns are read under neutral names (_c<field id>) so that no column can collide with read_parquet's
	// filename and file_row_number, then renamed in the projection.
	var mapEntries, project, nulls []string
	entries := map[int]string{} // field id -> its read_parquet schema entry
	for _, f := range t.schema.Fields() {
		id, err := fieldID(f)
		if err != nil {
			return "", err
		}
		dt, err := ducksql.Type(f.Type)
		if err != nil {
			return "", fmt.Errorf("column %s: %w", f.Name, err)
		}
		col := "_c" + strconv.Itoa(id)
		entries[id] = fmt.Sprintf("%d: {name: %s, type: %s, default_value: %s}", id, ducksql.Literal(col), ducksql.Literal(dt), initialDefault(f))
		mapEntries = append(mapEntries, entries[id])
		if isUUID(f) {
			project = append(project, fmt.Sprintf("%s AS %s", uuidFromBlob("d."+col), ducksql.Ident(f.Name)))
			nulls = append(nulls, "CAST(NULL AS UUID) AS "+ducksql.Ident(f.Name))
			continue
		}
		if isUUIDList(f) {
			project = append(project, fmt.Sprintf("%s AS %s", uuidListFromBlobs("d."+col), ducksql.Ident(f.Name)))
			nulls = append(nulls, "CAST(NULL AS UUID[]) AS "+ducksql.Ident(f.Name))
			continue
		}
		project = append(project, fmt.Sprintf("d.%s AS %s", col, ducksql.Ident(f.Name)))
		nulls = append(nulls, fmt.Sprintf("CAST(NULL AS %s) AS %s", dt, ducksql.Ident(f.Name)))
	}
	if len(t.plan.Files) == 0 {
		return "SELECT " + strings.Join(nulls, ", ") + " WHERE false", nil
	}
	schemaArg := "MAP {" + strings.Join(mapEntries, ", ") + "}"
	var paths, where []string
	posFiles := map[string]bool{}
	type eqGroup struct {
		ids   []int
		files map[string]bool
	}
	eqGroups := map[string]*eqGroup{}
	var eqMap [][2]string // data file path, equality-delete file path
	for _, f := range t.plan.Files {
		paths = append(paths, ducksql.Literal(f.Path))
		for _, p := range f.PositionDeletes {
			posFiles[p] = true
		}
		for _, e := range f.EqualityDeletes {
			ids := slices.Clone(e.FieldIDs)
			slices.Sort(ids)
			k := fmt.Sprint(ids)
			g := eqGroups[k]
			if g == nil {
				g = &eqGroup{ids: ids, files: map[string]bool{}}
				eqGroups[k] = g
			}
			g.files[e.Path] = true
			eqMap = append(eqMap, [2]string{f.Path, e.Path})
		}
	}
	if len(posFiles) > 0 {
		// Position deletes name a data file by its location in the metadata; DuckDB knows the local path.
		locs := fmt.Sprintf("main._skippr_locations_%d", n)
		var rows [][2]string
		for _, f := range t.plan.Files {
			rows = append(rows, [2]string{f.Path, f.Location})
		}
		if err := createPairs(ctx, conn, locs, "path", "location", rows); err != nil {
			return "", err
		}
		where = append(where, fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM read_parquet([%s]) p JOIN %s l ON l.location = p.file_path
			WHERE l.path = d.filename AND p.pos = d.file_row_number)`, joinLiterals(posFiles), locs))
	}
	if len(eqGroups) > 0 {
		em := fmt.Sprintf("main._skippr_eqmap_%d", n)
		if err := createPairs(ctx, conn, em, "data_file", "delete_file", eqMap); err != nil {
			return "", err
		}
		keys := make([]string, 0, len(eqGroups))
		for k := range eqGroups {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			g := eqGroups[k]
			var ents, conds []string
			for _, id := range g.ids {
				ent, ok := entries[id]
				if !ok {
					return "", fmt.Errorf("an equality delete matches on field id %d, which the current schema does not have", id)
				}
				ents = append(ents, ent)
				// Iceberg equality deletes match NULL to NULL.
				col := "_c" + strconv.Itoa(id)
				conds = append(conds, fmt.Sprintf("e.%s IS NOT DISTINCT FROM d.%s", col, col))
			}
			where = append(where, fmt.Sprintf(`NOT EXISTS (SELECT 1 FROM read_parquet([%s], filename = true, schema = MAP {%s}) e
				JOIN %s m ON m.delete_file = e.filename WHERE m.data_file = d.filename AND %s)`,
				joinLiterals(g.files), strings.Join(ents, ", "), em, strings.Join(conds, " AND ")))
		}
	}
	q := fmt.Sprintf("SELECT %s FROM read_parquet([%s], filename = true, file_row_number = true, schema = %s) d",
		strings.Join(project, ", "), strings.Join(paths, ", "), schemaArg)
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return q, nil
}

// materializeSQL are the statements that turn the WAL rows in table w into table live, the newest version
// of each key unless it is a delete (every row but the deletes for a table without a key), and, when
// withKeys, table keys, every key the WAL rows hold (which the lake's rows of those keys give way to); then
// drop w. live is ordered by the key, so a lookup of one key reads one row group of a large WAL part.
func (t *table) materializeSQL(w, live, keys string, withKeys bool) []string {
	const dataCols = "COLUMNS(c -> NOT starts_with(c, '_skippr_'))"
	key := t.key()
	if len(key) == 0 {
		return []string{
			fmt.Sprintf("CREATE TABLE %s AS SELECT %s FROM %s WHERE %s <> %d", live, dataCols, w, opColumn, opDelete),
			"DROP TABLE " + w,
		}
	}
	cols := strings.Join(quoteAll(key), ", ")
	q := []string{fmt.Sprintf("CREATE TABLE %s AS SELECT %s FROM (SELECT * FROM %s QUALIFY row_number() OVER (PARTITION BY %s ORDER BY %s DESC) = 1) WHERE %s <> %d ORDER BY %s",
		live, dataCols, w, cols, orderColumn, opColumn, opDelete, cols)}
	if withKeys {
		q = append(q, fmt.Sprintf("CREATE TABLE %s AS SELECT DISTINCT %s FROM %s ORDER BY %s", keys, cols, w, cols))
	}
	return append(q, "DROP TABLE "+w)
}

// mergeSQL merges the WAL's newest versions (table live) over the lake query: a lake row whose key is in
// table keys gives way (to its newest version, or to nothing after a delete). A table without a key only
// appends.
func (t *table) mergeSQL(lake, live, keys string) string {
	if lake == "" {
		return "SELECT * FROM " + live
	}
	key := t.key()
	if len(key) == 0 {
		return fmt.Sprintf("(%s) UNION ALL BY NAME (SELECT * FROM %s)", lake, live)
	}
	var conds []string
	for _, k := range key {
		conds = append(conds, fmt.Sprintf("w.%s IS NOT DISTINCT FROM l.%s", ducksql.Ident(k), ducksql.Ident(k)))
	}
	return fmt.Sprintf("(SELECT * FROM (%s) l WHERE NOT EXISTS (SELECT 1 FROM %s w WHERE %s)) UNION ALL BY NAME (SELECT * FROM %s)",
		lake, keys, strings.Join(conds, " AND "), live)
}

// key is the table's primary key: the lake's identifier fields, or the WAL schema's when the table has no
// lake rows yet.
func (t *table) key() []string {
	if len(t.plan.Key) > 0 {
		return t.plan.Key
	}
	return t.walKey
}

// isUUID says whether a field holds UUIDs: the arrow.uuid extension, registered in this process or only
// named in the field's metadata.
func isUUID(f arrow.Field) bool {
	if ext, ok := f.Type.(arrow.ExtensionType); ok {
		return ext.ExtensionName() == "arrow.uuid"
	}
	name, _ := f.Metadata.GetValue("ARROW:extension:name")
	return name == "arrow.uuid"
}

// uuidFromBlob is a DuckDB expression turning 16 bytes into a UUID: data files hold a UUID as 16 bytes, which
// read_parquet reads as a BLOB unless the file marks the column with Parquet's UUID logical type.
func uuidFromBlob(expr string) string { return "CAST(" + expr + " AS UUID)" }

// isUUIDList says whether a field is a list of UUIDs (a PostgreSQL uuid[]).
func isUUIDList(f arrow.Field) bool {
	lt, ok := f.Type.(arrow.ListLikeType)
	return ok && isUUID(lt.ElemField())
}

// uuidListFromBlobs is uuidFromBlob for each element of a list.
func uuidListFromBlobs(expr string) string {
	return "list_transform(" + expr + ", u -> " + uuidFromBlob("u") + ")"
}

func fieldID(f arrow.Field) (int, error) {
	v, ok := f.Metadata.GetValue("PARQUET:field_id")
	if !ok {
		return 0, fmt.Errorf("column %s has no field id in the lake schema", f.Name)
	}
	id, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("column %s: field id %q: %w", f.Name, v, err)
	}
	return id, nil
}

func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = ducksql.Ident(n)
	}
	return out
}

func joinLiterals(set map[string]bool) string {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, ducksql.Literal(k))
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// createPairs creates a table of two VARCHAR columns holding rows (not a temp table: the database's views
// read it from every connection).
func createPairs(ctx context.Context, conn *sql.Conn, name, a, b string, rows [][2]string) error {
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("CREATE TABLE %s (%s VARCHAR, %s VARCHAR)", name, a, b)); err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	const per = 500
	for i := 0; i < len(rows); i += per {
		vals := make([]string, 0, per)
		for _, r := range rows[i:min(i+per, len(rows))] {
			vals = append(vals, "("+ducksql.Literal(r[0])+", "+ducksql.Literal(r[1])+")")
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO "+name+" VALUES "+strings.Join(vals, ", ")); err != nil {
			return fmt.Errorf("fill %s: %w", name, err)
		}
	}
	return nil
}

// initialDefault is what a row of a data file that lacks column f reads: its initial default
// (lakequery.MetaInitialDefault, text) as a literal, which read_parquet casts to the column's type, or NULL.
// Every entry's default_value is VARCHAR: the schema argument is a MAP, whose values share one type.
func initialDefault(f arrow.Field) string {
	if v, ok := f.Metadata.GetValue(lakequery.MetaInitialDefault); ok {
		return ducksql.Literal(v)
	}
	return "CAST(NULL AS VARCHAR)"
}

package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/bigquerytest"
	"github.com/skippr-dev/skippr/testkit/pgtest"
	"github.com/skippr-dev/skippr/testkit/snowflaketest"
)

// matrixDest is a destination plugin of the option × destination matrix: its connection settings for one
// option set, and how to read a table back as JSON objects (numbers as json.Number, NULL as nil).
type matrixDest struct {
	plugin string
	// settings is the connection's settings as a JSON object (valid YAML), with opt (JSON members, maybe
	// empty) among them; conn names the connection, unique in the config.
	settings func(m *matrixRun, conn, opt string) string
	// read returns the rows of table (items, people, items_history...) of the connection.
	read func(t *testing.T, m *matrixRun, conn, settings, table string) []map[string]any
}

// matrixRun is what a matrixDest needs of the test: the environment and the destination database, and the
// warehouse stand-ins (Snowflake: one per connection, as its schema is fixed; BigQuery: one, a dataset per
// connection), started on first use.
type matrixRun struct {
	t   *testing.T
	e   *harness.Env
	dst *pgtest.DB
	pg  *pgx.Conn
	sf  map[string]*snowflaketest.Server
	bq  *bigquerytest.Server
}

// matrixDests are the destinations the matrix runs. Adding one that supports soft_delete, metadata_columns,
// history and table_options is one line here (its settings and its read-back).
var matrixDests = []matrixDest{
	{plugin: "postgres", settings: pgMatrixSettings, read: pgMatrixRead},
	{plugin: "duckdb", settings: duckMatrixSettings, read: duckMatrixRead},
	{plugin: "iceberg", settings: lakeMatrixSettings, read: lakeMatrixRead},
	// The warehouses against their stand-ins (testkit/snowflaketest, testkit/bigquerytest): the services
	// cannot run here.
	{plugin: "snowflake", settings: sfMatrixSettings, read: sfMatrixRead},
	{plugin: "bigquery", settings: bqMatrixSettings, read: bqMatrixRead},
}

func sfMatrixSettings(m *matrixRun, conn, opt string) string {
	if m.sf == nil {
		m.sf = map[string]*snowflaketest.Server{}
		m.e.ExtraEnv = append(m.e.ExtraEnv, "SNOWFLAKE_SECRET=s3cret")
	}
	sf := snowflaketest.New(m.t, snowflaketest.Options{Account: "matrix", User: "loader", Password: "s3cret",
		Database: "ANALYTICS", Schema: "RAW", Warehouse: "LOAD_WH", Role: "LOADER", ConnString: m.dst.Server.NewDB(m.t).ConnString()})
	m.sf[conn] = sf
	return fmt.Sprintf(`{"account": "matrix", "user": "loader", "password": "${SNOWFLAKE_SECRET}", "warehouse": "LOAD_WH", "role": "LOADER", "database": "ANALYTICS", "schema": "RAW", "host": %q, "port": %d, "protocol": "http"%s}`,
		sf.Host, sf.Port, withComma(opt))
}

// sfMatrixRead reads the stand-in's table (Snowflake folds unquoted names to upper case) with the names in
// lower case, as the other destinations have them.
func sfMatrixRead(t *testing.T, m *matrixRun, conn, _, table string) []map[string]any {
	t.Helper()
	rows, err := m.sf[conn].Rows(context.Background(), strings.ToUpper(table))
	if err != nil {
		t.Fatalf("%s: read %s: %v", conn, table, err)
	}
	return lowerKeys(rows)
}

func bqMatrixSettings(m *matrixRun, conn, opt string) string {
	if m.bq == nil {
		m.bq = bigquerytest.Start(m.t, "skippr-matrix")
	}
	return fmt.Sprintf(`{"project": %q, "dataset": %q, "endpoint": %q%s}`, m.bq.Project, conn, m.bq.URL, withComma(opt))
}

func bqMatrixRead(t *testing.T, m *matrixRun, conn, _, table string) []map[string]any {
	t.Helper()
	rows, err := harness.PostgresJSONRows(context.Background(), m.bq.Pool(), pgx.Identifier{conn, table}.Sanitize())
	if err != nil {
		t.Fatalf("%s: read %s: %v", conn, table, err)
	}
	return lowerKeys(rows)
}

func lowerKeys(rows []map[string]any) []map[string]any {
	for i, r := range rows {
		l := make(map[string]any, len(r))
		for k, v := range r {
			l[strings.ToLower(k)] = v
		}
		rows[i] = l
	}
	return rows
}

func pgMatrixSettings(m *matrixRun, conn, opt string) string {
	s := m.dst.Server
	return fmt.Sprintf(`{"host": %q, "port": %d, "user": "postgres", "database": %q, "sslmode": "disable", "schema": %q%s}`, s.Host, s.Port, m.dst.Name, conn, withComma(opt))
}

func pgMatrixRead(t *testing.T, m *matrixRun, conn, _, table string) []map[string]any {
	t.Helper()
	var text string
	q := `SELECT coalesce(json_agg(t), '[]')::text FROM ` + pgx.Identifier{conn, table}.Sanitize() + ` t`
	if err := m.pg.QueryRow(context.Background(), q).Scan(&text); err != nil {
		t.Fatalf("%s: read %s: %v", conn, table, err)
	}
	var rows []map[string]any
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	if err := dec.Decode(&rows); err != nil {
		t.Fatalf("%s: read %s: %v", conn, table, err)
	}
	return rows
}

func duckMatrixSettings(m *matrixRun, conn, opt string) string {
	return fmt.Sprintf(`{"path": %q%s}`, filepath.Join(m.e.Dir, "dest", conn+".duckdb"), withComma(opt))
}

func duckMatrixRead(t *testing.T, _ *matrixRun, _, settings, table string) []map[string]any {
	t.Helper()
	n := 0
	rows := harness.PluginRows(t, "duckdb", "dump", settings, "public."+table, "the DuckDB table", func([]byte, map[string]any) string {
		n++
		return strconv.Itoa(n)
	})
	return slices.Collect(maps.Values(rows))
}

func lakeMatrixSettings(m *matrixRun, conn, opt string) string {
	return fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"%s}`, filepath.Join(m.e.Dir, "lake_"+conn), withComma(opt))
}

// lakeMatrixRead scans a lake table (deletes applied) with the iceberg plugin binary; a history table is
// read as the stream public.<table>_history.
func lakeMatrixRead(t *testing.T, _ *matrixRun, _, settings, table string) []map[string]any {
	t.Helper()
	n := 0
	rows := harness.PluginRows(t, "iceberg", "scan", settings, "public."+table, "the lake table", func([]byte, map[string]any) string {
		n++
		return strconv.Itoa(n)
	})
	return slices.Collect(maps.Values(rows))
}

func withComma(opt string) string {
	if opt == "" {
		return ""
	}
	return ", " + opt
}

// matrixOption is one option set of a destination connection, and what it means for each table.
type matrixOption struct {
	name          string
	settings      string // JSON members
	items, people rowmeta.Options
}

var matrixOptions = []matrixOption{
	{name: "plain"},
	{name: "soft", settings: `"soft_delete": true`, items: rowmeta.Options{SoftDelete: true}, people: rowmeta.Options{SoftDelete: true}},
	{
		name:     "meta",
		settings: `"metadata_columns": ["synced_at", "source_committed_at", "op", "position"]`,
		items:    rowmeta.Options{SyncedAt: true, SourceCommittedAt: true, Op: true, Position: true},
		people:   rowmeta.Options{SyncedAt: true, SourceCommittedAt: true, Op: true, Position: true},
	},
	{name: "hist", settings: `"history": true`, items: rowmeta.Options{History: true}, people: rowmeta.Options{History: true}},
	{
		// The connection soft-deletes with an op column; public.people is overridden: no added column, a history.
		name:     "override",
		settings: `"soft_delete": true, "metadata_columns": ["op"], "table_options": {"public.people": {"soft_delete": false, "metadata_columns": [], "history": true}}`,
		items:    rowmeta.Options{SoftDelete: true, Op: true},
		people:   rowmeta.Options{History: true},
	},
}

// matrixChange is one change as the destinations receive it: a row of table (op snapshot, insert, update or
// delete; vals the data columns as text, nil for a delete) or a truncate.
type matrixChange struct {
	table    string
	op       string
	id       int
	vals     map[string]string
	truncate bool
}

// matrixSource generates the write load and the change sequence the destinations receive from it. items is
// carried whole; people has exclude_columns [ssn], hash_columns {email} and where region = 'eu' on the source,
// so only its eu rows arrive, without ssn, with email hashed, an update moving a row out of eu as a delete
// and one moving it in as an insert.
type matrixSource struct {
	rnd    *rand.Rand
	items  map[int][2]string // id → v, n
	people map[int][3]string // id → name, email, region
	next   int
	log    []matrixChange
}

const matrixSalt = "matrix-pepper"

func (s *matrixSource) itemVals(id int) map[string]string {
	r := s.items[id]
	return map[string]string{"id": strconv.Itoa(id), "v": r[0], "n": r[1]}
}

func (s *matrixSource) personVals(id int) map[string]string {
	r := s.people[id]
	return map[string]string{"id": strconv.Itoa(id), "name": r[0], "email": hmacHex(matrixSalt, r[1]), "region": r[2]}
}

// pick returns a random key of m (ok false: m is empty).
func pick[V any](rnd *rand.Rand, m map[int]V) (int, bool) {
	if len(m) == 0 {
		return 0, false
	}
	keys := slices.Sorted(maps.Keys(m))
	return keys[rnd.IntN(len(keys))], true
}

// step returns the SQL of one random change and logs what the destinations receive of it.
func (s *matrixSource) step(truncate bool) string {
	if truncate {
		clear(s.items)
		s.log = append(s.log, matrixChange{table: "items", truncate: true})
		return `TRUNCATE items`
	}
	s.next++
	n := s.next
	if s.rnd.IntN(3) == 0 { // people
		region := []string{"eu", "us"}[s.rnd.IntN(2)]
		id, ok := pick(s.rnd, s.people)
		switch k := s.rnd.IntN(10); {
		case !ok || k < 4:
			id = 1000 + n
			s.people[id] = [3]string{fmt.Sprint("p", n), fmt.Sprintf("p%d@example.com", n), region}
			if region == "eu" {
				s.log = append(s.log, matrixChange{table: "people", op: "insert", id: id, vals: s.personVals(id)})
			}
			return fmt.Sprintf(`INSERT INTO people VALUES (%d, 'p%d', 'p%d@example.com', 'ssn-%d', '%s')`, id, n, n, n, region)
		case k < 8:
			was := s.people[id][2]
			s.people[id] = [3]string{fmt.Sprint("p", n), fmt.Sprintf("q%d@example.com", n), region}
			switch {
			case was == "eu" && region == "eu":
				s.log = append(s.log, matrixChange{table: "people", op: "update", id: id, vals: s.personVals(id)})
			case was == "eu":
				s.log = append(s.log, matrixChange{table: "people", op: "delete", id: id})
			case region == "eu":
				s.log = append(s.log, matrixChange{table: "people", op: "insert", id: id, vals: s.personVals(id)})
			}
			return fmt.Sprintf(`UPDATE people SET name = 'p%d', email = 'q%d@example.com', ssn = 'ssn-%d', region = '%s' WHERE id = %d`, n, n, n, region, id)
		default:
			if s.people[id][2] == "eu" {
				s.log = append(s.log, matrixChange{table: "people", op: "delete", id: id})
			}
			delete(s.people, id)
			return fmt.Sprintf(`DELETE FROM people WHERE id = %d`, id)
		}
	}
	id, ok := pick(s.rnd, s.items)
	switch k := s.rnd.IntN(10); {
	case !ok || k < 4:
		id = n
		s.items[id] = [2]string{fmt.Sprint("v", n), strconv.Itoa(n % 97)}
		s.log = append(s.log, matrixChange{table: "items", op: "insert", id: id, vals: s.itemVals(id)})
		return fmt.Sprintf(`INSERT INTO items VALUES (%d, 'v%d', %d)`, id, n, n%97)
	case k < 7:
		s.items[id] = [2]string{fmt.Sprint("u", n), strconv.Itoa(n % 89)}
		s.log = append(s.log, matrixChange{table: "items", op: "update", id: id, vals: s.itemVals(id)})
		return fmt.Sprintf(`UPDATE items SET v = 'u%d', n = %d WHERE id = %d`, n, n%89, id)
	default:
		delete(s.items, id)
		s.log = append(s.log, matrixChange{table: "items", op: "delete", id: id})
		return fmt.Sprintf(`DELETE FROM items WHERE id = %d`, id)
	}
}

// matrixRow is what a destination holds for a key.
type matrixRow struct {
	vals    map[string]string
	deleted bool
	op      string
}

// matrixExpect folds the change sequence into what a destination with opt holds of table (rowmeta's
// semantics: a delete with soft_delete flags the row and keeps its last values, a delete of a key not held
// leaves nothing, an insert of a deleted key makes it live, a truncate removes every row).
func matrixExpect(log []matrixChange, table string, opt rowmeta.Options) map[int]matrixRow {
	st := map[int]matrixRow{}
	for _, c := range log {
		switch {
		case c.table != table:
		case c.truncate:
			clear(st)
		case c.op == "delete":
			r, ok := st[c.id]
			if !ok {
				continue
			}
			if !opt.SoftDelete {
				delete(st, c.id)
				continue
			}
			r.deleted, r.op = true, "delete"
			st[c.id] = r
		default:
			st[c.id] = matrixRow{vals: c.vals, op: c.op}
		}
	}
	return st
}

// text is a JSON value as the model writes it.
func text(v any) string {
	if v == nil {
		return "<nil>"
	}
	return fmt.Sprint(v)
}

// checkMirror compares a destination's table with the model: its columns (the data columns and exactly those
// opt adds), its keys, each row's values, _skippr_deleted and op, and that position, synced_at and
// source_committed_at are set (source_committed_at NULL just for snapshot rows).
func checkMirror(t *testing.T, what string, rows []map[string]any, dataCols []string, opt rowmeta.Options, want map[int]matrixRow) {
	t.Helper()
	wantCols := slices.Clone(dataCols)
	for _, c := range opt.Columns() {
		wantCols = append(wantCols, c.Name)
	}
	slices.Sort(wantCols)
	got := map[int]bool{}
	for _, r := range rows {
		cols := slices.Sorted(maps.Keys(r))
		if !slices.Equal(cols, wantCols) {
			t.Fatalf("%s: columns %v, want %v", what, cols, wantCols)
		}
		id, err := strconv.Atoi(text(r["id"]))
		if err != nil {
			t.Fatalf("%s: id %v", what, r["id"])
		}
		got[id] = true
		w, ok := want[id]
		if !ok {
			t.Errorf("%s: row %d is there; the changes leave none", what, id)
			continue
		}
		for _, c := range dataCols {
			if text(r[c]) != w.vals[c] {
				t.Errorf("%s: row %d: %s = %s, want %s", what, id, c, text(r[c]), w.vals[c])
			}
		}
		if opt.SoftDelete && (r[rowmeta.Deleted] == true) != w.deleted {
			t.Errorf("%s: row %d: %s = %v, want %v", what, id, rowmeta.Deleted, r[rowmeta.Deleted], w.deleted)
		}
		if opt.Op && text(r[rowmeta.Op]) != w.op {
			t.Errorf("%s: row %d: %s = %v, want %s", what, id, rowmeta.Op, r[rowmeta.Op], w.op)
		}
		if opt.Position && r[rowmeta.Position] == nil {
			t.Errorf("%s: row %d: %s is NULL", what, id, rowmeta.Position)
		}
		if opt.SyncedAt && r[rowmeta.SyncedAt] == nil {
			t.Errorf("%s: row %d: %s is NULL", what, id, rowmeta.SyncedAt)
		}
		if opt.SourceCommittedAt && (r[rowmeta.SourceCommittedAt] == nil) != (w.op == "snapshot") {
			t.Errorf("%s: row %d (op %s): %s = %v, want NULL for a snapshot row only", what, id, w.op, rowmeta.SourceCommittedAt, r[rowmeta.SourceCommittedAt])
		}
	}
	for id, w := range want {
		if !got[id] {
			t.Errorf("%s: row %d %+v is missing", what, id, w)
		}
	}
}

// checkHistory compares a history table with the change sequence of table: every change once, in order
// (position, seq), with its op and, but for deletes, its values; the snapshot's rows, whose order is the
// copy's, compared as a set. A truncate is no row.
func checkHistory(t *testing.T, what string, rows []map[string]any, dataCols []string, log []matrixChange, table string) {
	t.Helper()
	line := func(op string, vals func(string) string) string {
		s := op + " " + vals("id")
		if op != "delete" {
			for _, c := range dataCols[1:] {
				s += " " + c + "=" + vals(c)
			}
		}
		return s
	}
	var wantSnap, want []string
	for _, c := range log {
		if c.table != table || c.truncate {
			continue
		}
		l := line(c.op, func(col string) string {
			if col == "id" {
				return strconv.Itoa(c.id)
			}
			return c.vals[col]
		})
		if c.op == "snapshot" {
			wantSnap = append(wantSnap, l)
		} else {
			want = append(want, l)
		}
	}
	num := func(v any) int64 {
		n, err := strconv.ParseInt(text(v), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v is not a number", what, v)
		}
		return n
	}
	slices.SortFunc(rows, func(a, b map[string]any) int {
		return cmp.Or(cmp.Compare(num(a["_skippr_position"]), num(b["_skippr_position"])), cmp.Compare(num(a["_skippr_seq"]), num(b["_skippr_seq"])))
	})
	var gotSnap, got []string
	for _, r := range rows {
		op := text(r[rowmeta.Op])
		l := line(op, func(col string) string { return text(r[col]) })
		if op == "snapshot" {
			gotSnap = append(gotSnap, l)
		} else {
			got = append(got, l)
		}
		if (r[rowmeta.SourceCommittedAt] == nil) != (op == "snapshot") {
			t.Errorf("%s: %s: %s = %v, want NULL for a snapshot row only", what, l, rowmeta.SourceCommittedAt, r[rowmeta.SourceCommittedAt])
		}
	}
	slices.Sort(gotSnap)
	slices.Sort(wantSnap)
	if !slices.Equal(gotSnap, wantSnap) || !slices.Equal(got, want) {
		t.Errorf("%s: the history is\n%s\n%s\nwant\n%s\n%s", what, strings.Join(gotSnap, "\n"), strings.Join(got, "\n"), strings.Join(wantSnap, "\n"), strings.Join(want, "\n"))
	}
}

// TestRowMetaMatrix: one pipeline from a real Postgres source, under a write load of inserts, updates,
// deletes and a truncate (each statement its own transaction, while `skippr sync --once` runs), into every
// destination of matrixDests with every option set of matrixOptions (soft_delete, metadata_columns, history,
// a table_options override), the source applying exclude_columns, hash_columns and where to one table. Each
// destination's tables and history tables are compared with the state computed from the changes made.
func TestRowMetaMatrix(t *testing.T) {
	src := pgtest.NewDB(t)
	dst := src.Server.NewDB(t)
	src.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, v text, n int);
		CREATE TABLE people (id int PRIMARY KEY, name text, email text, ssn text, region text);
		ALTER TABLE people REPLICA IDENTITY FULL`)
	gen := &matrixSource{rnd: rand.New(rand.NewPCG(32, 2)), items: map[int][2]string{}, people: map[int][3]string{}, next: 100}
	// The snapshot: rows there before the pipeline's first sync.
	for id := 1; id <= 20; id++ {
		gen.items[id] = [2]string{fmt.Sprint("s", id), strconv.Itoa(id)}
		src.Exec(t, fmt.Sprintf(`INSERT INTO items VALUES (%d, 's%d', %d)`, id, id, id))
		gen.log = append(gen.log, matrixChange{table: "items", op: "snapshot", id: id, vals: gen.itemVals(id)})
		region := []string{"eu", "us"}[id%2]
		pid := 1000 + id
		gen.people[pid] = [3]string{fmt.Sprint("s", id), fmt.Sprintf("s%d@example.com", id), region}
		src.Exec(t, fmt.Sprintf(`INSERT INTO people VALUES (%d, 's%d', 's%d@example.com', 'ssn-s%d', '%s')`, pid, id, id, id, region))
		if region == "eu" {
			gen.log = append(gen.log, matrixChange{table: "people", op: "snapshot", id: pid, vals: gen.personVals(pid)})
		}
	}

	plugins := []string{"postgres"}
	for _, d := range matrixDests {
		if !slices.Contains(plugins, d.plugin) {
			plugins = append(plugins, d.plugin)
		}
	}
	e := harness.NewEnvWith(t, plugins...)
	m := &matrixRun{t: t, e: e, dst: dst, pg: dst.Connect(t)}
	s := src.Server
	var conns, names []string
	type target struct {
		dest     matrixDest
		opt      matrixOption
		conn     string
		settings string
	}
	var targets []target
	for _, d := range matrixDests {
		for _, o := range matrixOptions {
			conn := d.plugin + "_" + o.name
			set := d.settings(m, conn, o.settings)
			targets = append(targets, target{d, o, conn, set})
			names = append(names, conn)
			conns = append(conns, fmt.Sprintf("  %s:\n    plugin: %s\n    version: \"~> 0.1\"\n    settings: %s\n", conn, d.plugin, set))
		}
	}
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings:
      host: %[1]s
      port: %[2]d
      user: postgres
      database: %[3]s
      sslmode: disable
      tables: [public.items, public.people]
      slot: matrix
      publication: matrix
      table_options:
        public.people: { exclude_columns: [ssn], hash_columns: { email: { salt: %[4]s } }, where: "region = 'eu'" }
%[5]spipelines:
  matrix:
    source: src
    destinations: [%[6]s]
    wal:
      url: file://%[7]s
`, s.Host, s.Port, src.Name, matrixSalt, strings.Join(conns, ""), strings.Join(names, ", "), filepath.Join(e.Dir, "wal")))

	start := time.Now()
	e.MustRun("sync", "--once") // the snapshot
	// The write load: 400 changes with a truncate of items in the middle, each its own transaction, written
	// while sync runs; the log is complete once the writer ends.
	var stmts []string
	for i := range 400 {
		stmts = append(stmts, gen.step(i == 200))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := src.Connect(t)
	done := make(chan error, 1)
	go func() {
		for _, q := range stmts {
			if _, err := w.Exec(ctx, q); err != nil {
				done <- fmt.Errorf("%s: %w", q, err)
				return
			}
			time.Sleep(2 * time.Millisecond) // spread over the syncs below
		}
		done <- nil
	}()
	e.MustRun("sync", "--once")
	e.MustRun("sync", "--once")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.MustRun("sync", "--once")
	t.Logf("synced in %s", time.Since(start).Round(time.Millisecond))

	itemCols := []string{"id", "n", "v"}
	peopleCols := []string{"id", "email", "name", "region"}
	for _, tg := range targets {
		t.Run(tg.conn, func(t *testing.T) {
			for _, tb := range []struct {
				name string
				cols []string
				opt  rowmeta.Options
			}{{"items", itemCols, tg.opt.items}, {"people", peopleCols, tg.opt.people}} {
				what := tg.conn + " " + tb.name
				checkMirror(t, what, tg.dest.read(t, m, tg.conn, tg.settings, tb.name), tb.cols, tb.opt, matrixExpect(gen.log, tb.name, tb.opt))
				if tb.opt.History {
					checkHistory(t, what+"_history", tg.dest.read(t, m, tg.conn, tg.settings, tb.name+"_history"), tb.cols, gen.log, tb.name)
				}
			}
		})
	}
}

// A destination's table_options key that names no stream of the source (a typo) refuses the pipeline at
// start (exit 2), naming the key and the streams there are, and writes nothing.
func TestTableOptionsUnknownStreamRefused(t *testing.T) {
	src := pgtest.NewDB(t)
	dst := src.Server.NewDB(t)
	src.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, v text)`)
	s := src.Server
	e := harness.NewEnvWith(t, "postgres")
	wal := filepath.Join(e.Dir, "wal")
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.items], slot: typo, publication: typo }
  out:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[4]s, sslmode: disable, schema: out, table_options: { public.itemz: { history: true } } }
pipelines:
  orders:
    source: src
    destinations: [out]
    wal:
      url: file://%[5]s
`, s.Host, s.Port, src.Name, dst.Name, wal))
	e.SyncRefused("spell the key as the source names the stream", "destination out", "table_options names public.itemz, which is no stream of source src (its streams: public.items)")
	e.NoWAL(wal)

	// A destination connection that two pipelines write to may name either's streams: each pipeline's start
	// only logs the key its own source lacks, and both run.
	src.Exec(t, `CREATE TABLE other (id int PRIMARY KEY, v text); INSERT INTO items VALUES (1, 'a'); INSERT INTO other VALUES (2, 'b')`)
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.items], slot: typo, publication: typo }
  src2:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.other], slot: typo2, publication: typo2 }
  out:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[4]s, sslmode: disable, schema: out, table_options: { public.items: { history: true }, public.other: { soft_delete: true } } }
pipelines:
  orders:
    source: src
    destinations: [out]
    wal:
      url: file://%[5]s
  others:
    source: src2
    destinations: [out]
    wal:
      url: file://%[6]s
`, s.Host, s.Port, src.Name, dst.Name, wal, wal+"2"))
	r := e.MustRun("sync", "--once")
	if !strings.Contains(r.Stderr, "may be another pipeline's") {
		t.Errorf("sync --once did not log the other pipeline's key:\n%s", r.Stderr)
	}
	var n int
	if err := dst.Connect(t).QueryRow(context.Background(), `SELECT (SELECT count(*) FROM out.items_history) + (SELECT count(*) FROM out.other)`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("out holds %d rows (%v), want items_history's and other's", n, err)
	}
}

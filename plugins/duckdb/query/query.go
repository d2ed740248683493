// Package query answers `skippr query`: SQL over lake tables merged with the rows still in the WAL, in an
// in-memory DuckDB. Its input is a lakequery stream on stdin (see package lakequery): the lake plugin's plans
// and the WAL entries, which the engine read. This package never reads the WAL format or an Iceberg catalog.
//
// Each table becomes a view: the data files of its current snapshot read with read_parquet (columns matched by
// field id), minus the rows its position and equality deletes remove — read_parquet applies no Iceberg deletes,
// so the view does — merged with the WAL rows above the table's fence: per primary key the newest version wins
// and a delete removes the row. WAL batches are written to Parquet files (with the op and log order) and loaded
// into a table, rather than registered as Arrow views: those ignore projection and filter pushdown in
// duckdb-go v2.10506.0 and return wrong columns (see FIELD-NOTES); the newest version of each key and the
// WAL's keys are then materialised once, so a statement's lookup reads the lake's row groups that may hold
// its key (the filter reaches read_parquet) and the WAL's few matching rows.
//
// A server (Options.WAL) keeps each database between statements, keyed by the tables' plans and the WAL
// batches they see (engines.go): a statement whose key is cached runs in a new connection of a database that
// is locked down already and builds nothing. Only a single SELECT runs in a shared database; any other SQL
// gets a database of its own, as every statement of the one-shot command does.
package query

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/duckdb/duckdb-go/v2" // also the "duckdb" database/sql driver

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

// Options tune a query.
type Options struct {
	TempDir     string // for WAL rows and DuckDB's spill files (default: the system's)
	MemoryLimit string // DuckDB memory_limit (default: DuckDB's, 80% of RAM)
	// WAL, when set, keeps the WAL entries between queries whose request says what it sent before
	// (lakequery.Request.WAL); a request without it is answered from its own stream alone.
	WAL *WALCache
}

// Answer reads a query stream (package lakequery) from in and writes the answer to out in the requested format;
// the summary is the row count and time. An error in the SQL itself (DuckDB's message) wraps lakequery.ErrSQL.
func Answer(ctx context.Context, in io.Reader, out io.Writer, opt Options) (string, error) {
	start := time.Now()
	rd, req, err := lakequery.NewReader(in)
	if err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(opt.TempDir, "skippr-query-")
	if err != nil {
		return "", fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	var tables []*table
	// cacheable: the statement's WAL rows are the WAL cache's batches (or it reads the lake alone), which
	// outlive it, so a database built over them may answer later statements.
	cacheable := false
	if opt.WAL != nil && len(req.WAL) > 0 && !req.AsOfLake {
		var release func()
		if tables, release, err = opt.WAL.collect(ctx, req, rd); err != nil {
			return "", err
		}
		defer release()
		cacheable = true
	} else {
		if tables, err = collect(req, rd, tmp); err != nil {
			return "", err
		}
		cacheable = opt.WAL != nil && req.AsOfLake
	}
	limit := opt.MemoryLimit
	if req.MemoryLimit != "" {
		limit = req.MemoryLimit
	}
	var n int64
	var names []string
	answered := false
	if cacheable {
		if n, names, answered, err = answerCached(ctx, opt.WAL.engines, tables, req, limit, out); err != nil && answered {
			return "", queryError(err, limit, names)
		} else if err != nil {
			return "", err
		}
	}
	if !answered {
		e, err := buildEngine(ctx, tables, req.AsOfLake, req.IncludeDeleted, limit, tmp)
		if err != nil {
			return "", err
		}
		defer e.close()
		conn, err := e.conn(ctx)
		if err != nil {
			return "", err
		}
		defer conn.Close()
		if n, err = answer(ctx, conn, req, out, tmp); err != nil {
			return "", queryError(err, limit, e.names)
		}
	}
	return fmt.Sprintf("(%d %s, %s)", n, plural(n, "row"), time.Since(start).Round(100*time.Microsecond)), nil
}

// answerCached answers the request from the cache's database for its tables (building it when the cache has
// none) when its SQL is one SELECT statement (readOnlySQL); answered is false, and nothing written, otherwise
// (err then is an error before the SQL ran). names are the tables the database knows. A statement that waited
// for another's build which failed (that statement cancelled, say) is answered by the caller's own database.
func answerCached(ctx context.Context, cache *engineCache, tables []*table, req lakequery.Request, limit string, out io.Writer) (n int64, names []string, answered bool, err error) {
	key, err := engineKey(tables, req.AsOfLake, req.IncludeDeleted, limit)
	if err != nil {
		return 0, nil, false, err
	}
	batches := map[int64]bool{}
	for _, t := range tables {
		for _, id := range t.walIDs {
			batches[id] = true
		}
	}
	e, release, err := cache.get(ctx, key, batches, func(dir string) (*engine, error) {
		return buildEngine(ctx, tables, req.AsOfLake, req.IncludeDeleted, limit, dir)
	})
	if errors.Is(err, errOthersBuildFailed) {
		return 0, nil, false, nil
	}
	if err != nil {
		return 0, nil, false, err
	}
	defer release()
	conn, err := e.conn(ctx)
	if err != nil {
		return 0, nil, false, err
	}
	defer conn.Close()
	q := strings.TrimRight(strings.TrimSpace(req.SQL), "; \t\n")
	if ok, err := cache.singleSelect(ctx, conn, q); err != nil || !ok {
		return 0, nil, false, err
	}
	res := ""
	switch req.Format {
	case lakequery.FormatCSV, lakequery.FormatJSON, lakequery.FormatParquet:
		// DuckDB writes these results to a file (copyOut): under the database's allowed directory, one
		// directory per statement.
		if res, err = os.MkdirTemp(e.dir, "result-"); err != nil {
			return 0, nil, false, fmt.Errorf("result dir: %w", err)
		}
		defer os.RemoveAll(res)
	}
	n, err = answer(ctx, conn, req, out, res)
	return n, e.names, true, err
}

// queryError is the error of a statement that failed in DuckDB: out of memory (ErrMemory), the SQL refused
// (ErrSQL, with the known tables when it names one that does not exist), or a failure while it ran.
func queryError(err error, limit string, names []string) error {
	if isOutOfMemory(err) {
		if limit == "" {
			limit = "DuckDB's default, 80% of RAM"
		}
		return fmt.Errorf("%w (memory_limit %s; what could spill went to disk): %v", lakequery.ErrMemory, limit, err)
	}
	if !rejected(err) {
		// The SQL was accepted and failed while it ran (a conversion, a value out of range, I/O): the work
		// failed, which is not the status of bad SQL.
		return fmt.Errorf("query: %w", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "Catalog Error") && strings.Contains(msg, "does not exist") {
		known := "none (no pipeline writes to a lake yet)"
		if len(names) > 0 {
			known = strings.Join(names, ", ")
		}
		msg += "\nknown tables: " + known
	}
	return fmt.Errorf("%w: %s", lakequery.ErrSQL, msg)
}

// lockDown makes the user's SQL read-only towards everything outside this query's own in-memory database:
// DuckDB's external access is switched off (no COPY … TO, ATTACH of a file, INSTALL or LOAD, read_csv or
// read_text of an arbitrary file, glob, network access), except for the files the views read (the plans'
// data and delete files, by exact path) and the query's temp directory (where csv, json and parquet results
// are written and DuckDB spills). lock_configuration then keeps a statement from switching any of it back on.
// The SQL may still create tables and views: they live in memory and die with the query.
func lockDown(ctx context.Context, conn *sql.Conn, tables []*table, tmp string) error {
	var paths []string
	for _, t := range tables {
		for _, f := range t.plan.Files {
			paths = append(paths, ducksql.Literal(f.Path))
			for _, p := range f.PositionDeletes {
				paths = append(paths, ducksql.Literal(p))
			}
			for _, e := range f.EqualityDeletes {
				paths = append(paths, ducksql.Literal(e.Path))
			}
		}
	}
	for _, s := range []string{
		"SET allowed_directories = [" + ducksql.Literal(tmp+string(filepath.Separator)) + "]",
		"SET allowed_paths = [" + strings.Join(paths, ", ") + "]",
		"SET enable_external_access = false",
		"SET autoinstall_known_extensions = false",
		"SET autoload_known_extensions = false",
		"SET lock_configuration = true",
	} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("read-only query: %s: %w", s, err)
		}
	}
	return nil
}

// isOutOfMemory says err is DuckDB's "Out of Memory Error" (as dest's: the type, or the text some paths give).
func isOutOfMemory(err error) bool {
	var de *duckdb.Error
	if errors.As(err, &de) && de.Type == duckdb.ErrorTypeOutOfMemory {
		return true
	}
	return strings.Contains(err.Error(), "Out of Memory Error")
}

// rejected says whether DuckDB refused the SQL itself (it does not parse, names what does not exist, binds
// wrong types) rather than failing while running it.
func rejected(err error) bool {
	var de *duckdb.Error
	if !errors.As(err, &de) {
		return false
	}
	switch de.Type {
	case duckdb.ErrorTypeParser, duckdb.ErrorTypeSyntax, duckdb.ErrorTypeBinder, duckdb.ErrorTypeCatalog,
		duckdb.ErrorTypeParameterNotResolved, duckdb.ErrorTypeParameterNotAllowed, duckdb.ErrorTypeNotImplemented,
		duckdb.ErrorTypePermission:
		return true
	}
	return false
}

func plural(n int64, w string) string {
	if n == 1 {
		return w
	}
	return w + "s"
}

// streamKey names one pipeline's stream.
type streamKey struct{ pipeline, stream string }

// requestTables builds the tables of the request's plans, and indexes them by the stream whose WAL rows merge
// into each.
func requestTables(req lakequery.Request) ([]*table, map[streamKey]*table, error) {
	var tables []*table
	byName := map[string]*table{}
	byStream := map[streamKey]*table{}
	for _, l := range req.Lakes {
		for _, tp := range l.Plan.Tables {
			if prev, ok := byName[tp.Name]; ok {
				if prev.pipeline != l.Pipeline {
					return nil, nil, fmt.Errorf("table %s is the destination of pipelines %s and %s: skippr query cannot order two pipelines' WAL rows", tp.Name, prev.pipeline, l.Pipeline)
				}
				continue
			}
			t := &table{pipeline: l.Pipeline, namespace: l.Plan.Namespace, plan: tp}
			tables = append(tables, t)
			byName[tp.Name] = t
			byStream[streamKey{l.Pipeline, tp.Stream}] = t
		}
	}
	return tables, byStream, nil
}

// collect builds the tables of the request's plans and writes the WAL rows above each table's fence into
// Parquet files under dir.
func collect(req lakequery.Request, rd *lakequery.Reader, dir string) ([]*table, error) {
	tables, byStream, err := requestTables(req)
	if err != nil {
		return nil, err
	}
	var order, files int64
	for {
		e, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return tables, nil
		}
		if err != nil {
			return nil, err
		}
		if req.AsOfLake {
			continue
		}
		for _, b := range e.Batches {
			t, ok := byStream[streamKey{e.Pipeline, b.Stream}]
			if !ok {
				// The engine plans every stream its WAL entries hold, so this is a stream of a pipeline
				// without a lake destination: nothing to merge it into.
				continue
			}
			if e.Seq <= t.plan.Fence {
				continue
			}
			if b.Truncate {
				// Everything before it goes: the lake's rows and the WAL rows collected so far.
				t.truncated = true
				t.wal = nil
				continue
			}
			path := filepath.Join(dir, fmt.Sprintf("wal-%08d.parquet", files))
			files++
			rows, key, uuids, err := writeWALBatch(path, b.IPC, &order)
			if err != nil {
				return nil, fmt.Errorf("pipeline %s: WAL entry %d: stream %s: %w", e.Pipeline, e.Seq, b.Stream, err)
			}
			if rows == 0 {
				continue
			}
			t.wal = append(t.wal, path)
			if len(key) > 0 {
				t.walKey = key
			}
			for c, list := range uuids {
				if t.walUUID == nil {
					t.walUUID = map[string]bool{}
				}
				t.walUUID[c] = list
			}
		}
	}
}

// writeWALBatch writes a batch's rows with their place in the log (order, counting on) to a Parquet file. It
// returns the row count, the batch's primary key and its UUID columns (true for a list of UUIDs), which it
// writes as plain 16 bytes so that DuckDB reads every UUID column as a BLOB, whether or not a writer marked it
// (see uuidFromBlob); a list's elements are cast whether DuckDB reads them as BLOBs or UUIDs.
func writeWALBatch(path string, ipcBytes []byte, order *int64) (int64, []string, map[string]bool, error) {
	mem := memory.DefaultAllocator
	recs, sc, err := protocol.DecodeRecords(mem, ipcBytes)
	if err != nil {
		return 0, nil, nil, err
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	var total int64
	for _, r := range recs {
		total += r.NumRows()
	}
	if total == 0 {
		return 0, nil, nil, nil
	}
	fields := sc.Fields()
	uuids := map[string]bool{}
	for i, f := range fields {
		if isUUIDList(f) {
			uuids[f.Name] = true
		}
		if isUUID(f) {
			uuids[f.Name] = false
			fields[i] = arrow.Field{Name: f.Name, Type: &arrow.FixedSizeBinaryType{ByteWidth: 16}, Nullable: f.Nullable}
		}
		if f.Type.ID() == arrow.INTERVAL_MONTH_DAY_NANO {
			fields[i] = arrow.Field{Name: f.Name, Type: values.IntervalStruct, Nullable: f.Nullable}
		}
	}
	fields = append(fields, arrow.Field{Name: orderColumn, Type: arrow.PrimitiveTypes.Int64})
	meta := sc.Metadata()
	out := arrow.NewSchema(fields, &meta)
	f, err := os.Create(path)
	if err != nil {
		return 0, nil, nil, err
	}
	defer f.Close()
	// A temp file read once, right away: neither compression nor dictionaries pay for their CPU here.
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Uncompressed),
		parquet.WithDictionaryDefault(false), parquet.WithAllocator(mem))
	w, err := pqarrow.NewFileWriter(out, f, props, pqarrow.NewArrowWriterProperties(pqarrow.WithAllocator(mem)))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("parquet writer: %w", err)
	}
	for _, r := range recs {
		ob := array.NewInt64Builder(mem)
		for i := int64(0); i < r.NumRows(); i++ {
			ob.Append(*order)
			*order++
		}
		oa := ob.NewArray()
		ob.Release()
		cols := append(append([]arrow.Array{}, r.Columns()...), oa)
		var converted []arrow.Array
		for i, c := range cols {
			if ext, ok := c.(array.ExtensionArray); ok && isUUID(sc.Field(i)) {
				cols[i] = ext.Storage()
			}
			if iv, ok := c.(*array.MonthDayNanoInterval); ok {
				cols[i] = values.IntervalsAsStruct(mem, iv, values.IntervalStruct)
				converted = append(converted, cols[i])
			}
		}
		rec := array.NewRecordBatch(out, cols, r.NumRows())
		err := w.Write(rec)
		rec.Release()
		oa.Release()
		for _, c := range converted {
			c.Release()
		}
		if err != nil {
			w.Close()
			return 0, nil, nil, fmt.Errorf("write %s: %w", path, err)
		}
	}
	if err := w.Close(); err != nil {
		return 0, nil, nil, fmt.Errorf("close %s: %w", path, err)
	}
	return total, change.PrimaryKey(sc), uuids, nil
}

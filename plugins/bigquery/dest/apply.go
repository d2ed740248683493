package dest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"cloud.google.com/go/bigquery"
	"cloud.google.com/go/bigquery/storage/apiv1/storagepb"
	"cloud.google.com/go/bigquery/storage/managedwriter"
	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/bigquery/gsql"
	"github.com/skippr-dev/skippr/plugins/bigquery/rows"
)

// StageExpiry is how long a staging table lives when the apply that made it dies before dropping it.
const StageExpiry = 24 * time.Hour

// maxAppendBytes bounds one AppendRows request: the Storage Write API refuses requests over 10 MB.
const maxAppendBytes = 8 << 20

// TableName is the destination table of a stream: its last dot-separated part (public.users → users).
func TableName(stream string) string {
	if i := strings.LastIndexByte(stream, '.'); i >= 0 {
		return stream[i+1:]
	}
	return stream
}

// streamPlan collects a stream's batches, folded: per key the last change, keys in first-seen order.
type streamPlan struct {
	stream  string
	schemas []*arrow.Schema
	fold    *change.Fold
	recs    []arrow.RecordBatch
}

// Stats counts an apply's calls to BigQuery, for the figures in BENCHMARKS.md.
type Stats struct {
	Statements   int   // statements in the transaction
	RoundTrips   int   // REST and gRPC requests
	StagedRows   int64 // rows written to staging tables
	StagedBytes  int64 // protobuf bytes of those rows
	StagingTable int
}

// Apply commits a range of WAL sequence numbers atomically with the state rows.
func (d *Destination) Apply(ctx context.Context, req serve.ApplyRequest) (serve.ApplyResult, error) {
	res, _, err := d.apply(ctx, req)
	return res, err
}

func (d *Destination) apply(ctx context.Context, req serve.ApplyRequest) (serve.ApplyResult, Stats, error) {
	var st Stats
	s, err := ParseSettings(req.Settings)
	if err != nil {
		return serve.ApplyResult{}, st, err
	}
	if req.Pipeline == "" {
		return serve.ApplyResult{}, st, errors.New("apply: no pipeline name")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	c, err := d.conn(ctx, s)
	if err != nil {
		return serve.ApplyResult{}, st, err
	}
	a := &applier{c: c, req: req, st: &st, log: d.log()}
	res, err := a.run(ctx)
	if err != nil {
		// What this process believed (fence, table schemas) may be wrong now: read it again next time.
		delete(c.fences, req.Pipeline)
		c.tables = map[string]bigquery.Schema{}
	}
	a.dropStages()
	return res, st, err
}

type applier struct {
	c      *conn
	req    serve.ApplyRequest
	st     *Stats
	log    interface{ Warn(string, ...any) }
	stages []*bigquery.Table
}

func (a *applier) run(ctx context.Context) (serve.ApplyResult, error) {
	var res serve.ApplyResult
	c, req := a.c, a.req
	if err := c.ensureState(ctx); err != nil {
		return res, err
	}
	fence, ok := c.fences[req.Pipeline]
	if !ok {
		if _, err := c.readState(ctx, req.Pipeline); err != nil {
			return res, err
		}
		a.st.RoundTrips += 3 // jobs.insert, getQueryResults, jobs.get
		fence = c.fences[req.Pipeline]
	}
	if req.Covers(fence) {
		return serve.ApplyResult{Skipped: true}, nil
	}
	var (
		plans   []*streamPlan
		byName  = map[string]*streamPlan{}
		touched = map[string]bool{}
	)
	plan := func(stream string) *streamPlan {
		sp := byName[stream]
		if sp == nil {
			sp = &streamPlan{stream: stream, fold: change.NewFold(change.FoldOptions{})}
			byName[stream] = sp
			plans = append(plans, sp)
		}
		return sp
	}
	for _, it := range req.Items {
		seq := it.Sequence
		if seq == 0 {
			seq = req.Sequence
		}
		switch {
		case it.Schema != nil:
			// Schema changes are applied again even when the rest of their entry is held: adding a
			// column that exists is nothing.
			sp := plan(it.Stream)
			sp.schemas = appendSchema(sp.schemas, it.Schema.Schema)
		case seq <= fence:
			// Part of a range this destination holds already (its fence lies inside the range).
		case it.Truncate:
			plan(it.Stream).fold.Truncate()
			touched[it.Stream] = true
		case it.Record != nil:
			sp := plan(it.Stream)
			sp.schemas = appendSchema(sp.schemas, it.Record.Schema())
			if err := sp.add(it.Record); err != nil {
				return res, fmt.Errorf("stream %s: %w", it.Stream, err)
			}
			res.Rows += it.Record.NumRows()
			touched[it.Stream] = true
		default:
			return res, fmt.Errorf("stream %s: item holds neither a batch, a schema nor a truncate", it.Stream)
		}
	}
	tables := map[string]string{}
	for _, sp := range plans {
		t := strings.ToLower(TableName(sp.stream))
		if other, ok := tables[t]; ok {
			return res, fault.ConfigErr(fmt.Errorf("streams %s and %s both map to table %s", other, sp.stream, TableName(sp.stream)),
				"replicate only one of them into this dataset (BigQuery table names ignore case)")
		}
		tables[t] = sp.stream
	}
	stmts := []string{gsql.AssertFence(c.table(gsql.StateTable))}
	for _, sp := range plans {
		ss, err := a.writeStream(ctx, sp)
		if err != nil {
			return res, fmt.Errorf("stream %s: %w", sp.stream, err)
		}
		stmts = append(stmts, ss...)
	}
	streams := []string{gsql.WholePipeline}
	for s := range touched {
		streams = append(streams, s)
	}
	sort.Strings(streams[1:])
	stmts = append(stmts, gsql.SetState(c.table(gsql.StateTable)))
	a.st.Statements = len(stmts) + 2
	crashPoint(c.s.TestCrashDir, req)
	if _, err := c.query(ctx, gsql.Transaction(stmts), map[string]any{
		"pipeline": req.Pipeline, "fence": int64(fence), "sequence": int64(req.Sequence), "streams": streams,
	}); err != nil {
		return res, fmt.Errorf("apply sequence %d–%d: %w", req.FirstSequence, req.Sequence, err)
	}
	a.st.RoundTrips += 3
	c.fences[req.Pipeline] = req.Sequence
	return res, nil
}

func sameSchema(x, y *arrow.Schema) bool {
	return x == y || (x.Equal(y) && protocol.SchemaID(x) == protocol.SchemaID(y))
}

func appendSchema(list []*arrow.Schema, s *arrow.Schema) []*arrow.Schema {
	for _, x := range list {
		if sameSchema(x, s) {
			return list
		}
	}
	return append(list, s)
}

func (sp *streamPlan) add(rec arrow.RecordBatch) error {
	ops, err := change.OpValues(rec)
	if err != nil {
		return err
	}
	key, err := change.KeyOf(rec)
	if err != nil {
		return err
	}
	if err := sp.fold.Add(key, ops); err != nil {
		return err
	}
	sp.recs = append(sp.recs, rec)
	return nil
}

// writeStream brings the stream's table up to its schemas, stages the surviving rows (one staging table per
// batch schema), and returns the statements that move them into the table.
func (a *applier) writeStream(ctx context.Context, sp *streamPlan) ([]string, error) {
	name := TableName(sp.stream)
	var stmts []string
	for _, s := range sp.schemas {
		if err := a.ensureTable(ctx, name, s); err != nil {
			return nil, err
		}
	}
	if sp.fold.Truncated() {
		stmts = append(stmts, gsql.Truncate(a.c.table(name)))
	}
	type group struct {
		schema *arrow.Schema
		last   []change.Last
	}
	var groups []*group
	for _, l := range sp.fold.Last() {
		s := sp.recs[l.Batch].Schema()
		var g *group
		for _, x := range groups {
			if sameSchema(x.schema, s) {
				g = x
				break
			}
		}
		if g == nil {
			g = &group{schema: s}
			groups = append(groups, g)
		}
		g.last = append(g.last, l)
	}
	target := a.c.tables[name]
	for _, g := range groups {
		cols, idx, types, err := targetColumns(name, target, g.schema)
		if err != nil {
			return nil, err
		}
		stage, err := a.stage(ctx, name, types, g.schema, idx, sp.recs, g.last)
		if err != nil {
			return nil, err
		}
		if key := change.PrimaryKey(g.schema); len(key) > 0 {
			var kidx []int
			for _, k := range key {
				for i, c := range cols {
					if strings.EqualFold(c, k) {
						kidx = append(kidx, i)
					}
				}
			}
			if len(kidx) != len(key) {
				return nil, fault.DataErr(fmt.Errorf("primary key %v is not among the columns of the batch", key), "the source must send its key columns")
			}
			stmts = append(stmts, gsql.Merge(a.c.table(name), stage, cols, kidx, rows.StageName))
		} else {
			stmts = append(stmts, gsql.Append(a.c.table(name), stage, cols, rows.StageName))
		}
	}
	return stmts, nil
}

// targetColumns matches a batch's data columns to the target's: the target's spelling of each name, the
// Arrow column indexes, and the target's types, which must be what the Arrow types map to.
func targetColumns(table string, target bigquery.Schema, s *arrow.Schema) (cols []string, idx []int, types []*bigquery.FieldSchema, err error) {
	for i, f := range s.Fields() {
		if change.Reserved(f.Name) {
			continue
		}
		want := rows.Column(f.Name, f)
		var have *bigquery.FieldSchema
		for _, t := range target {
			if strings.EqualFold(t.Name, f.Name) {
				have = t
				break
			}
		}
		if have == nil {
			return nil, nil, nil, fmt.Errorf("table %s has no column %s after adding it", table, f.Name)
		}
		if !rows.SameType(want, have) {
			return nil, nil, nil, typeErr(table, f, have, want)
		}
		cols, idx, types = append(cols, have.Name), append(idx, i), append(types, have)
	}
	return cols, idx, types, nil
}

func typeErr(table string, f arrow.Field, have, want *bigquery.FieldSchema) error {
	return fault.DataErr(fmt.Errorf("table %s column %s is %s in BigQuery, but the stream's %s maps to %s", table, f.Name, rows.Describe(have), f.Type, rows.Describe(want)),
		fmt.Sprintf("change the column in BigQuery to %s (ALTER TABLE … or recreate the table), or give the source column a type that maps to %s", rows.Describe(want), rows.Describe(have)))
}

// ensureTable creates the table from s, or adds the columns of s it lacks (NULLABLE, by a table patch). A
// column whose type differs stops the apply with a fault.DataErr naming both types.
func (a *applier) ensureTable(ctx context.Context, name string, s *arrow.Schema) error {
	c := a.c
	t := c.dataset().Table(name)
	target, ok := c.tables[name]
	etag := ""
	if !ok {
		md, err := t.Metadata(ctx)
		a.st.RoundTrips++
		switch {
		case isNotFound(err):
		case err != nil:
			return classify(fmt.Errorf("table %s: %w", c.table(name), err), c.s)
		default:
			target, etag = md.Schema, md.ETag
		}
	}
	fields := change.DataFields(s)
	if target == nil {
		if len(fields) == 0 {
			return fault.DataErr(fmt.Errorf("the stream's schema has no data columns"), "the source must send at least one column")
		}
		var schema bigquery.Schema
		for _, f := range fields {
			if err := rows.CheckName(f.Name); err != nil {
				return fault.DataErr(fmt.Errorf("table %s: %w", c.table(name), err), "rename the source column")
			}
			schema = append(schema, rows.Column(f.Name, f))
		}
		md := &bigquery.TableMetadata{Schema: schema, Description: "written by skippr"}
		if key := change.PrimaryKey(s); len(key) > 0 {
			// Not enforced by BigQuery, but its optimizer uses it; clustering by the key makes the MERGE
			// read less of the table.
			md.TableConstraints = &bigquery.TableConstraints{PrimaryKey: &bigquery.PrimaryKey{Columns: key}}
			if clusterable(schema, key) {
				md.Clustering = &bigquery.Clustering{Fields: key}
			}
		}
		err := t.Create(ctx, md)
		a.st.RoundTrips++
		if err != nil && !isConflict(err) {
			return classify(fmt.Errorf("create table %s: %w", c.table(name), err), c.s)
		}
		if err != nil { // created meanwhile: read what is there
			delete(c.tables, name)
			return a.ensureTable(ctx, name, s)
		}
		c.tables[name] = schema
		return nil
	}
	var added bigquery.Schema
	for _, f := range fields {
		want := rows.Column(f.Name, f)
		var have *bigquery.FieldSchema
		for _, x := range target {
			if strings.EqualFold(x.Name, f.Name) {
				have = x
			}
		}
		switch {
		case have == nil:
			if err := rows.CheckName(f.Name); err != nil {
				return fault.DataErr(fmt.Errorf("table %s: %w", c.table(name), err), "rename the source column")
			}
			added = append(added, want)
		case !rows.SameType(want, have):
			return typeErr(c.table(name).String(), f, have, want)
		}
	}
	if len(added) == 0 {
		c.tables[name] = target
		return nil
	}
	if etag == "" {
		md, err := t.Metadata(ctx)
		a.st.RoundTrips++
		if err != nil {
			return classify(fmt.Errorf("table %s: %w", c.table(name), err), c.s)
		}
		target, etag = md.Schema, md.ETag
	}
	grown := append(append(bigquery.Schema{}, target...), added...)
	md, err := t.Update(ctx, bigquery.TableMetadataToUpdate{Schema: grown}, etag)
	a.st.RoundTrips++
	if err != nil {
		return classify(fmt.Errorf("add columns %s to %s: %w", names(added), c.table(name), err), c.s)
	}
	c.tables[name] = md.Schema
	return nil
}

func names(s bigquery.Schema) string {
	out := make([]string, len(s))
	for i, f := range s {
		out[i] = f.Name + " " + rows.Describe(f)
	}
	return strings.Join(out, ", ")
}

// clusterable says whether BigQuery can cluster on the key columns: at most four, of the types it allows.
func clusterable(s bigquery.Schema, key []string) bool {
	if len(key) > 4 {
		return false
	}
	for _, k := range key {
		ok := false
		for _, f := range s {
			if strings.EqualFold(f.Name, k) && !f.Repeated {
				switch rows.Canonical(f.Type) {
				case rows.Int64, rows.String, rows.Date, rows.Timestamp, rows.DateTime, rows.Bool, rows.Numeric, rows.BigNumeric:
					ok = true
				}
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// stage creates a staging table for rows of one batch schema and writes them through a pending stream,
// committed as a whole: the staging table ends with all of them or (after a crash) none.
func (a *applier) stage(ctx context.Context, table string, types []*bigquery.FieldSchema, s *arrow.Schema, idx []int, recs []arrow.RecordBatch, last []change.Last) (gsql.Table, error) {
	c := a.c
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return gsql.Table{}, err
	}
	name := fmt.Sprintf("_skippr_stage_%s_%s", table, hex.EncodeToString(rnd[:]))
	if len(name) > 1024 {
		name = "_skippr_stage_" + hex.EncodeToString(rnd[:])
	}
	schema := rows.StageSchema(types)
	t := c.dataset().Table(name)
	if err := t.Create(ctx, &bigquery.TableMetadata{Schema: schema, ExpirationTime: time.Now().Add(StageExpiry),
		Description: "skippr staging table of one apply; dropped after it, expires if not"}); err != nil {
		return gsql.Table{}, classify(fmt.Errorf("create staging table %s: %w", c.table(name), err), c.s)
	}
	a.st.RoundTrips++
	a.st.StagingTable++
	a.stages = append(a.stages, t)

	enc, err := rows.NewEncoder(s, idx)
	if err != nil {
		return gsql.Table{}, err
	}
	parent := managedwriter.TableParentFromParts(c.s.Project, c.s.Dataset, name)
	ms, err := c.write.NewManagedStream(ctx, managedwriter.WithType(managedwriter.PendingStream),
		managedwriter.WithDestinationTable(parent), managedwriter.WithSchemaDescriptor(rows.Descriptor(schema)))
	if err != nil {
		return gsql.Table{}, classify(fmt.Errorf("staging table %s: open write stream: %w", name, err), c.s)
	}
	defer ms.Close()
	a.st.RoundTrips += 2 // CreateWriteStream, GetWriteStream
	var (
		buf     []byte
		bounds  []int
		offset  int64
		results []*managedwriter.AppendResult
	)
	flush := func() error {
		if len(bounds) == 0 {
			return nil
		}
		batch := make([][]byte, len(bounds))
		start := 0
		for i, end := range bounds {
			batch[i] = buf[start:end]
			start = end
		}
		r, err := ms.AppendRows(ctx, batch, managedwriter.WithOffset(offset))
		if err != nil {
			return classify(fmt.Errorf("staging table %s: append rows at offset %d: %w", name, offset, err), c.s)
		}
		a.st.RoundTrips++
		a.st.StagedBytes += int64(len(buf))
		results = append(results, r)
		offset += int64(len(bounds))
		buf, bounds = nil, nil
		return nil
	}
	for _, l := range last {
		rec := recs[l.Batch]
		var err error
		if buf, err = enc.Append(buf, rec, l.Row, int8(l.Op)); err != nil {
			return gsql.Table{}, fmt.Errorf("table %s: %w", table, err)
		}
		bounds = append(bounds, len(buf))
		if len(buf) >= maxAppendBytes {
			if err := flush(); err != nil {
				return gsql.Table{}, err
			}
		}
	}
	if err := flush(); err != nil {
		return gsql.Table{}, err
	}
	for _, r := range results {
		if _, err := r.GetResult(ctx); err != nil {
			return gsql.Table{}, classify(fmt.Errorf("staging table %s: append rows: %w", name, err), c.s)
		}
	}
	a.st.StagedRows += offset
	if _, err := ms.Finalize(ctx); err != nil {
		return gsql.Table{}, classify(fmt.Errorf("staging table %s: finalize write stream: %w", name, err), c.s)
	}
	resp, err := c.write.BatchCommitWriteStreams(ctx, &storagepb.BatchCommitWriteStreamsRequest{Parent: parent, WriteStreams: []string{ms.StreamName()}})
	if err != nil {
		return gsql.Table{}, classify(fmt.Errorf("staging table %s: commit write stream: %w", name, err), c.s)
	}
	a.st.RoundTrips += 2
	if errs := resp.GetStreamErrors(); len(errs) > 0 {
		return gsql.Table{}, fmt.Errorf("staging table %s: commit write stream: %s", name, errs[0].GetErrorMessage())
	}
	return c.table(name), nil
}

// dropStages deletes the apply's staging tables; one that cannot be deleted expires (StageExpiry).
func (a *applier) dropStages() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, t := range a.stages {
		if err := t.Delete(ctx); err != nil && !isNotFound(err) {
			a.log.Warn("could not drop staging table; it expires by itself", "table", t.TableID, "expires_in", StageExpiry, "err", err)
		}
		a.st.RoundTrips++
	}
}

// crashPoint is the test hook of Settings.TestCrashDir: the process exits between staging and commit.
func crashPoint(dir string, req serve.ApplyRequest) {
	if dir == "" || req.Sequence%25 != 0 {
		return
	}
	marker := filepath.Join(dir, fmt.Sprintf("crash-%s-%d", req.Pipeline, req.Sequence))
	if _, err := os.Stat(marker); !errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		return
	}
	os.Exit(3)
}

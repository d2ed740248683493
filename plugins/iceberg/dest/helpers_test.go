package dest

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// env is a destination over a temporary warehouse with its embedded SQLite catalog.
type env struct {
	t        *testing.T
	dir      string
	raw      json.RawMessage
	d        *Destination
	pipeline string
	expected map[string]map[string]map[string]any // stream -> key -> values, folded from everything applied
}

func newEnv(t *testing.T, extra map[string]any) *env {
	t.Helper()
	dir := t.TempDir()
	return newEnvAt(t, dir, extra)
}

func newEnvAt(t *testing.T, dir string, extra map[string]any) *env {
	t.Helper()
	return envWith(t, dir, map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(dir, "wh")}, "namespace": "lake"}, extra)
}

// envWith is an env over a fresh Destination with settings s, extra laid over them.
func envWith(t *testing.T, dir string, s, extra map[string]any) *env {
	t.Helper()
	maps.Copy(s, extra)
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	d := &Destination{Version: "test", Log: testLogger(t)}
	t.Cleanup(func() { d.Close() })
	return &env{t: t, dir: dir, raw: raw, d: d, pipeline: "p1", expected: map[string]map[string]map[string]any{}}
}

// testLogger sends the destination's logs to the test's log, shown with -v or on failure.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// apply applies the items as sequence seq and, unless it was skipped, folds them into the expected state.
func (e *env) apply(seq uint64, items ...serve.Item) serve.ApplyResult {
	e.t.Helper()
	res, err := e.d.Apply(ctxT(e.t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: seq, Items: items})
	if err != nil {
		e.t.Fatalf("apply %d: %v", seq, err)
	}
	if !res.Skipped {
		e.fold(items...)
	}
	return res
}

func (e *env) fold(items ...serve.Item) {
	e.t.Helper()
	for _, it := range items {
		if it.Truncate {
			if err := filedest.Replay(e.expected, []filedest.Row{{Stream: it.Stream, Truncate: true}}); err != nil {
				e.t.Fatal(err)
			}
			continue
		}
		if it.Record == nil {
			continue
		}
		rows, err := filedest.ToRows(it.Stream, it.Record)
		if err != nil {
			e.t.Fatal(err)
		}
		if err := filedest.Replay(e.expected, rows); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) catalog() *openCatalog {
	e.t.Helper()
	s, err := ParseSettings(e.raw)
	if err != nil {
		e.t.Fatal(err)
	}
	oc, err := e.d.catalog(ctxT(e.t), e.raw, s)
	if err != nil {
		e.t.Fatal(err)
	}
	return oc
}

func (e *env) table(name string) *table.Table {
	e.t.Helper()
	tbl, err := e.catalog().cat.LoadTable(ctxT(e.t), []string{"lake", name})
	if err != nil {
		e.t.Fatalf("load %s: %v", name, err)
	}
	return tbl
}

// rows scans a table with its deletes applied: key (as filedest builds it) -> values without nulls.
func (e *env) rows(name string, key ...string) map[string]map[string]any {
	e.t.Helper()
	tbl := e.table(name)
	at, err := tbl.Scan().ToArrowTable(ctxT(e.t))
	if err != nil {
		e.t.Fatalf("scan %s: %v", name, err)
	}
	defer at.Release()
	out := map[string]map[string]any{}
	tr := array.NewTableReader(at, 1024)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		sc := rec.Schema()
		for i := 0; i < int(rec.NumRows()); i++ {
			vals := map[string]any{}
			var ks []string
			for _, k := range key {
				b, _ := json.Marshal(rec.Column(sc.FieldIndices(k)[0]).GetOneForMarshal(i))
				ks = append(ks, string(b))
			}
			for j, f := range sc.Fields() {
				vals[f.Name] = rec.Column(j).GetOneForMarshal(i)
			}
			k := strings.Join(ks, "|")
			if _, dup := out[k]; dup {
				e.t.Errorf("table %s holds key %s twice", name, k)
			}
			out[k] = normalize(e.t, vals).(map[string]any)
		}
	}
	return out
}

// normalize passes a value through JSON and drops nulls, so that a column added later (null in old rows) and a
// column absent from an old batch compare equal.
func normalize(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return dropNulls(out)
}

func dropNulls(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e == nil {
				delete(x, k)
			} else {
				x[k] = dropNulls(e)
			}
		}
	case []any:
		for i := range x {
			x[i] = dropNulls(x[i])
		}
	}
	return v
}

// check compares a table with the state folded from everything applied to its stream.
func (e *env) check(stream, tableName string, key ...string) {
	e.t.Helper()
	got := e.rows(tableName, key...)
	want := map[string]map[string]any{}
	for k, v := range e.expected[stream] {
		want[k] = normalize(e.t, v).(map[string]any)
	}
	if !reflect.DeepEqual(got, want) {
		keys := slices.Sorted(maps.Keys(want))
		for _, k := range slices.Sorted(maps.Keys(got)) {
			if _, ok := want[k]; !ok {
				keys = append(keys, k)
			}
		}
		var diff []string
		for _, k := range keys {
			if !reflect.DeepEqual(got[k], want[k]) {
				diff = append(diff, fmt.Sprintf("key %s: got %v, want %v", k, got[k], want[k]))
			}
		}
		sort.Strings(diff)
		e.t.Fatalf("table %s differs from the folded changes (%d rows, want %d):\n%s", tableName, len(got), len(want), strings.Join(diff, "\n"))
	}
}

// row is one change row for batch: its op and the data columns' values in schema order.
type row struct {
	op   change.Op
	vals []any
}

func r(op change.Op, vals ...any) row { return row{op: op, vals: vals} }

// batch builds a change batch of the schema made by change.Schema.
func batch(t *testing.T, sc *arrow.Schema, rows ...row) arrow.RecordBatch {
	t.Helper()
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	n := len(change.DataFields(sc))
	for _, rw := range rows {
		if len(rw.vals) != n {
			t.Fatalf("row has %d values, schema %d data columns", len(rw.vals), n)
		}
		for i, v := range rw.vals {
			appendValue(t, b.Field(i), v)
		}
		b.Row(rw.op, "")
	}
	rec := b.NewBatch()
	t.Cleanup(rec.Release)
	return rec
}

func appendValue(t *testing.T, b array.Builder, v any) {
	t.Helper()
	if v == nil {
		b.AppendNull()
		return
	}
	switch bb := b.(type) {
	case *array.Int64Builder:
		bb.Append(int64(v.(int)))
	case *array.Int32Builder:
		bb.Append(int32(v.(int)))
	case *array.Float32Builder:
		bb.Append(float32(v.(float64)))
	case *array.Float64Builder:
		bb.Append(v.(float64))
	case *array.StringBuilder:
		bb.Append(v.(string))
	case *array.BooleanBuilder:
		bb.Append(v.(bool))
	case *array.TimestampBuilder:
		ts := v.(time.Time)
		bb.Append(arrow.Timestamp(ts.UnixMicro()))
	case *array.StructBuilder:
		m := v.(map[string]any)
		bb.Append(true)
		st := bb.Type().(*arrow.StructType)
		for i, f := range st.Fields() {
			appendValue(t, bb.FieldBuilder(i), m[f.Name])
		}
	case *array.ListBuilder:
		bb.Append(true)
		for _, e := range v.([]any) {
			appendValue(t, bb.ValueBuilder(), e)
		}
	default:
		t.Fatalf("test builder: unsupported %T", b)
	}
}

func items(stream string, recs ...arrow.RecordBatch) []serve.Item {
	out := make([]serve.Item, len(recs))
	for i, rec := range recs {
		out[i] = serve.Item{Stream: stream, Record: rec}
	}
	return out
}

func schemaItem(stream string, sc *arrow.Schema) serve.Item {
	return serve.Item{Stream: stream, Schema: &serve.Stream{Name: stream, Schema: sc, PrimaryKey: change.PrimaryKey(sc)}}
}

// tableFiles lists a table's live data and delete files by content.
func tableFiles(t *testing.T, tbl *table.Table) (data, deletes []string) {
	t.Helper()
	tasks, err := tbl.Scan().PlanFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, task := range tasks {
		data = append(data, task.File.FilePath())
		for _, df := range append(slices.Clone(task.DeleteFiles), task.EqualityDeleteFiles...) {
			if !seen[df.FilePath()] {
				seen[df.FilePath()] = true
				deletes = append(deletes, df.FilePath())
			}
		}
	}
	return data, deletes
}

// referencedManifests lists the manifest lists and manifests that tbl's snapshots reference, sorted, each once.
func referencedManifests(t *testing.T, tbl *table.Table) []string {
	t.Helper()
	fsys, err := tbl.FS(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var avro []string
	for _, s := range tbl.Metadata().Snapshots() {
		avro = append(avro, s.ManifestList)
		ms, err := s.Manifests(fsys)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			avro = append(avro, m.FilePath())
		}
	}
	return slices.Compact(slices.Sorted(slices.Values(avro)))
}

// sessionsOf holds, per Destination under test, the serve.Sessions that calls it as the engine does.
var sessionsOf sync.Map

func (d *Destination) sessions() *serve.Sessions {
	v, _ := sessionsOf.LoadOrStore(d, serve.NewSessions(d))
	return v.(*serve.Sessions)
}

// Apply, ApplyStream and LastApplied let the tests call the destination as before it had sessions: through
// the SDK's session cache, as Serve does.
func (d *Destination) Apply(ctx context.Context, req serve.ApplyRequest) (serve.ApplyResult, error) {
	return d.sessions().Apply(ctx, req)
}

func (d *Destination) ApplyStream(ctx context.Context, req serve.ApplyRequest, items iter.Seq2[serve.Item, error]) (serve.ApplyResult, error) {
	return d.sessions().ApplyStream(ctx, req, items)
}

func (d *Destination) LastApplied(ctx context.Context, raw json.RawMessage, pipeline string) (serve.Applied, error) {
	return d.sessions().LastApplied(ctx, raw, pipeline)
}

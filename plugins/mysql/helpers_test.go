package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/protect"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/mysql/source"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// pluginBin is the plugin binary, built once for the package.
var pluginBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "skippr-mysql-plugin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pluginBin = filepath.Join(dir, "skippr-plugin-mysql")
	if out, err := exec.Command("go", "build", "-o", pluginBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build plugin: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	mysqltest.Main(m, func() { os.RemoveAll(dir) })
}

func startPlugin(t testing.TB) *client.Client {
	t.Helper()
	return conformance.Start(t, pluginBin, nil)
}

// settings builds a settings object for db, connecting as root unless extra says otherwise.
func settings(db *mysqltest.DB, extra map[string]any) []byte {
	s := map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "root", "database": db.Name}
	for k, v := range extra {
		s[k] = v
	}
	b, _ := json.Marshal(s)
	return b
}

// startReading starts a Read; see conformance.Reading.
func startReading(t testing.TB, c *client.Client, set []byte, from []byte) *conformance.Reading {
	t.Helper()
	return conformance.StartReading(t, c, set, from)
}

func position(t testing.TB, b []byte) *source.Position {
	t.Helper()
	b, _, err := protect.Unwrap(b) // a pipeline with rules (or a row filter) wraps its positions
	if err != nil {
		t.Fatal(err)
	}
	p, err := source.DecodePosition(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// state is a destination in memory: per stream, per key, the row's values as text ("col=value ..." in the
// stream's column order). It folds change rows the way a destination does (upsert by key, delete by key), a
// truncate empties the stream, and a schema change reshapes the rows it holds as the SQL destinations do:
// columns kept by name, new ones filled with the value rows existing before them hold at the source
// (values.MetaExistingRows) or NULL, dropped ones gone.
type state struct {
	rows  map[string]map[string]string
	cells map[string]map[string]map[string]string
	cols  map[string][]string
	ops   map[change.Op]int
	// schemas counts the schema changes folded.
	schemas int
}

func newState() *state {
	return &state{rows: map[string]map[string]string{}, cells: map[string]map[string]map[string]string{}, cols: map[string][]string{}, ops: map[change.Op]int{}}
}

// apply folds a chunk's items.
func (s *state) apply(t testing.TB, c conformance.Chunk) {
	t.Helper()
	for _, it := range c.Items {
		switch {
		case it.Schema != nil:
			sc, err := protocol.DecodeSchema(memory.DefaultAllocator, it.Schema.ArrowSchema)
			if err != nil {
				t.Fatalf("decode schema of %s: %v", it.Schema.Name, err)
			}
			s.reshape(it.Schema.Name, sc)
			s.schemas++
		case it.Truncate != "":
			delete(s.rows, it.Truncate)
			delete(s.cells, it.Truncate)
		case it.Batch != nil:
			recs, _, err := protocol.DecodeRecords(memory.DefaultAllocator, it.Batch.IPC)
			if err != nil {
				t.Fatalf("decode batch of %s: %v", it.Batch.Stream, err)
			}
			for _, rec := range recs {
				s.fold(t, it.Batch.Stream, rec)
				rec.Release()
			}
		}
	}
}

func dataFields(sc *arrow.Schema) []arrow.Field {
	var out []arrow.Field
	for _, f := range sc.Fields() {
		if !strings.HasPrefix(f.Name, change.ReservedPrefix) {
			out = append(out, f)
		}
	}
	return out
}

// reshape gives the stream's rows a new schema, as a destination does: added columns filled, renamed ones
// (change.RenamedFromMeta) keeping their values.
func (s *state) reshape(stream string, sc *arrow.Schema) {
	var cols []string
	fill := map[string]string{}
	from := map[string]string{} // renamed columns: new name -> old
	for _, f := range dataFields(sc) {
		cols = append(cols, f.Name)
		fill[f.Name] = "NULL"
		if v, ok := f.Metadata.GetValue(values.MetaExistingRows); ok {
			fill[f.Name] = v
		}
		if old := change.RenamedFrom(f); old != "" {
			from[f.Name] = old
		}
	}
	s.cols[stream] = cols
	for k, row := range s.cells[stream] {
		nr := map[string]string{}
		for _, c := range cols {
			v, ok := row[c]
			if old, renamed := from[c]; renamed && !ok {
				v, ok = row[old] // a destination renames the column: the row keeps its value
			} else if slices.Contains(slices.Collect(maps.Values(from)), c) {
				ok = false // a new column under a name just renamed away
			}
			if !ok {
				v = fill[c]
			}
			nr[c] = v
		}
		s.cells[stream][k] = nr
		s.rows[stream][k] = render(cols, nr)
	}
}

func render(cols []string, row map[string]string) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = c + "=" + row[c]
	}
	return strings.Join(parts, " ")
}

func (s *state) fold(t testing.TB, stream string, rec arrow.RecordBatch) {
	ops, err := change.Ops(rec)
	if err != nil {
		t.Fatal(err)
	}
	key := change.PrimaryKey(rec.Schema())
	if s.rows[stream] == nil {
		s.rows[stream], s.cells[stream] = map[string]string{}, map[string]map[string]string{}
	}
	var cols []string
	for _, f := range dataFields(rec.Schema()) {
		cols = append(cols, f.Name)
	}
	if !slices.Equal(cols, s.cols[stream]) {
		s.reshape(stream, rec.Schema())
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		var k []string
		row := map[string]string{}
		for j, f := range rec.Schema().Fields() {
			if strings.HasPrefix(f.Name, change.ReservedPrefix) {
				continue
			}
			cell := cellText(rec.Column(j), i)
			row[f.Name] = cell
			if slices.Contains(key, f.Name) {
				k = append(k, cell)
			}
		}
		op := change.Op(ops.Value(i))
		s.ops[op]++
		ks := strings.Join(k, "|")
		if op == change.OpDelete {
			delete(s.rows[stream], ks)
			delete(s.cells[stream], ks)
			continue
		}
		s.cells[stream][ks] = row
		s.rows[stream][ks] = render(cols, row)
	}
}

func cellText(a arrow.Array, i int) string {
	if a.IsNull(i) {
		return "NULL"
	}
	if b, ok := a.(*array.Binary); ok {
		return fmt.Sprintf("%x", b.Value(i))
	}
	return a.ValueStr(i)
}

// freshIDs numbers the binlog client ids of snapshotState's Reads.
var freshIDs atomic.Int64

// snapshotState reads the tables afresh (a new Read from an empty checkpoint, up to the end of its snapshot):
// the source as it is now, to compare a destination with row by row.
func snapshotState(t testing.TB, c *client.Client, set []byte) *state {
	t.Helper()
	// Its own binlog client id: the server drops a dump connection when another one with the same id comes, and
	// the Read under test may be streaming with the settings' id.
	var m map[string]any
	if err := json.Unmarshal(set, &m); err != nil {
		t.Fatal(err)
	}
	m["server_id"] = 2_000_000 + freshIDs.Add(1)
	fresh, _ := json.Marshal(m)
	r := startReading(t, c, fresh, nil)
	defer r.Stop()
	s := newState()
	for {
		ch, err := r.Next(2 * time.Minute)
		if err != nil {
			t.Fatalf("fresh snapshot: %v", err)
		}
		s.apply(t, ch)
		if position(t, ch.Checkpoint.Position).Phase == source.PhaseStream {
			return s
		}
	}
}

// same fails the test when two states differ, showing the first differences.
func same(t testing.TB, want, got *state) {
	t.Helper()
	streams := map[string]bool{}
	for stream := range want.rows {
		streams[stream] = true
	}
	for stream := range got.rows {
		streams[stream] = true
	}
	for stream := range streams {
		w, g := want.rows[stream], got.rows[stream]
		if len(w) != len(g) {
			t.Errorf("%s: %d rows in the source, %d in the destination", stream, len(w), len(g))
		}
		shown := 0
		for k, v := range w {
			if g[k] != v && shown < 5 {
				t.Errorf("%s key %s:\n source      %s\n destination %s", stream, k, v, g[k])
				shown++
			}
		}
		for k, v := range g {
			if _, ok := w[k]; !ok && shown < 10 {
				t.Errorf("%s key %s only in the destination: %s", stream, k, v)
				shown++
			}
		}
	}
}

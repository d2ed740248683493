package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
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
	p, err := source.DecodePosition(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// state is a destination in memory: per stream, per key, the row's values as text. It folds change rows the
// way a destination does (upsert by key, delete by key).
type state struct {
	rows map[string]map[string]string
	ops  map[change.Op]int
}

func newState() *state { return &state{rows: map[string]map[string]string{}, ops: map[change.Op]int{}} }

// apply folds a chunk's batches.
func (s *state) apply(t testing.TB, c conformance.Chunk) {
	t.Helper()
	for _, it := range c.Items {
		if it.Batch == nil {
			continue
		}
		b := it.Batch
		recs, _, err := protocol.DecodeRecords(memory.DefaultAllocator, b.IPC)
		if err != nil {
			t.Fatalf("decode batch of %s: %v", b.Stream, err)
		}
		for _, rec := range recs {
			s.fold(t, b.Stream, rec)
			rec.Release()
		}
	}
}

func (s *state) fold(t testing.TB, stream string, rec arrow.RecordBatch) {
	ops, err := change.Ops(rec)
	if err != nil {
		t.Fatal(err)
	}
	key := change.PrimaryKey(rec.Schema())
	m := s.rows[stream]
	if m == nil {
		m = map[string]string{}
		s.rows[stream] = m
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		var k, v []string
		for j, f := range rec.Schema().Fields() {
			if strings.HasPrefix(f.Name, change.ReservedPrefix) {
				continue
			}
			cell := cellText(rec.Column(j), i)
			v = append(v, f.Name+"="+cell)
			if slices.Contains(key, f.Name) {
				k = append(k, cell)
			}
		}
		op := change.Op(ops.Value(i))
		s.ops[op]++
		ks := strings.Join(k, "|")
		if op == change.OpDelete {
			delete(m, ks)
			continue
		}
		m[ks] = strings.Join(v, " ")
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

// snapshotState reads the tables afresh (a new Read from an empty checkpoint, up to the end of its snapshot):
// the source as it is now, to compare a destination with row by row.
func snapshotState(t testing.TB, c *client.Client, set []byte) *state {
	t.Helper()
	r := startReading(t, c, set, nil)
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
	for stream, w := range want.rows {
		g := got.rows[stream]
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

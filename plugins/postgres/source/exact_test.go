package source

import (
	"context"
	"encoding/json"
	"maps"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// appended is an Emitter that keeps what an append-only destination would hold of a one-int-column stream: each
// value with its count, emptied by a truncate.
type appended struct {
	*folded   // checkpoints, marks and the changed signal
	mu        sync.Mutex
	vals      map[int32]int
	reads     int // snapshot reads
	truncates int
	copies    []copyGauges // the copy gauges of each checkpoint that has them
}

// copyGauges are the copy gauges of table public.a in one checkpoint (copyMetrics); copying is -1 when absent.
type copyGauges struct {
	rows, total, copying float64
}

func (a *appended) Checkpoint(ctx context.Context, cp serve.Checkpoint) error {
	g, named := copyGauges{copying: -1}, false
	for _, m := range cp.Metrics {
		if m.Labels["table"] != "public.a" {
			continue
		}
		switch m.Name {
		case "resnapshot_rows":
			g.rows, named = m.Value, true
		case "resnapshot_rows_total":
			g.total, named = m.Value, true
		case "resnapshot_copying":
			g.copying, named = m.Value, true
		}
	}
	if named {
		a.mu.Lock()
		a.copies = append(a.copies, g)
		a.mu.Unlock()
	}
	return a.folded.Checkpoint(ctx, cp)
}

func (a *appended) Batch(_ context.Context, _ string, rec arrow.RecordBatch) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	ops, err := change.Ops(rec)
	if err != nil {
		return err
	}
	vs := rec.Column(0).(*array.Int32)
	for i := range int(rec.NumRows()) {
		a.vals[vs.Value(i)]++
		if change.Op(ops.Value(i)) == change.OpRead {
			a.reads++
		}
	}
	return nil
}

func (a *appended) Truncate(context.Context, string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.vals = map[int32]int{}
	a.truncates++
	return nil
}

// TestAppendTableResnapshotIsExact: `skippr resnapshot` of a table in mode: append truncates it in the
// destination and copies it under a temporary slot's snapshot while streaming; rows inserted before the request,
// and after it, arrive exactly once (the table holds equal rows, so a repeated one would show in the counts). The
// checkpoints carry the copy's gauges as a re-snapshot's (`skippr status` and the metrics show it from them):
// rows done and total while it runs, then once resnapshot_copying 0 with the final count, then nothing.
func TestAppendTableResnapshotIsExact(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE a (v int); INSERT INTO a SELECT g % 50 FROM generate_series(1, 2000) g`)
	raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "postgres", "database": db.Name,
		"sslmode": "disable", "tables": []string{"public.a"}, "batch_size": 150, "slot": "ax_" + db.Name, "publication": "ax_" + db.Name,
		"table_options": map[string]any{"public.a": map[string]any{"mode": "append"}}})
	s := New()
	out := &appended{folded: newFolded(), vals: map[int32]int{}}
	readUntilWith(t, s, serve.ReadRequest{Settings: raw}, out, out.folded, func() bool { return out.idle })
	db.Exec(t, `INSERT INTO a SELECT g % 7 FROM generate_series(1, 300) g`)
	out.idle, out.reads = false, 0
	if len(out.copies) != 0 {
		t.Fatalf("the initial copy reported re-snapshot gauges: %+v", out.copies)
	}
	readUntilWith(t, s, serve.ReadRequest{Settings: raw, Checkpoint: out.last, Resnapshot: []string{"public.a"}}, out, out.folded, func() bool { return out.idle })
	checkCopyGauges(t, out.copies, 2300)
	out.copies = nil
	db.Exec(t, `INSERT INTO a SELECT g % 3 FROM generate_series(1, 100) g`)
	out.idle = false
	readUntilWith(t, s, serve.ReadRequest{Settings: raw, Checkpoint: out.last}, out, out.folded, func() bool { return out.idle })
	if len(out.copies) != 0 {
		t.Fatalf("checkpoints after the copy ended reported its gauges: %+v", out.copies)
	}

	want := map[int32]int{}
	rows, err := db.Connect(t).Query(context.Background(), `SELECT v, count(*)::int FROM a GROUP BY v`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v int32
		var n int
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		want[v] = n
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if out.truncates != 1 || out.reads != 2300 {
		t.Fatalf("%d truncates and %d snapshot reads in the re-snapshot, want 1 and 2300", out.truncates, out.reads)
	}
	if !maps.Equal(want, out.vals) {
		t.Fatalf("destination %v, table %v", out.vals, want)
	}
}

// checkCopyGauges checks the gauges of a copy of rows rows in chunks: climbing with resnapshot_copying 1, then
// one checkpoint with resnapshot_copying 0 and the final count as both rows and total, then none.
func checkCopyGauges(t *testing.T, got []copyGauges, rows float64) {
	t.Helper()
	if len(got) < 3 {
		t.Fatalf("copy gauges in %d checkpoints, want one per chunk and the end: %+v", len(got), got)
	}
	last := got[len(got)-1]
	if last != (copyGauges{rows: rows, total: rows, copying: 0}) {
		t.Fatalf("the copy's last gauges %+v, want rows and total %v with resnapshot_copying 0", last, rows)
	}
	prev := -1.0
	for i, g := range got[:len(got)-1] {
		if g.copying != 1 || g.rows < prev || g.rows > rows || g.total < g.rows {
			t.Fatalf("checkpoint %d of the copy: gauges %+v (rows before %v), want resnapshot_copying 1, rows climbing up to %v, total at least rows", i, g, prev, rows)
		}
		prev = g.rows
	}
	if prev <= 0 {
		t.Fatalf("no progress shown before the copy ended: %+v", got)
	}
}

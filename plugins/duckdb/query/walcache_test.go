package query

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

// cachedEntry is one WAL entry of a cached query's stream; truncate truncates the stream before the rows.
type cachedEntry struct {
	seq      uint64
	truncate bool
	rows     []walRow
}

// cachedQuery answers sql over the fixture lake (its fence set to fence) through cache, with the stream
// holding entries and the request saying ws of pipeline p.
func cachedQuery(t *testing.T, cache *WALCache, sql string, fence uint64, ws lakequery.WALState, entries ...cachedEntry) (string, error) {
	t.Helper()
	return cachedQueryOn(t, cache, lakeFixture(t), "csv", sql, fence, ws, entries...)
}

// cachedQueryOn is cachedQuery over the lake plan given, in format.
func cachedQueryOn(t *testing.T, cache *WALCache, plan lakequery.TablePlan, format, sql string, fence uint64, ws lakequery.WALState, entries ...cachedEntry) (string, error) {
	t.Helper()
	plan.Fence = fence
	ws.Pipeline = "p"
	var in bytes.Buffer
	w, err := lakequery.NewWriter(&in, lakequery.Request{SQL: sql, Format: format, WAL: []lakequery.WALState{ws},
		Lakes: []lakequery.Lake{{Pipeline: "p", Plan: lakequery.Plan{Namespace: "lake", Tables: []lakequery.TablePlan{plan}}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := w.Entry("p", e.seq); err != nil {
			t.Fatal(err)
		}
		if e.truncate {
			if err := w.Truncate("public.people"); err != nil {
				t.Fatal(err)
			}
		}
		if len(e.rows) > 0 {
			if err := w.Batch("public.people", int64(len(e.rows)), walBatch(t, e.rows...)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var out bytes.Buffer
	_, err = Answer(context.Background(), &in, &out, Options{TempDir: t.TempDir(), WAL: cache})
	return out.String(), err
}

// A server's queries through one WALCache answer as the uncached query does, while each entry is sent and
// written once: a stream holds only the entries after its Base, Through bounds what a query sees, a newer fence and Floor move the WAL side's lower bound (the applied
// entries leave it exactly when the lake snapshot holding them is used), and a stream that builds on entries
// the cache does not hold fails with ErrStale.
func TestWALCacheKeepsEntriesBetweenQueries(t *testing.T) {
	cache := NewWALCache(t.TempDir())
	defer cache.Close()
	const q = "SELECT id, name FROM people ORDER BY id"
	step := func(name string, fence uint64, ws lakequery.WALState, want string, written int, entries ...cachedEntry) {
		t.Helper()
		got, err := cachedQuery(t, cache, q, fence, ws, entries...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got != want {
			t.Fatalf("%s: got\n%s\nwant\n%s", name, got, want)
		}
		if cache.written != written {
			t.Fatalf("%s: %d WAL batches written in all, want %d", name, cache.written, written)
		}
	}
	e2 := cachedEntry{seq: 2, rows: []walRow{{change.OpInsert, 99, "applied already", ""}}}
	e3 := cachedEntry{seq: 3, rows: []walRow{{change.OpUpdate, 4, "dee2", "d@x"}, {change.OpDelete, 1, "", ""}, {change.OpInsert, 5, "eve", ""}, {change.OpInsert, 6, "fay", ""}}}
	e4 := cachedEntry{seq: 4, rows: []walRow{{change.OpDelete, 6, "", ""}, {change.OpUpdate, 5, "eve2", "e@x"}, {change.OpInsert, 2, "bob again", ""}}}
	e5 := cachedEntry{seq: 5, rows: []walRow{{change.OpUpdate, 2, "bob3", ""}}}

	// The first stream holds everything (as the uncached query's test, TestQueryMergesLakeAndWAL).
	step("full", 2, lakequery.WALState{Log: "L1", Through: 4}, "id,name\n2,bob again\n4,dee2\n5,eve2\n", 3, e2, e3, e4)
	// The next holds entry 5 alone.
	step("incremental", 2, lakequery.WALState{Log: "L1", Base: 4, Through: 5}, "id,name\n2,bob3\n4,dee2\n5,eve2\n", 4, e5)
	// Nothing new: nothing written.
	step("unchanged", 2, lakequery.WALState{Log: "L1", Base: 5, Through: 5}, "id,name\n2,bob3\n4,dee2\n5,eve2\n", 4)
	// A statement that started before entry 5 was committed does not see it.
	step("through", 2, lakequery.WALState{Log: "L1", Base: 5, Through: 4}, "id,name\n2,bob again\n4,dee2\n5,eve2\n", 4)
	// A stream sent again in full (the engine's retry) adds nothing twice.
	step("again in full", 2, lakequery.WALState{Log: "L1", Through: 5}, "id,name\n2,bob3\n4,dee2\n5,eve2\n", 4, e2, e3, e4, e5)

	// Entries 3 and 4 applied (the lake's fence moves to 4) and reclaimed: only entry 5 merges over the lake
	// (the fixture's lake rows stand for the snapshot: 1 ann, 4 dee).
	step("applied", 4, lakequery.WALState{Log: "L1", Base: 5, Through: 5, Floor: 4}, "id,name\n1,ann\n2,bob3\n4,dee\n", 4)

	for _, c := range []struct {
		name  string
		fence uint64
		ws    lakequery.WALState
	}{
		{"a plan older than the dropped entries", 2, lakequery.WALState{Log: "L1", Base: 5, Through: 5, Floor: 2}},
		{"a base past what arrived", 4, lakequery.WALState{Log: "L1", Base: 9, Through: 9, Floor: 4}},
		{"another log", 4, lakequery.WALState{Log: "L2", Base: 5, Through: 5, Floor: 4}},
	} {
		if _, err := cachedQuery(t, cache, q, c.fence, c.ws); !errors.Is(err, lakequery.ErrStale) {
			t.Fatalf("%s: error %v, want ErrStale", c.name, err)
		}
	}
	// A new log (the WAL made again) replaces what the cache held.
	step("new log", 0, lakequery.WALState{Log: "L2", Through: 1}, "id,name\n1,ann\n2,bob\n4,dee\n7,gus\n", 5,
		cachedEntry{seq: 1, rows: []walRow{{change.OpInsert, 7, "gus", ""}, {change.OpInsert, 2, "bob", ""}}})
	// A truncate above the fence hides the lake and the rows before it.
	step("truncate", 0, lakequery.WALState{Log: "L2", Base: 1, Through: 2}, "id,name\n8,hal\n", 6,
		cachedEntry{seq: 2, truncate: true, rows: []walRow{{change.OpInsert, 8, "hal", ""}}})
}

// A query's SQL can neither overwrite nor read the cached WAL files: they are loaded before its lock-down.
func TestWALCacheReadOnly(t *testing.T) {
	cache := NewWALCache(t.TempDir())
	defer cache.Close()
	e3 := cachedEntry{seq: 3, rows: []walRow{{change.OpInsert, 5, "eve", ""}}}
	if _, err := cachedQuery(t, cache, "SELECT 1", 2, lakequery.WALState{Log: "L", Through: 3}, e3); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(cache.dir, "wal-00000001.parquet")
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("the cache's batch file: %v", err)
	}
	for _, q := range []string{"COPY (SELECT 7 AS id) TO '" + file + "' (FORMAT parquet)", "SELECT * FROM read_parquet('" + file + "')"} {
		if _, err := cachedQuery(t, cache, q, 2, lakequery.WALState{Log: "L", Base: 3, Through: 3}); err == nil {
			t.Fatalf("%s: accepted", q)
		}
	}
	got, err := cachedQuery(t, cache, "SELECT id, name FROM people ORDER BY id", 2, lakequery.WALState{Log: "L", Base: 3, Through: 3})
	if err != nil {
		t.Fatal(err)
	}
	if want := "id,name\n1,ann\n4,dee\n5,eve\n"; got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// A server's statements over an unchanged lake plan and WAL state share one database: the second builds
// nothing and reads no WAL batch file (they are removed here to prove it), while a statement that sees
// another WAL state (Through) gets its own database and its own answer, also when both run at once. SQL
// that is not one SELECT is answered in a database of its own, so what it creates is gone for the next
// statement. Dropped batches (the Floor moved past them) drop the databases holding their rows.
func TestEngineCacheSharesDatabaseAcrossStatements(t *testing.T) {
	cache := NewWALCache(t.TempDir())
	defer cache.Close()
	const q = "SELECT id, name FROM people ORDER BY id"
	plan := lakeFixture(t)
	e3 := cachedEntry{seq: 3, rows: []walRow{{change.OpUpdate, 4, "dee2", "d@x"}, {change.OpDelete, 1, "", ""}, {change.OpInsert, 5, "eve", ""}}}
	e4 := cachedEntry{seq: 4, rows: []walRow{{change.OpUpdate, 5, "eve2", ""}}}
	want3, want4 := "id,name\n4,dee2\n5,eve\n", "id,name\n4,dee2\n5,eve2\n"
	ask := func(name, sql string, ws lakequery.WALState, entries ...cachedEntry) string {
		t.Helper()
		got, err := cachedQueryOn(t, cache, plan, "csv", sql, 2, ws, entries...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return got
	}
	if got := ask("first", q, lakequery.WALState{Log: "L", Through: 4}, e3, e4); got != want4 {
		t.Fatalf("first: got\n%s\nwant\n%s", got, want4)
	}
	if cache.engines.builds != 1 {
		t.Fatalf("%d databases built for the first statement, want 1", cache.engines.builds)
	}
	saved := map[string][]byte{}
	files, _ := filepath.Glob(filepath.Join(cache.dir, "wal-*.parquet"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		saved[f] = b
		os.Remove(f)
	}
	if got := ask("again", q, lakequery.WALState{Log: "L", Base: 4, Through: 4}); got != want4 {
		t.Fatalf("again: got\n%s\nwant\n%s", got, want4)
	}
	if cache.engines.builds != 1 {
		t.Fatalf("%d databases built after the same statement again, want 1", cache.engines.builds)
	}
	for f, b := range saved {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Statements that started before entry 4 (Through 3) and after it, at once.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			through, want := uint64(3+i%2), want3
			if through == 4 {
				want = want4
			}
			got, err := cachedQueryOn(t, cache, plan, "csv", q, 2, lakequery.WALState{Log: "L", Base: 4, Through: through})
			if err == nil && got != want {
				err = fmt.Errorf("through %d: got\n%s\nwant\n%s", through, got, want)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if cache.engines.builds != 2 {
		t.Fatalf("%d databases built after statements of two WAL states, want 2", cache.engines.builds)
	}
	// Not one SELECT: a database of its own.
	if got, err := cachedQueryOn(t, cache, plan, "table", "CREATE TABLE mine AS SELECT 1 AS x; SELECT x FROM mine", 2, lakequery.WALState{Log: "L", Base: 4, Through: 4}); err != nil || got != "x\n---\n1\n" {
		t.Fatalf("create: got %q %v", got, err)
	}
	if _, err := cachedQueryOn(t, cache, plan, "csv", "SELECT x FROM mine", 2, lakequery.WALState{Log: "L", Base: 4, Through: 4}); !errors.Is(err, lakequery.ErrSQL) {
		t.Fatalf("a table another statement created: %v, want ErrSQL (it does not exist)", err)
	}
	// Entries 3 and 4 applied (fence 4) and reclaimed (Floor 4): the databases holding their rows go.
	if _, err := cachedQueryOn(t, cache, plan, "csv", q, 4, lakequery.WALState{Log: "L", Base: 4, Through: 4, Floor: 4}); err != nil {
		t.Fatal(err)
	}
	cache.engines.mu.Lock()
	defer cache.engines.mu.Unlock()
	for _, e := range cache.engines.entries {
		if len(e.batches) > 0 {
			t.Fatalf("a database holding dropped WAL batches is still cached")
		}
	}
}

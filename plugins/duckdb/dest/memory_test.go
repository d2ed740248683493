package dest

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// TestApplyHoldsOneEntry applies a range of many entries metered by conformance.EntryMeter: the destination
// may keep the entry it is reading, not the range (README, Memory). The table must then hold each key's last
// change.
func TestApplyHoldsOneEntry(t *testing.T) {
	h := newHarness(t, "")
	const entries, perEntry = 30, 300
	m := conformance.NewEntryMeter(entries, perEntry)
	req := serve.ApplyRequest{Settings: h.settings, Pipeline: "p", FirstSequence: 1, Sequence: entries}
	if _, err := h.d.ApplyStream(ctx(t), req, m.Items(userSchema, "public.users")); err != nil {
		t.Fatal(err)
	}
	m.Check(t)
	h.wantRows(fmt.Sprintf(`SELECT count(*), min(name) LIKE '%%-%d' FROM users`, entries), fmt.Sprintf("%d|true", perEntry))
}

// TestMemoryLimitIsShared: three eighths of the memory_limit setting (256MiB when unset) become the
// database's, in place of DuckDB's 80% of RAM (under which an open apply transaction kept a 1 GiB range in
// memory), and a quarter the Go runtime's soft limit; a range larger than a tight limit still applies (DuckDB writes what is beyond it to
// the file's .tmp directory); a bad size is refused.
func TestMemoryLimitIsShared(t *testing.T) {
	for _, tc := range []struct {
		name, limit, want, err string
		goLimit                int64
		rows                   int
	}{
		{name: "set, a range above it", limit: "64MiB", want: "24.0 MiB", goLimit: 16 << 20, rows: 400_000},
		{name: "default", want: "96.0 MiB", goLimit: 64 << 20, rows: 1000},
		{name: "not a size", limit: "lots", err: `memory_limit "lots" is not a size`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dest.duckdb")
			m := map[string]string{"path": path}
			if tc.limit != "" {
				m["memory_limit"] = tc.limit
			}
			raw, _ := json.Marshal(m)
			if tc.err != "" {
				if _, err := ParseSettings(raw); err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error containing %q", err, tc.err)
				}
				return
			}
			var goLimit int64
			dest := &Destination{SetMemoryLimit: func(n int64) int64 { goLimit = n; return 0 }}
			h := &harness{t: t, d: serve.NewSessions(dest), dest: dest, path: path, settings: raw}
			t.Cleanup(func() { h.d.Close() })
			const entries = 10
			items := bigRange(tc.rows, entries)
			req := serve.ApplyRequest{Settings: raw, Pipeline: "p", FirstSequence: 1, Sequence: entries}
			if _, err := h.d.ApplyStream(ctx(t), req, items); err != nil {
				t.Fatal(err)
			}
			dest.mu.Lock()
			db := dest.dbs[path].db
			dest.mu.Unlock()
			var got string
			if err := db.QueryRowContext(ctx(t), "SELECT current_setting('memory_limit')").Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("DuckDB's memory_limit %s, want %s", got, tc.want)
			}
			if goLimit != tc.goLimit {
				t.Fatalf("Go's soft memory limit set to %d, want %d", goLimit, tc.goLimit)
			}
			h.wantRows(`SELECT count(*) FROM users`, fmt.Sprint(tc.rows/entries*entries))
		})
	}
}

// bigRange is a range of entries entries inserting rows rows of users in all, each with a 100-byte name.
func bigRange(rows, entries int) func(yield func(serve.Item, error) bool) {
	return func(yield func(serve.Item, error) bool) {
		for e := 1; e <= entries; e++ {
			b := change.NewBuilder(memory.DefaultAllocator, userSchema)
			for i := range rows / entries {
				b.Field(0).(*array.Int64Builder).Append(int64(e*rows + i))
				b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("%s-%d", strings.Repeat("x", 100), i))
				b.Row(change.OpInsert, "")
			}
			rec := b.NewBatch()
			b.Release()
			ok := yield(serve.Item{Stream: "public.users", Record: rec, Sequence: uint64(e)}, nil)
			rec.Release()
			if !ok {
				return
			}
		}
	}
}

// TestOutOfMemoryIsConfigFault: a range that outgrows a tiny memory_limit (DuckDB's share 1.5 MiB: too little
// for the merge's working memory, which DuckDB cannot spill) fails with a config fault that names the table,
// the setting and the fix. Unclassified, the engine retried the same range under the same limit, which fails
// the same way.
func TestOutOfMemoryIsConfigFault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dest.duckdb")
	raw, _ := json.Marshal(map[string]string{"path": path, "memory_limit": "4MiB"})
	dest := &Destination{}
	h := &harness{t: t, d: serve.NewSessions(dest), dest: dest, path: path, settings: raw}
	t.Cleanup(func() { h.d.Close() })
	const rows, entries = 1_000_000, 10
	req := serve.ApplyRequest{Settings: raw, Pipeline: "p", FirstSequence: 1, Sequence: entries}
	_, err := h.d.ApplyStream(ctx(t), req, bigRange(rows, entries))
	if err == nil {
		t.Fatal("a 1M-row range applied under memory_limit 4MiB; the test needs a range that exhausts it")
	}
	t.Logf("apply: %v (fix: %s)", err, fault.FixOf(err))
	if c := fault.ClassOf(err); c != fault.Config {
		t.Fatalf("error class %s, want config: %v", c, err)
	}
	for _, want := range []string{"out of memory", "users", "memory_limit 4MiB", path + ".tmp"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	// The fix names a limit: twice this one at least, in 64 MiB steps, beside the rows the database holds.
	if fix := fault.FixOf(err); !strings.Contains(fix, "memory_limit to 64MiB or more (the database holds ") {
		t.Errorf("fix %q does not name a memory_limit to set", fix)
	}
	// The temporary directory the message names is DuckDB's.
	dest.mu.Lock()
	db := dest.dbs[path].db
	dest.mu.Unlock()
	var tmp string
	if err := db.QueryRowContext(ctx(t), "SELECT current_setting('temp_directory')").Scan(&tmp); err != nil {
		t.Fatal(err)
	}
	if tmp != path+".tmp" {
		t.Errorf("DuckDB's temp_directory is %s, the message names %s.tmp", tmp, path)
	}
	// Nothing of the range landed: the apply's transaction rolled back whole.
	h.wantRows(`SELECT count(*) FROM duckdb_tables() WHERE table_name = 'users'`, "0")
}

// TestRangeCommittedInParts: a range whose batches outgrow PartBytes (memory_limit 48MiB: parts of 4.5 MiB) is
// committed in parts, each with its fence at the entry it ends on, so a range that fails part-way keeps the
// parts committed before, and its replay skips them and applies the rest once. Before, the whole range was one
// transaction (the fence stayed 0 after the failure) and DuckDB held all of it (BENCHMARKS.md).
func TestRangeCommittedInParts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dest.duckdb")
	raw, _ := json.Marshal(map[string]string{"path": path, "memory_limit": "48MiB"})
	dest := &Destination{}
	h := &harness{t: t, d: serve.NewSessions(dest), dest: dest, path: path, settings: raw}
	t.Cleanup(func() { h.d.Close() })
	const rows, entries, failAt = 120_000, 10, 7 // ≈ 1.5 MiB of batches an entry: parts of 3 entries
	req := serve.ApplyRequest{Settings: raw, Pipeline: "p", FirstSequence: 1, Sequence: entries}
	broken := func(yield func(serve.Item, error) bool) {
		for it, err := range bigRange(rows, entries) {
			if it.Sequence == failAt {
				yield(serve.Item{}, errors.New("the engine's stream broke"))
				return
			}
			if !yield(it, err) {
				return
			}
		}
	}
	_, err := h.d.ApplyStream(ctx(t), req, broken)
	if err == nil {
		t.Fatal("a range whose stream broke applied")
	}
	t.Logf("apply: %v", err)
	la, err := h.d.LastApplied(ctx(t), raw, "p")
	if err != nil {
		t.Fatal(err)
	}
	if la.Sequence == 0 || la.Sequence >= failAt {
		t.Fatalf("fence %d after a range that broke at entry %d: want the parts before it committed (0 < fence < %d)", la.Sequence, failAt, failAt)
	}
	h.wantRows(`SELECT count(*) FROM users`, fmt.Sprint(int(la.Sequence)*rows/entries))
	// The replay applies the entries above the fence once.
	if _, err := h.d.ApplyStream(ctx(t), req, bigRange(rows, entries)); err != nil {
		t.Fatal(err)
	}
	h.wantRows(`SELECT count(*), count(DISTINCT id) FROM users`, fmt.Sprintf("%d|%d", rows, rows))
	if la, err := h.d.LastApplied(ctx(t), raw, "p"); err != nil || la.Sequence != entries {
		t.Fatalf("fence %+v %v after the replay, want %d", la, err, entries)
	}
}

// TestPartBytes: a part is a quarter of DuckDB's share, three eighths of memory_limit (default 256MiB), in
// DuckDB's units, at least 1 MiB.
func TestPartBytes(t *testing.T) {
	for _, tc := range []struct {
		limit string
		want  int64
	}{
		{"", 24 << 20},
		{"64MiB", 6 << 20},
		{"2GB", 187_500_000},
		{"1.5 GiB", 9 << 24},
		{"1MiB", 1 << 20},
	} {
		raw, _ := json.Marshal(map[string]string{"path": "x.duckdb", "memory_limit": tc.limit})
		s, err := ParseSettings(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.PartBytes(); got != tc.want {
			t.Errorf("memory_limit %q: part %d bytes, want %d", tc.limit, got, tc.want)
		}
	}
}

// TestRangeCommittedInPartsByDeletes: a range whose entries delete more rows than PartDeletes is committed in
// parts though its bytes stay far below PartBytes, because DuckDB holds an open transaction's deletes in memory
// it cannot spill (deleteCost). Entry 1 inserts 30,000 rows; entries 2–9 each delete 2,000 of them, beyond the
// 1,536 of the default limit; the stream breaks at entry 7. Without the count, the range was one transaction
// and the break left the fence at 0.
func TestRangeCommittedInPartsByDeletes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dest.duckdb")
	raw, _ := json.Marshal(map[string]string{"path": path})
	s, err := ParseSettings(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.PartDeletes(); got != 1536 {
		t.Fatalf("PartDeletes %d under the default limit, want 1536", got)
	}
	dest := &Destination{}
	h := &harness{t: t, d: serve.NewSessions(dest), dest: dest, path: path, settings: raw}
	t.Cleanup(func() { h.d.Close() })
	const rows, perEntry, entries, failAt = 30_000, 2_000, 9, 7
	items := func(breakAt uint64) func(yield func(serve.Item, error) bool) {
		return func(yield func(serve.Item, error) bool) {
			for e := uint64(1); e <= entries; e++ {
				if e == breakAt {
					yield(serve.Item{}, errors.New("the engine's stream broke"))
					return
				}
				var cs []chg
				if e == 1 {
					for i := range rows {
						cs = append(cs, chg{change.OpInsert, int64(i), "x"})
					}
				} else {
					for i := range perEntry {
						cs = append(cs, chg{change.OpDelete, int64((int(e)-2)*perEntry + i), nil})
					}
				}
				it := batch(t, userSchema, cs...)
				it.Sequence = e
				if !yield(it, nil) {
					return
				}
			}
		}
	}
	req := serve.ApplyRequest{Settings: raw, Pipeline: "p", FirstSequence: 1, Sequence: entries}
	if _, err := h.d.ApplyStream(ctx(t), req, items(failAt)); err == nil {
		t.Fatal("a range whose stream broke applied")
	}
	la, err := h.d.LastApplied(ctx(t), raw, "p")
	if err != nil {
		t.Fatal(err)
	}
	if la.Sequence < 2 || la.Sequence >= failAt {
		t.Fatalf("fence %d after a range that broke at entry %d: want parts committed by their deletes (2 ≤ fence < %d)", la.Sequence, failAt, failAt)
	}
	h.wantRows(`SELECT count(*) FROM users`, fmt.Sprint(rows-int(la.Sequence-1)*perEntry))
	if _, err := h.d.ApplyStream(ctx(t), req, items(0)); err != nil {
		t.Fatal(err)
	}
	h.wantRows(`SELECT count(*), min(id) FROM users`, fmt.Sprintf("%d|%d", rows-(entries-1)*perEntry, (entries-1)*perEntry))
}

// TestManySmallEntriesCommittedInParts: a range of many small entries, each upserting a few keys, applies
// under a small memory_limit. DuckDB keeps, until the transaction commits, each staging table an entry
// replaced and each MERGE's fresh segment of every column (statementCost), whatever the rows: an 808-entry
// re-snapshot range of a 20,000-row table ran out of DuckDB's 96 MiB in one transaction (test/e2e's
// TestResnapshotWhileStreaming). Here 600 entries of 6 rows under DuckDB's 24 MiB: without statementCost
// they were one transaction, which ran out of memory.
func TestManySmallEntriesCommittedInParts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dest.duckdb")
	raw, _ := json.Marshal(map[string]string{"path": path, "memory_limit": "64MiB"})
	dest := &Destination{}
	h := &harness{t: t, d: serve.NewSessions(dest), dest: dest, path: path, settings: raw}
	t.Cleanup(func() { h.d.Close() })
	const entries, perEntry = 600, 5
	items := func(yield func(serve.Item, error) bool) {
		for e := uint64(1); e <= entries; e++ {
			var cs []chg
			for i := range perEntry {
				// New keys, and one key updated in every entry.
				cs = append(cs, chg{change.OpInsert, int64(e)*perEntry + int64(i), "x"})
			}
			cs = append(cs, chg{change.OpUpdate, perEntry, fmt.Sprint(e)})
			it := batch(t, userSchema, cs...)
			it.Sequence = e
			if !yield(it, nil) {
				return
			}
		}
	}
	req := serve.ApplyRequest{Settings: raw, Pipeline: "p", FirstSequence: 1, Sequence: entries}
	if _, err := h.d.ApplyStream(ctx(t), req, items); err != nil {
		t.Fatal(err)
	}
	h.wantRows(`SELECT count(*), max(id) FROM users`, fmt.Sprintf("%d|%d", entries*perEntry, entries*perEntry+perEntry-1))
	h.wantRows(`SELECT name FROM users WHERE id = 5`, fmt.Sprint(entries))
}

// TestUpsertsUnderMemoryLimit: a 1M-row range of upserts (10 entries of 100,000 rows), then updates spread over
// the table, apply under memory_limit 64MiB (DuckDB's share 24 MiB). A keyed write deletes the staged keys' rows
// and appends the survivors (merge); as one MERGE per entry, the load ran out of DuckDB's 24 MiB. Updates
// replace the whole row, so the table holds each id once with its last values.
func TestUpsertsUnderMemoryLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dest.duckdb")
	raw, _ := json.Marshal(map[string]string{"path": path, "memory_limit": "64MiB"})
	dest := &Destination{}
	h := &harness{t: t, d: serve.NewSessions(dest), dest: dest, path: path, settings: raw}
	t.Cleanup(func() { h.d.Close() })
	const rows, loads = 1_000_000, 10
	req := serve.ApplyRequest{Settings: raw, Pipeline: "p", FirstSequence: 1, Sequence: loads}
	if _, err := h.d.ApplyStream(ctx(t), req, bigRange(rows, loads)); err != nil {
		t.Fatal(err)
	}
	const entries, perEntry = 3, 1_000
	updates := func(yield func(serve.Item, error) bool) {
		for e := range entries {
			var cs []chg
			for i := range perEntry {
				// Rows a vector apart or more, all over the table (bigRange's ids: load*rows + i).
				n := (i*7919 + e) % (rows / loads)
				cs = append(cs, chg{change.OpUpdate, int64((1+i%loads)*rows + n), fmt.Sprintf("u%d", e)})
			}
			it := batch(t, userSchema, cs...)
			it.Sequence = loads + 1 + uint64(e)
			if !yield(it, nil) {
				return
			}
		}
	}
	req = serve.ApplyRequest{Settings: raw, Pipeline: "p", FirstSequence: loads + 1, Sequence: loads + entries}
	if _, err := h.d.ApplyStream(ctx(t), req, updates); err != nil {
		t.Fatal(err)
	}
	// Every id once (count(DISTINCT id) would not fit DuckDB's 24 MiB itself): as many rows, the same sum.
	sum := 0
	for l := 1; l <= loads; l++ {
		for i := range rows / loads {
			sum += l*rows + i
		}
	}
	h.wantRows(`SELECT count(*), sum(id) FROM users`, fmt.Sprintf("%d|%d", rows, sum))
	h.wantRows(`SELECT name, count(*) FROM users WHERE name LIKE 'u%' GROUP BY name ORDER BY name`, "u0|1000", "u1|1000", "u2|1000")
}

// TestSuggestedLimit: the memory_limit the out-of-memory fault's fix names covers the database's rows at the
// README's ≈ 21 MiB per million (the 1 GiB backlog's 28M rows applied under 640MiB), and is at least twice the
// limit that ran out, in 64 MiB steps.
func TestSuggestedLimit(t *testing.T) {
	for _, tc := range []struct {
		current, rows, want int64
	}{
		{current: 256 << 20, rows: 28_000_000, want: 640 << 20},
		{current: 256 << 20, rows: 10_000_000, want: 512 << 20}, // twice the limit is more than 210 MiB
		{current: 256 << 20, rows: 0, want: 512 << 20},
		{current: 4 << 20, rows: 0, want: 64 << 20},
		{current: 1 << 30, rows: 100_000_000, want: 2112 << 20}, // 2100 MiB, rounded up
	} {
		if got := suggestedLimit(tc.current, tc.rows); got != tc.want {
			t.Errorf("suggestedLimit(%d MiB, %d rows) = %d MiB, want %d MiB", tc.current>>20, tc.rows, got>>20, tc.want>>20)
		}
	}
}

package dest

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
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

// TestMemoryLimitIsDuckDBs: the memory_limit setting becomes the database's, in place of DuckDB's 80% of RAM
// (under which an open apply transaction kept a 1 GiB range in memory); a range larger than a tight limit still
// applies (DuckDB writes what is beyond it to the file's .tmp directory); a bad size is refused.
func TestMemoryLimitIsDuckDBs(t *testing.T) {
	for _, tc := range []struct {
		name, limit, want, err string
		rows                   int
	}{
		{name: "set, a range above it", limit: "24MiB", want: "24.0 MiB", rows: 400_000},
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
			dest := &Destination{}
			h := &harness{t: t, d: serve.NewSessions(dest), dest: dest, path: path, settings: raw}
			t.Cleanup(func() { h.d.Close() })
			const entries = 10
			items := func(yield func(serve.Item, error) bool) {
				for e := 1; e <= entries; e++ {
					b := change.NewBuilder(memory.DefaultAllocator, userSchema)
					for i := range tc.rows / entries {
						b.Field(0).(*array.Int64Builder).Append(int64(e*tc.rows + i))
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
				t.Fatalf("memory_limit %s, want %s", got, tc.want)
			}
			h.wantRows(`SELECT count(*) FROM users`, fmt.Sprint(tc.rows/entries*entries))
		})
	}
}

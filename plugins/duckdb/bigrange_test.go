package main

import (
	"context"
	"database/sql"
	"fmt"
	"iter"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	_ "github.com/duckdb/duckdb-go/v2"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// The shape of the big range: entries of bigEntryRows changes each, like datagen's backlog (inserts of new
// keys, updates and deletes of earlier ones), sent as one coalesced range.
const (
	bigEntryRows = 10_000
	bigUpdates   = 2_000 // per entry, of keys inserted by earlier entries
	bigDeletes   = 500
)

// bigRange is a range of entries entries, and the state it leaves: version[id] is the last version written
// of key id (0: deleted). It is filled as the range is sent.
type bigRange struct {
	entries int
	version []int32
}

func newBigRange(entries int) *bigRange {
	return &bigRange{entries: entries, version: make([]int32, entries*bigEntryRows)}
}

func bigSchema() *arrow.Schema {
	return change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "amount", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, []string{"id"})
}

func bigName(id int64, version int32) string {
	return fmt.Sprintf("customer-%d-version-%d-%s", id, version, strings.Repeat("x", 40))
}

// items yields the range as the engine sends it, an entry at a time.
func (r *bigRange) items(t *testing.T) iter.Seq[client.ApplyItem] {
	sc := bigSchema()
	schema, err := protocol.EncodeSchema(memory.DefaultAllocator, sc)
	if err != nil {
		t.Fatal(err)
	}
	return func(yield func(client.ApplyItem) bool) {
		var next int64 // the next key to insert
		for e := 1; e <= r.entries; e++ {
			if !yield(client.ApplyItem{Entry: uint64(e)}) {
				return
			}
			if e == 1 && !yield(client.ApplyItem{Schema: &pluginv2.Stream{Name: "public.big", ArrowSchema: schema}}) {
				return
			}
			b := change.NewBuilder(memory.DefaultAllocator, sc)
			write := func(op change.Op, id int64) {
				b.Field(0).(*array.Int64Builder).Append(id)
				if op == change.OpDelete {
					r.version[id] = 0
					b.Field(1).AppendNull()
					b.Field(2).AppendNull()
				} else {
					r.version[id]++
					b.Field(1).(*array.StringBuilder).Append(bigName(id, r.version[id]))
					b.Field(2).(*array.Int64Builder).Append(id * int64(r.version[id]))
				}
				b.Row(op, "")
			}
			inserts := bigEntryRows
			if e > 1 {
				inserts -= bigUpdates + bigDeletes
				// Spread over the keys inserted so far, distinct within the entry; a deleted key is re-inserted.
				for i := range bigUpdates + bigDeletes {
					id := (int64(e)*7919 + int64(i)*104729) % next
					switch {
					case r.version[id] == 0:
						write(change.OpInsert, id)
					case i < bigUpdates:
						write(change.OpUpdate, id)
					default:
						write(change.OpDelete, id)
					}
				}
			}
			for range inserts {
				write(change.OpInsert, next)
				next++
			}
			rec := b.NewBatch()
			b.Release()
			ipc, err := protocol.EncodeRecord(memory.DefaultAllocator, rec)
			rows := rec.NumRows()
			rec.Release()
			if err != nil {
				t.Error(err)
				return
			}
			if !yield(client.ApplyItem{Batch: &protocol.Batch{Stream: "public.big", SchemaID: protocol.SchemaID(sc), Rows: rows, IPC: ipc}}) {
				return
			}
		}
	}
}

// check reads the table back from the file and compares every row with the range's state.
func (r *bigRange) check(ctx context.Context, t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("duckdb", path+"?access_mode=READ_ONLY")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT id, name, amount FROM main.big")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := make([]bool, len(r.version))
	var n, bad int
	for rows.Next() {
		var id, amount int64
		var name string
		if err := rows.Scan(&id, &name, &amount); err != nil {
			t.Fatal(err)
		}
		n++
		if id < 0 || id >= int64(len(r.version)) || seen[id] || r.version[id] == 0 ||
			name != bigName(id, r.version[id]) || amount != id*int64(r.version[id]) {
			if bad++; bad <= 5 {
				t.Errorf("row id %d name %q amount %d: unexpected (duplicate, deleted, or not the last version)", id, name, amount)
			}
			continue
		}
		seen[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id, v := range r.version {
		if v != 0 && !seen[id] {
			if bad++; bad <= 10 {
				t.Errorf("key %d (version %d) missing", id, v)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d rows read, %d wrong", n, bad)
	}
}

// bigLimit is the memory_limit of TestBigRangeUnderMemoryLimit (DuckDB's share 48 MiB, Go's 32 MiB), and
// bigSlack what the plugin process may grow by beyond it (README, Memory: the process stays under memory_limit
// + 128 MiB, of which the idle process is ≈ 75): the binary's pages the apply touches beyond the idle process's
// (DuckDB's merge, checkpoint and appender code), and what DuckDB and Go need whatever the limit, which a
// limit this small does not cover (measured growth 134 and 176 MiB).
const (
	bigLimit      = "128MiB"
	bigLimitBytes = 128 << 20
	bigSlack      = 96 << 20
)

// TestBigRangeUnderMemoryLimit applies a range of 1M changes (100 entries of 10,000, with updates and
// deletes spread over the whole table) under memory_limit 128MiB in the plugin's own process, then checks every
// row and that the process's peak RSS grew by no more than the limit and bigSlack. In one
// transaction the range fails with DuckDB's "Out of Memory Error" at its last entry under this limit (as a 1 GiB
// range did under 256MiB, BENCHMARKS.md): committed in parts (Settings.PartBytes), it applies.
func TestBigRangeUnderMemoryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("a 1M-row range: a minute or more")
	}
	const entries = 100
	bin := conformance.Build(t, ".")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "big.duckdb")
	settings := mustJSON(t, map[string]any{"path": path, "memory_limit": bigLimit})
	c := conformance.Start(t, bin, nil)
	if err := c.Check(ctx, settings); err != nil {
		t.Fatal(err)
	}
	idle, err := conformance.PeakRSS(c.Pid())
	if err != nil {
		t.Fatal(err)
	}
	r := newBigRange(entries)
	start := time.Now()
	res, err := c.ApplyRange(ctx, settings, "p", 1, entries, r.items(t))
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, c.StderrTail())
	}
	peak, err := conformance.PeakRSS(c.Pid())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("apply of %d rows under memory_limit %s took %s: plugin peak RSS %d MiB, %d MiB idle before, growth %d MiB",
		res.Rows, bigLimit, time.Since(start).Round(time.Millisecond), peak>>20, idle>>20, (peak-idle)>>20)
	if res.Rows != entries*bigEntryRows {
		t.Fatalf("applied %d rows, want %d", res.Rows, entries*bigEntryRows)
	}
	if la, err := c.LastApplied(ctx, settings, "p"); err != nil || la.Sequence != entries {
		t.Fatalf("last applied %+v %v, want %d", la, err, entries)
	}
	c.Kill() // releases the file
	r.check(ctx, t, path)
	if bound := int64(bigLimitBytes) + bigSlack; peak-idle > bound {
		t.Fatalf("the plugin's peak RSS grew by %d MiB during the apply, above memory_limit %s + %d MiB", (peak-idle)>>20, bigLimit, bigSlack>>20)
	}
}

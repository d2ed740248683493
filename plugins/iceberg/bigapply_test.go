package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"

	"github.com/skippr-dev/skippr/plugins/iceberg/dest"
)

// The shape of the big transactions: inserts of keys 0..rows-bigBatch-1 in batches, then one batch that
// updates `updated` of them and deletes `deleted` others, all in one WAL sequence number.
const (
	bigRows  = 1_000_000
	bigBatch = 50_000
	updated  = 40_000
	deleted  = bigBatch - updated
	// cappedGrowth bounds how far the plugin's peak RSS may rise above its idle peak during the apply under
	// memory_limit 64MiB: the cap plus half for what it does not cover (the key index, off-heap runtime memory).
	cappedGrowth = 64<<20 + cappedSlack
	// cappedSlack is what the plugin's RSS may grow by beyond memory_limit during an apply: the binary's pages
	// the apply touches first (Parquet, iceberg-go) and what the Go runtime holds outside the limit it keeps.
	cappedSlack = 48 << 20
)

func bigSchema() *arrow.Schema {
	return change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "amount", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true},
	}, []string{"id"})
}

// The keys the last batch updates and deletes: distinct, spread over all the inserted batches.
func updatedKey(i int) int64 { return int64(i) * 23 }
func deletedKey(i int) int64 { return int64(i)*23 + 11 }

func bigName(id int64, version int) string { return fmt.Sprintf("name-%d-v%d", id, version) }

// bigItems encodes a transaction of total rows as the engine sends it.
func bigItems(t *testing.T, total int64) []client.ApplyItem {
	t.Helper()
	inserted := total - bigBatch
	sc := bigSchema()
	schema, err := protocol.EncodeSchema(memory.DefaultAllocator, sc)
	if err != nil {
		t.Fatal(err)
	}
	items := []client.ApplyItem{{Schema: &pluginv2.Stream{Name: "big", ArrowSchema: schema}}}
	note := strings.Repeat("n", 40)
	encode := func(fill func(b *change.Builder)) {
		b := change.NewBuilder(memory.DefaultAllocator, sc)
		fill(b)
		rec := b.NewBatch()
		b.Release()
		ipc, err := protocol.EncodeRecord(memory.DefaultAllocator, rec)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, client.ApplyItem{Batch: &protocol.Batch{Stream: "big", SchemaID: protocol.SchemaID(sc), Rows: rec.NumRows(), IPC: ipc}})
		rec.Release()
	}
	row := func(b *change.Builder, op change.Op, id int64, version int) {
		b.Field(0).(*array.Int64Builder).Append(id)
		if op == change.OpDelete {
			b.Field(1).AppendNull()
			b.Field(2).AppendNull()
			b.Field(3).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(bigName(id, version))
			b.Field(2).(*array.Int64Builder).Append(id * int64(version))
			b.Field(3).(*array.StringBuilder).Append(note)
		}
		b.Row(op, "")
	}
	for start := int64(0); start < inserted; start += bigBatch {
		encode(func(b *change.Builder) {
			for id := start; id < start+bigBatch; id++ {
				row(b, change.OpInsert, id, 1)
			}
		})
	}
	encode(func(b *change.Builder) {
		for i := range updated {
			row(b, change.OpUpdate, updatedKey(i), 2)
		}
		for i := range deleted {
			row(b, change.OpDelete, deletedKey(i), 0)
		}
	})
	return items
}

// peakRSS is a process's VmHWM in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// checkBigTable reads the table back and checks every row of a transaction of total rows: each inserted key
// once, in its last version, the deleted ones gone.
func checkBigTable(ctx context.Context, t *testing.T, settings []byte, total int64) {
	t.Helper()
	inserted := total - bigBatch
	version := make([]int8, inserted) // 0: not seen; -1: must be absent
	for i := range deleted {
		version[deletedKey(i)] = -1
	}
	want := map[int64]int{}
	for i := range updated {
		want[updatedKey(i)] = 2
	}
	var rows, bad int
	err := dest.Scan(ctx, settings, "big", func(rec arrow.RecordBatch) error {
		ids := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.Int64)
		names := rec.Column(rec.Schema().FieldIndices("name")[0]).(*array.String)
		for i := range ids.Len() {
			rows++
			id := ids.Value(i)
			if id < 0 || id >= int64(inserted) || version[id] != 0 {
				bad++
				if bad < 5 {
					t.Errorf("row id %d: unexpected (deleted, duplicate or never inserted)", id)
				}
				continue
			}
			version[id] = 1
			v := 1
			if w, ok := want[id]; ok {
				v = w
			}
			if names.Value(i) != bigName(id, v) {
				bad++
				if bad < 5 {
					t.Errorf("row id %d: name %q, want %q", id, names.Value(i), bigName(id, v))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := int(inserted) - deleted; rows != want || bad > 0 {
		t.Fatalf("table holds %d rows (%d wrong), want %d", rows, bad, want)
	}
}

// A one-million-row transaction (one WAL entry: 950k inserts, then 40k updates and 10k deletes of keys all over
// it) through the real plugin process: with memory_limit 64MiB the apply spills, succeeds, the rows read back
// are exact, and the process's peak RSS rises by less than cappedGrowth over its idle peak (about 68 MiB, most
// of it the 100 MB binary's pages, which no Go memory limit covers). The same apply with the limit off must
// exceed that bound by far, or the bound proves nothing.
func TestMillionRowTransaction(t *testing.T) {
	bin := conformance.Build(t, ".")
	items := bigItems(t, bigRows)
	growth := map[string]int64{}
	for _, limit := range []string{"64MiB", "off"} {
		t.Run("memory_limit "+limit, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			settings, err := json.Marshal(map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(t.TempDir(), "wh")}, "memory_limit": limit})
			if err != nil {
				t.Fatal(err)
			}
			c := conformance.Start(t, bin, nil)
			idle := peakRSS(t, c.Pid())
			start := time.Now()
			res, err := c.Apply(ctx, settings, "p", 1, items)
			if err != nil {
				t.Fatalf("apply: %v\n%s", err, c.StderrTail())
			}
			took := time.Since(start)
			peak := peakRSS(t, c.Pid())
			growth[limit] = peak - idle
			t.Logf("memory_limit %s: apply of %d rows took %s; plugin peak RSS %d MiB, %d MiB idle before the apply, growth %d MiB",
				limit, bigRows, took.Round(time.Millisecond), peak>>20, idle>>20, growth[limit]>>20)
			if res.Rows != bigRows || res.Skipped {
				t.Fatalf("apply result %+v, want %d rows", res, bigRows)
			}
			la, err := c.LastApplied(ctx, settings, "p")
			if err != nil || la.Sequence != 1 {
				t.Fatalf("last applied %+v %v, want 1", la, err)
			}
			checkBigTable(ctx, t, settings, bigRows)
		})
	}
	if t.Failed() {
		return
	}
	if growth["64MiB"] > cappedGrowth {
		t.Fatalf("with memory_limit 64MiB the plugin's peak RSS grew by %d MiB during the apply, above the %d MiB bound", growth["64MiB"]>>20, cappedGrowth>>20)
	}
	if growth["off"] < 2*cappedGrowth {
		t.Fatalf("without a limit the plugin's peak RSS grew by only %d MiB: the %d MiB bound does not show the cap works", growth["off"]>>20, cappedGrowth>>20)
	}
}

// indexRows is the range of TestRangeMemoryBounded: 3.95M distinct keys inserted, whose in-memory key index
// (≈ 28 bytes a key, more with the maps' slack) alone would take 105–200 MiB, above the 64 MiB cap.
const indexRows = 4_000_000

// A range of 81 entries holding 4M rows (3.95M distinct keys, then updates and deletes of keys all over them)
// through the real plugin process with memory_limit 64MiB: the key index of the spilled keys goes to disk once
// it outgrows its share, so the process's peak RSS rises above its idle peak by no more than the cap and
// cappedSlack, and the rows read back exact. With the index held in memory, as before, the growth was
// 184 MiB.
func TestRangeMemoryBounded(t *testing.T) {
	const limit = 64 << 20
	bin := conformance.Build(t, ".")
	items := bigItems(t, indexRows)
	// One entry per batch, as a coalesced backlog arrives.
	var ranged []client.ApplyItem
	entry := uint64(0)
	for i, it := range items {
		if it.Batch != nil || i == 0 {
			entry++
			ranged = append(ranged, client.ApplyItem{Entry: entry})
		}
		ranged = append(ranged, it)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	spill := t.TempDir()
	settings, err := json.Marshal(map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(t.TempDir(), "wh")},
		"memory_limit": "64MiB", "spill_dir": spill})
	if err != nil {
		t.Fatal(err)
	}
	c := conformance.Start(t, bin, nil)
	idle := peakRSS(t, c.Pid())
	start := time.Now()
	res, err := c.ApplyRange(ctx, settings, "p", 1, entry, slices.Values(ranged))
	if err != nil {
		t.Fatalf("apply: %v\n%s", err, c.StderrTail())
	}
	peak := peakRSS(t, c.Pid())
	t.Logf("range 1..%d of %d rows took %s; plugin peak RSS %d MiB, %d MiB idle before the apply, growth %d MiB",
		entry, indexRows, time.Since(start).Round(time.Millisecond), peak>>20, idle>>20, (peak-idle)>>20)
	if res.Rows != indexRows || res.Skipped {
		t.Fatalf("apply result %+v, want %d rows", res, indexRows)
	}
	checkBigTable(ctx, t, settings, indexRows)
	if left, err := os.ReadDir(spill); err != nil || len(left) > 0 {
		t.Fatalf("spill_dir holds %d entries after the apply (%v), want none", len(left), err)
	}
	if growth := peak - idle; growth > limit+cappedSlack {
		t.Fatalf("with memory_limit 64MiB the plugin's peak RSS grew by %d MiB during the range, above the cap + %d MiB", growth>>20, cappedSlack>>20)
	}
}

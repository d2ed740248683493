// Package rowmetatest is the check every destination that implements plugin-sdk/rowmeta runs, table-driven
// over the settings: a change sequence with snapshot reads, inserts, updates, deletes, a deleted key inserted
// again (in the same entry and in a later one), an insert deleted in the same entry, and a truncate, applied in
// ranges cut several ways, then compared with the state computed from the sequence itself (Expect); then the
// same ranges replayed (all skipped, nothing changes) and a range overlapping the fence (only the entries above
// it apply). A destination supplies how it applies a range and how it reads its table back.
package rowmetatest

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// Stream is the test's stream; its table is Table.
const (
	Stream = "public.items"
	Table  = "items"
)

// Case is one row of the option matrix: the settings keys to add to the destination's, and what they mean.
type Case struct {
	Name     string
	Settings map[string]any
	Options  rowmeta.Options
}

// Cases are the settings every destination is checked under.
func Cases() []Case {
	all := []any{"synced_at", "op", "position"}
	return []Case{
		{Name: "plain", Settings: map[string]any{}},
		{Name: "soft_delete", Settings: map[string]any{"soft_delete": true}, Options: rowmeta.Options{SoftDelete: true}},
		{Name: "metadata_columns", Settings: map[string]any{"metadata_columns": all}, Options: rowmeta.Options{SyncedAt: true, Op: true, Position: true}},
		{Name: "both", Settings: map[string]any{"soft_delete": true, "metadata_columns": all}, Options: rowmeta.Options{SoftDelete: true, SyncedAt: true, Op: true, Position: true}},
		{
			Name:     "source_committed_at",
			Settings: map[string]any{"soft_delete": true, "metadata_columns": []any{"source_committed_at", "position"}},
			Options:  rowmeta.Options{SoftDelete: true, SourceCommittedAt: true, Position: true},
		},
	}
}

// Change is one change of the sequence: a row of Stream (ID, V) or, with Truncate, a truncate.
type Change struct {
	Op       change.Op
	ID       int64
	V        string
	Truncate bool
}

// Entries is the change sequence, one slice per WAL entry (entry i is sequence i+1). It is written out rather
// than random so that each case the semantics name appears for sure; the comments say which.
func Entries() [][]Change {
	R, I, U, D := change.OpRead, change.OpInsert, change.OpUpdate, change.OpDelete
	c := func(op change.Op, id int64, v string) Change { return Change{Op: op, ID: id, V: v} }
	return [][]Change{
		{c(R, 1, "a"), c(R, 2, "b"), c(R, 3, "c"), c(R, 4, "d")},     // 1 snapshot
		{c(R, 5, "e"), c(I, 6, "f"), c(U, 1, "a2")},                  // 2
		{c(D, 2, ""), c(U, 3, "c2")},                                 // 3 key-only delete of a held row
		{c(I, 7, "g"), c(D, 7, "")},                                  // 4 insert and delete in one entry
		{c(I, 2, "b2"), c(U, 4, "d2"), c(D, 4, "")},                  // 5 deleted key back; update+delete
		{c(D, 5, ""), c(I, 5, "e2"), c(D, 6, ""), c(I, 8, "h")},      // 6 delete and re-insert in one entry
		{c(U, 2, "b3"), c(D, 3, "")},                                 // 7
		{{Truncate: true}, c(I, 9, "i"), c(I, 3, "c3"), c(D, 9, "")}, // 8 truncate, then rows
		{c(I, 10, "j"), c(U, 3, "c4"), c(D, 10, ""), c(I, 11, "k")},  // 9
		{c(D, 3, ""), c(I, 12, "l"), c(U, 11, "k2"), c(I, 3, "c5")},  // 10
		{c(D, 12, ""), c(U, 11, "k3"), c(D, 11, ""), c(I, 13, "m")},  // 11
	}
}

// Row is what a destination should hold for one key. Position, Op and Committed are those of the newest
// change (Committed zero: NULL).
type Row struct {
	V         string
	Deleted   bool
	Op        string
	Position  int64
	Committed time.Time
}

// CommitTime is the source commit time the test's change j of entry seq carries (_skippr_committed_at):
// distinct per change, with microseconds, so a destination that writes another change's time, or truncates,
// is seen. A snapshot read carries none.
func CommitTime(seq uint64, j int, op change.Op) time.Time {
	if op == change.OpRead {
		return time.Time{}
	}
	return time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC).Add(time.Duration(seq)*time.Second + time.Duration(j)*time.Millisecond + 7*time.Microsecond)
}

// Expect computes the table from the change sequence, entry by entry and change by change: what a
// destination with opt must hold after entries 1..n.
func Expect(entries [][]Change, n int, opt rowmeta.Options) map[int64]Row {
	return ExpectTurnedOn(entries, n, 1, opt)
}

// ExpectTurnedOn is Expect for a destination that applied the entries before from without the settings
// (deletes removed rows, no metadata: a row last written then has Op "" and Position 0, and is not deleted).
func ExpectTurnedOn(entries [][]Change, n, from int, opt rowmeta.Options) map[int64]Row {
	st := map[int64]Row{}
	for i, e := range entries[:n] {
		pos := int64(i + 1)
		on := i+1 >= from
		for j, ch := range e {
			at := CommitTime(uint64(pos), j, ch.Op)
			switch {
			case ch.Truncate:
				clear(st)
			case ch.Op == change.OpDelete:
				r, ok := st[ch.ID]
				if !ok {
					continue // nothing held, no values seen: nothing to keep
				}
				if !on || !opt.SoftDelete {
					delete(st, ch.ID)
					continue
				}
				r.Deleted, r.Op, r.Position, r.Committed = true, rowmeta.OpName(ch.Op), pos, at
				st[ch.ID] = r
			case on:
				st[ch.ID] = Row{V: ch.V, Op: rowmeta.OpName(ch.Op), Position: pos, Committed: at}
			default:
				st[ch.ID] = Row{V: ch.V}
			}
		}
	}
	return st
}

var schema = change.TimedSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "v", Type: arrow.BinaryTypes.String, Nullable: true},
}, []string{"id"})

// Items are the items of entries first..last (1-based, inclusive), each tagged with its entry's sequence. A
// delete carries only its key, as a source without REPLICA IDENTITY FULL sends it. The caller releases the
// records (Release).
func Items(entries [][]Change, first, last uint64) []serve.Item {
	return itemsOf(Stream, schema, entries, first, last)
}

func itemsOf(stream string, schema *arrow.Schema, entries [][]Change, first, last uint64) []serve.Item {
	var out []serve.Item
	for seq := first; seq <= last; seq++ {
		var b *change.Builder
		emit := func() {
			if b != nil && b.Len() > 0 {
				out = append(out, serve.Item{Stream: stream, Record: b.NewBatch(), Sequence: seq})
			}
			if b != nil {
				b.Release()
			}
			b = nil
		}
		for j, ch := range entries[seq-1] {
			if ch.Truncate {
				emit()
				out = append(out, serve.Item{Stream: stream, Truncate: true, Sequence: seq})
				continue
			}
			if b == nil {
				b = change.NewBuilder(memory.DefaultAllocator, schema)
			}
			b.Field(0).(*array.Int64Builder).Append(ch.ID)
			if ch.Op == change.OpDelete {
				b.Field(1).AppendNull()
			} else {
				b.Field(1).(*array.StringBuilder).Append(ch.V)
			}
			b.RowAt(ch.Op, "", CommitTime(seq, j, ch.Op))
		}
		emit()
	}
	return out
}

// Release releases the records of items.
func Release(items []serve.Item) {
	for _, it := range items {
		if it.Record != nil {
			it.Record.Release()
		}
	}
}

// Target is a destination under test, opened with one Case's settings on a table of its own.
type Target struct {
	// Apply applies entries first..last (items from Items) as one range of one pipeline.
	Apply func(ctx context.Context, first, last uint64, items []serve.Item) (serve.ApplyResult, error)
	// Read returns a table's column names and rows (Table, or another the check names), each row by column
	// name with the driver's values (nil for NULL; integers, strings, booleans and time.Time as the driver
	// gives them).
	Read func(ctx context.Context, table string) (columns []string, rows []map[string]any, err error)
}

// Cuts are the ways the sequence is cut into ranges: the last entry of each range.
var Cuts = map[string][]uint64{
	"per entry":   {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},
	"ranges":      {1, 4, 5, 8, 11},
	"one range":   {11},
	"uneven cuts": {2, 3, 7, 9, 10, 11},
}

// Run applies the sequence to the target cut by cut, compares the table with Expect after each range, then
// replays: every range again (each skipped, the table unchanged, _skippr_synced_at included), and a range
// from the middle of the sequence to its end, which must be skipped too. newTarget opens the target for the
// case on a table and pipeline of its own, named by the cut.
func Run(t *testing.T, c Case, newTarget func(t *testing.T, name string) Target) {
	entries := Entries()
	for _, name := range slices.Sorted(maps.Keys(Cuts)) {
		cuts := Cuts[name]
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			tg := newTarget(t, strings.ReplaceAll(name, " ", "_"))
			start := time.Now().Add(-time.Minute) // the destination's clock may differ a little from ours
			apply := func(first, last uint64) serve.ApplyResult {
				t.Helper()
				items := Items(entries, first, last)
				defer Release(items)
				res, err := tg.Apply(ctx, first, last, items)
				if err != nil {
					t.Fatalf("apply %d..%d: %v", first, last, err)
				}
				return res
			}
			first := uint64(1)
			for _, last := range cuts {
				if res := apply(first, last); res.Skipped {
					t.Fatalf("apply %d..%d was skipped, but the destination never held it", first, last)
				}
				Compare(t, fmt.Sprintf("after %d..%d", first, last), c.Options, tg, Expect(entries, int(last), c.Options), start)
				first = last + 1
			}
			before := read(t, ctx, tg)
			first = 1
			for _, last := range cuts {
				if res := apply(first, last); !res.Skipped {
					t.Errorf("replay of %d..%d was applied again; the fence must skip it", first, last)
				}
				first = last + 1
			}
			if res := apply(6, 11); !res.Skipped {
				t.Errorf("replay of 6..11 was applied again; the fence must skip it")
			}
			if after := read(t, ctx, tg); !slices.Equal(after, before) {
				t.Errorf("a skipped replay changed the table:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
	// A range overlapping the fence (a replay after a crash that committed part of a coalesced range): only
	// the entries above the fence apply, so the result is the same as applying each once.
	t.Run("overlap", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		tg := newTarget(t, "overlap")
		start := time.Now().Add(-time.Minute)
		for _, r := range [][2]uint64{{1, 6}, {4, 9}, {2, 11}} {
			items := Items(entries, r[0], r[1])
			_, err := tg.Apply(ctx, r[0], r[1], items)
			Release(items)
			if err != nil {
				t.Fatalf("apply %d..%d: %v", r[0], r[1], err)
			}
			Compare(t, fmt.Sprintf("after %d..%d", r[0], r[1]), c.Options, tg, Expect(entries, int(r[1]), c.Options), start)
		}
	})
}

// read returns the table's rows as text, sorted, for comparing two reads.
func read(t *testing.T, ctx context.Context, tg Target) []string {
	t.Helper()
	_, rows, err := tg.Read(ctx, Table)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rows {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r)) {
			v := r[k]
			if tm, ok := v.(time.Time); ok {
				v = tm.UTC().Format(time.RFC3339Nano)
			}
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
		out = append(out, strings.Join(parts, " "))
	}
	slices.Sort(out)
	return out
}

// Compare checks the target's table against want: exactly the columns id, v and those opt adds, exactly the
// keys of want, and each row's values; _skippr_synced_at must lie between start and now.
func Compare(t *testing.T, what string, opt rowmeta.Options, tg Target, want map[int64]Row, start time.Time) {
	t.Helper()
	cols, rows, err := tg.Read(context.Background(), Table)
	if err != nil {
		t.Fatalf("%s: read: %v", what, err)
	}
	wantCols := []string{"id", "v"}
	for _, c := range opt.Columns() {
		wantCols = append(wantCols, c.Name)
	}
	var got []string
	for _, c := range cols {
		got = append(got, strings.ToLower(c))
	}
	slices.Sort(got)
	slices.Sort(wantCols)
	if !slices.Equal(got, wantCols) {
		t.Errorf("%s: table %s has columns %v, want %v", what, Table, got, wantCols)
	}
	have := map[int64]bool{}
	for _, r := range rows {
		id, err := toInt(r["id"])
		if err != nil {
			t.Fatalf("%s: id: %v", what, err)
		}
		have[id] = true
		w, ok := want[id]
		if !ok {
			t.Errorf("%s: row %d is in the table; the sequence leaves none", what, id)
			continue
		}
		if v := fmt.Sprint(r["v"]); v != w.V {
			t.Errorf("%s: row %d: v = %q, want %q", what, id, v, w.V)
		}
		old := w.Position == 0 // written before the settings were on: metadata NULL
		if opt.SoftDelete {
			d, ok := r[rowmeta.Deleted].(bool)
			if !ok && old && r[rowmeta.Deleted] == nil {
				d, ok = false, true // a destination that cannot fill the column for rows written before leaves NULL
			}
			if !ok || d != w.Deleted {
				t.Errorf("%s: row %d: %s = %v, want %v", what, id, rowmeta.Deleted, r[rowmeta.Deleted], w.Deleted)
			}
		}
		if opt.Op && old {
			if r[rowmeta.Op] != nil {
				t.Errorf("%s: row %d, written before the setting: %s = %v, want NULL", what, id, rowmeta.Op, r[rowmeta.Op])
			}
		} else if opt.Op {
			if op := fmt.Sprint(r[rowmeta.Op]); op != w.Op {
				t.Errorf("%s: row %d: %s = %q, want %q", what, id, rowmeta.Op, op, w.Op)
			}
		}
		if opt.Position && !old {
			if p, err := toInt(r[rowmeta.Position]); err != nil || p != w.Position {
				t.Errorf("%s: row %d: %s = %v, want %d", what, id, rowmeta.Position, r[rowmeta.Position], w.Position)
			}
		}
		if opt.SourceCommittedAt && !old {
			ts, ok := r[rowmeta.SourceCommittedAt].(time.Time)
			switch {
			case w.Committed.IsZero() && r[rowmeta.SourceCommittedAt] != nil:
				t.Errorf("%s: row %d: %s = %v, want NULL", what, id, rowmeta.SourceCommittedAt, r[rowmeta.SourceCommittedAt])
			case !w.Committed.IsZero() && (!ok || !ts.Equal(w.Committed)):
				t.Errorf("%s: row %d: %s = %v, want %v", what, id, rowmeta.SourceCommittedAt, r[rowmeta.SourceCommittedAt], w.Committed)
			}
		}
		if opt.SyncedAt && !old {
			ts, ok := r[rowmeta.SyncedAt].(time.Time)
			if !ok || ts.Before(start) || ts.After(time.Now().Add(time.Minute)) {
				t.Errorf("%s: row %d: %s = %v, want a time since %v", what, id, rowmeta.SyncedAt, r[rowmeta.SyncedAt], start)
			}
		}
	}
	for id := range want {
		if !have[id] {
			t.Errorf("%s: row %d (%+v) is missing", what, id, want[id])
		}
	}
}

func toInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case int32:
		return int64(x), nil
	case int:
		return int64(x), nil
	case float64:
		return int64(x), nil
	}
	return strconv.ParseInt(fmt.Sprint(v), 10, 64)
}

// CheckClash applies a batch of a stream with a column the case's options add: the destination must refuse
// it with a config fault naming the column. (Options without columns: nothing to check.)
func CheckClash(t *testing.T, c Case, tg Target) {
	t.Helper()
	cols := c.Options.Columns()
	var clash string
	for _, col := range cols {
		if col.Name != rowmeta.Op {
			clash = col.Name
			break
		}
	}
	if clash == "" {
		return
	}
	sc := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: clash, Type: arrow.BinaryTypes.String, Nullable: true},
	}, []string{"id"})
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(1)
	b.Field(1).(*array.StringBuilder).Append("the source's own value")
	b.Row(change.OpInsert, "")
	rec := b.NewBatch()
	defer rec.Release()
	_, err := tg.Apply(context.Background(), 1, 1, []serve.Item{{Stream: Stream, Record: rec, Sequence: 1}})
	if err == nil || !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), clash) {
		t.Errorf("a source column %s: apply returned %v, want a config fault naming it", clash, err)
	}
}

// ClientApply is a Target's Apply through a plugin process, as the engine sends a range: each entry of a range
// opened by an Entry mark, batches as Arrow IPC.
func ClientApply(c *client.Client, settings []byte, pipeline string) func(ctx context.Context, first, last uint64, items []serve.Item) (serve.ApplyResult, error) {
	return func(ctx context.Context, first, last uint64, items []serve.Item) (serve.ApplyResult, error) {
		var out []client.ApplyItem
		var entry uint64
		for _, it := range items {
			if first != last && it.Sequence != entry { // a single entry goes without marks
				entry = it.Sequence
				out = append(out, client.ApplyItem{Entry: entry})
			}
			switch {
			case it.Truncate:
				out = append(out, client.ApplyItem{Truncate: it.Stream})
			case it.Resnapshot != serve.ResnapshotNone:
				out = append(out, client.ApplyItem{Resnapshot: &pluginv2.ResnapshotMark{Stream: it.Stream, End: it.Resnapshot == serve.ResnapshotEnd}})
			case it.Record != nil:
				ipc, err := protocol.EncodeRecord(memory.DefaultAllocator, it.Record)
				if err != nil {
					return serve.ApplyResult{}, err
				}
				sc := it.Record.Schema()
				out = append(out, client.ApplyItem{Batch: &protocol.Batch{Stream: it.Stream, SchemaID: protocol.SchemaID(sc), Rows: it.Record.NumRows(), IPC: ipc}})
			}
		}
		r, err := c.ApplyRange(ctx, settings, pipeline, first, last, slices.Values(out))
		if err != nil {
			return serve.ApplyResult{}, err
		}
		return serve.ApplyResult{Skipped: r.GetSkipped(), Rows: r.GetRows()}, nil
	}
}

// CheckResnapshot: at a re-snapshot's end a soft-deleting destination marks the rows the copy did not send
// deleted (in the end's entry) instead of removing them, and leaves a row deleted before as it was; without
// soft_delete it removes them.
func CheckResnapshot(t *testing.T, c Case, tg Target) {
	t.Helper()
	R, D := change.OpRead, change.OpDelete
	row := func(op change.Op, id int64, v string) Change { return Change{Op: op, ID: id, V: v} }
	entries := [][]Change{
		{row(R, 1, "a"), row(R, 2, "b"), row(R, 3, "c"), row(R, 4, "d")},
		{row(D, 4, ""), row(R, 1, "a")},
		{row(R, 2, "b2")},
	}
	// Entry 2: the delete, the begin, the read; entry 3: the read, the end.
	var seq []serve.Item
	for _, e := range []struct {
		n    uint64
		mark serve.ResnapshotMark
		at   int // the mark goes before change at (-1: after the last)
	}{{1, serve.ResnapshotNone, 0}, {2, serve.ResnapshotBegin, 1}, {3, serve.ResnapshotEnd, -1}} {
		ch := entries[e.n-1]
		cut := len(ch)
		if e.at >= 0 {
			cut = e.at
		}
		before := Items([][]Change{ch[:cut]}, 1, 1)
		after := Items([][]Change{ch[cut:]}, 1, 1)
		for _, part := range [][]serve.Item{before, nil, after} {
			if part == nil && e.mark != serve.ResnapshotNone {
				seq = append(seq, serve.Item{Stream: Stream, Resnapshot: e.mark, Sequence: e.n})
			}
			for _, it := range part {
				it.Sequence = e.n
				seq = append(seq, it)
			}
		}
		defer Release(before)
		defer Release(after)
	}
	start := time.Now().Add(-time.Minute)
	ctx := context.Background()
	for n := uint64(1); n <= 3; n++ {
		var entry []serve.Item
		for _, it := range seq {
			if it.Sequence == n {
				entry = append(entry, it)
			}
		}
		if _, err := tg.Apply(ctx, n, n, entry); err != nil {
			t.Fatalf("apply %d: %v", n, err)
		}
	}
	want := map[int64]Row{1: {V: "a", Op: "snapshot", Position: 2}, 2: {V: "b2", Op: "snapshot", Position: 3}}
	if c.Options.SoftDelete {
		want[3] = Row{V: "c", Deleted: true, Op: "delete", Position: 3}
		want[4] = Row{V: "d", Deleted: true, Op: "delete", Position: 2, Committed: CommitTime(1, 0, D)} // Items of its part alone
	}
	Compare(t, "after the re-snapshot's end", c.Options, tg, want, start)
}

// CheckTurnedOn applies entries 1..3 through plain (the same table without the settings), then 4..11 through
// with: the destination adds the columns to the existing table, rows written before hold NULL metadata and are
// not deleted, and the rest is as Expect says.
func CheckTurnedOn(t *testing.T, c Case, plain, with Target) {
	t.Helper()
	entries := Entries()
	start := time.Now().Add(-time.Minute)
	for _, r := range []struct {
		tg          Target
		first, last uint64
	}{{plain, 1, 3}, {with, 4, 7}, {with, 8, 11}} {
		items := Items(entries, r.first, r.last)
		_, err := r.tg.Apply(context.Background(), r.first, r.last, items)
		Release(items)
		if err != nil {
			t.Fatalf("apply %d..%d: %v", r.first, r.last, err)
		}
		if r.first == 1 {
			continue
		}
		Compare(t, fmt.Sprintf("after %d..%d", r.first, r.last), c.Options, r.tg, ExpectTurnedOn(entries, int(r.last), 4, c.Options), start)
	}
}

// CheckKeyless: a stream without a key is appended to, each row with its metadata (never deleted).
func CheckKeyless(t *testing.T, c Case, tg Target) {
	t.Helper()
	const stream, table = "public.log", "log"
	sc := change.Schema(change.DataFields(schema), nil)
	entries := [][]Change{
		{{Op: change.OpRead, ID: 1, V: "a"}, {Op: change.OpInsert, ID: 1, V: "a"}},
		{{Op: change.OpInsert, ID: 2, V: "b"}},
	}
	items := itemsOf(stream, sc, entries, 1, 2)
	defer Release(items)
	if _, err := tg.Apply(context.Background(), 1, 2, items); err != nil {
		t.Fatalf("apply 1..2: %v", err)
	}
	_, rows, err := tg.Read(context.Background(), table)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		s := fmt.Sprintf("%v %v", r["id"], r["v"])
		if c.Options.SoftDelete {
			s += fmt.Sprintf(" deleted=%v", r[rowmeta.Deleted])
		}
		if c.Options.Op {
			s += fmt.Sprintf(" op=%v", r[rowmeta.Op])
		}
		if c.Options.Position {
			s += fmt.Sprintf(" position=%v", r[rowmeta.Position])
		}
		got = append(got, s)
	}
	slices.Sort(got)
	var want []string
	for i, e := range entries {
		for _, ch := range e {
			s := fmt.Sprintf("%d %s", ch.ID, ch.V)
			if c.Options.SoftDelete {
				s += " deleted=false"
			}
			if c.Options.Op {
				s += " op=" + rowmeta.OpName(ch.Op)
			}
			if c.Options.Position {
				s += fmt.Sprintf(" position=%d", i+1)
			}
			want = append(want, s)
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("table %s:\n got %q\nwant %q", table, got, want)
	}
}

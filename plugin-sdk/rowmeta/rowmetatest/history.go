package rowmetatest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
)

// The history table's name and the columns it has beyond the source's (the README's "History tables"):
// _skippr_op and _skippr_source_committed_at as rowmeta names them, the WAL entry and the change's place in it.
const (
	HistoryTable    = Table + "_history"
	HistoryPosition = rowmeta.Position
	HistorySeq      = "_skippr_seq"
)

// HistoryCases are the settings CheckHistory runs under: history alone, and history with every other setting
// (the mirror then as Run checks it).
func HistoryCases() []Case {
	all := []any{"synced_at", "source_committed_at", "op", "position"}
	return []Case{
		{Name: "history", Settings: map[string]any{"history": true}, Options: rowmeta.Options{History: true}},
		{
			Name:     "history_all",
			Settings: map[string]any{"history": true, "soft_delete": true, "metadata_columns": all},
			Options:  rowmeta.Options{History: true, SoftDelete: true, SyncedAt: true, SourceCommittedAt: true, Op: true, Position: true},
		},
	}
}

// HistoryWant is the history the change sequence's entries 1..n give: every change (a truncate is not one) as
// "position seq op id v committed", ordered by (position, seq). A delete's v is "<nil>" (deletes carry only
// their key), as is a snapshot read's committed.
func HistoryWant(entries [][]Change, n int) []string {
	var out []string
	for e := range n {
		seq := 0
		for j, ch := range entries[e] {
			if ch.Truncate {
				continue
			}
			v := ch.V
			if ch.Op == change.OpDelete {
				v = "<nil>"
			}
			at := "<nil>"
			if t := CommitTime(uint64(e+1), j, ch.Op); !t.IsZero() {
				at = t.UTC().Format(time.RFC3339Nano)
			}
			out = append(out, fmt.Sprintf("%d %d %s %d %s %s", e+1, seq, rowmeta.OpName(ch.Op), ch.ID, v, at))
			seq++
		}
	}
	return out
}

// ReadHistory reads the target's HistoryTable in HistoryWant's form, ordered by (position, seq). Column names
// are matched without regard to case (Snowflake spells them upper-case).
func ReadHistory(ctx context.Context, tg Target) ([]string, error) {
	_, rows, err := tg.Read(ctx, HistoryTable)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", HistoryTable, err)
	}
	type line struct {
		pos, seq int64
		text     string
	}
	var lines []line
	for _, r := range rows {
		low := map[string]any{}
		for k, v := range r {
			low[strings.ToLower(k)] = v
		}
		pos, err := toInt(low[HistoryPosition])
		if err != nil {
			return nil, fmt.Errorf("%s: %s %v: %w", HistoryTable, HistoryPosition, low[HistoryPosition], err)
		}
		seq, err := toInt(low[HistorySeq])
		if err != nil {
			return nil, fmt.Errorf("%s: %s %v: %w", HistoryTable, HistorySeq, low[HistorySeq], err)
		}
		id, err := toInt(low["id"])
		if err != nil {
			return nil, fmt.Errorf("%s: id %v: %w", HistoryTable, low["id"], err)
		}
		v := "<nil>"
		if x := low["v"]; x != nil {
			v = fmt.Sprint(x)
		}
		at := "<nil>"
		switch x := low[rowmeta.SourceCommittedAt].(type) {
		case nil:
		case time.Time:
			at = x.UTC().Format(time.RFC3339Nano)
		default:
			return nil, fmt.Errorf("%s: %s is %T %v, want a time", HistoryTable, rowmeta.SourceCommittedAt, x, x)
		}
		lines = append(lines, line{pos, seq, fmt.Sprintf("%d %d %v %d %s %s", pos, seq, low[rowmeta.Op], id, v, at)})
	}
	slices.SortFunc(lines, func(a, b line) int { return cmp.Or(cmp.Compare(a.pos, b.pos), cmp.Compare(a.seq, b.seq)) })
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.text
	}
	return out, nil
}

// CheckHistory is Run for a case with history: the sequence applied cut by cut, after each range the history
// equal to HistoryWant (every change once, in order, with its values, op, commit time and position) and the
// mirrored table to Expect; then every range replayed and a range from the middle to the end, which append
// nothing; and ranges overlapping the fence, which append only the entries above it. newTarget opens the
// target for the case on a table and pipeline of its own, named by the cut.
func CheckHistory(t *testing.T, c Case, newTarget func(t *testing.T, name string) Target) {
	entries := Entries()
	check := func(t *testing.T, ctx context.Context, what string, tg Target, n int, start time.Time) {
		t.Helper()
		got, err := ReadHistory(ctx, tg)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if want := HistoryWant(entries, n); !slices.Equal(got, want) {
			t.Fatalf("%s: the history is\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		Compare(t, what, c.Options, tg, Expect(entries, n, c.Options), start)
	}
	apply := func(t *testing.T, ctx context.Context, tg Target, first, last uint64, wantSkipped bool) {
		t.Helper()
		items := Items(entries, first, last)
		defer Release(items)
		res, err := tg.Apply(ctx, first, last, items)
		if err != nil {
			t.Fatalf("apply %d..%d: %v", first, last, err)
		}
		if res.Skipped != wantSkipped {
			t.Fatalf("apply %d..%d: skipped %v, want %v", first, last, res.Skipped, wantSkipped)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(Cuts)) {
		cuts := Cuts[name]
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			tg := newTarget(t, strings.ReplaceAll(name, " ", "_"))
			start := time.Now().Add(-time.Minute)
			first := uint64(1)
			for _, last := range cuts {
				apply(t, ctx, tg, first, last, false)
				check(t, ctx, fmt.Sprintf("after %d..%d", first, last), tg, int(last), start)
				first = last + 1
			}
			first = 1
			for _, last := range cuts {
				apply(t, ctx, tg, first, last, true)
				first = last + 1
			}
			apply(t, ctx, tg, 6, 11, true)
			check(t, ctx, "after the replays", tg, len(entries), start)
		})
	}
	t.Run("overlap", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		tg := newTarget(t, "overlap")
		start := time.Now().Add(-time.Minute)
		for _, r := range [][2]uint64{{1, 6}, {4, 9}, {2, 11}} {
			apply(t, ctx, tg, r[0], r[1], false)
			check(t, ctx, fmt.Sprintf("after %d..%d", r[0], r[1]), tg, int(r[1]), start)
		}
	})
}

package dest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta/rowmetatest"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// historyEnv is a destination with history on for rowmetatest's stream, with extra settings.
type historyEnv struct {
	t   *testing.T
	d   *Destination
	raw json.RawMessage
}

func newHistoryEnv(t *testing.T, extra map[string]any) *historyEnv {
	m := map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(t.TempDir(), "wh")}, "namespace": "lake",
		"tables": map[string]any{rowmetatest.Stream: rowmetatest.Table}, "history": true}
	maps.Copy(m, extra)
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	d := &Destination{Version: "test", Log: testLogger(t)}
	t.Cleanup(func() { d.Close() })
	return &historyEnv{t: t, d: d, raw: raw}
}

func (h *historyEnv) tryApply(first, last uint64) (serve.ApplyResult, error) {
	items := rowmetatest.Items(rowmetatest.Entries(), first, last)
	defer rowmetatest.Release(items)
	return h.d.Apply(ctxT(h.t), serve.ApplyRequest{Settings: h.raw, Pipeline: "p", FirstSequence: first, Sequence: last, Items: items})
}

func (h *historyEnv) apply(first, last uint64, wantSkipped bool) {
	h.t.Helper()
	res, err := h.tryApply(first, last)
	if err != nil {
		h.t.Fatalf("apply %d..%d: %v", first, last, err)
	}
	if res.Skipped != wantSkipped {
		h.t.Fatalf("apply %d..%d: skipped %v, want %v", first, last, res.Skipped, wantSkipped)
	}
}

// history reads items_history as rowmetatest.HistoryWant writes it, ordered by (position, seq).
func (h *historyEnv) history() []string {
	h.t.Helper()
	_, rows, err := readLakeTable(ctxT(h.t), h.d, h.raw, historyTable(rowmetatest.Table))
	if err != nil {
		h.t.Fatal(err)
	}
	type line struct {
		pos, seq int64
		s        string
	}
	var ls []line
	for _, r := range rows {
		at := "<nil>"
		if ts, ok := r[rowmeta.SourceCommittedAt].(time.Time); ok {
			at = ts.UTC().Format(time.RFC3339Nano)
		}
		v := "<nil>"
		if r["v"] != nil {
			v = fmt.Sprint(r["v"])
		}
		pos, seq := r[histPos].(int64), r[histSeq].(int64)
		ls = append(ls, line{pos, seq, fmt.Sprintf("%d %d %v %v %s %s", pos, seq, r[histOp], r["id"], v, at)})
	}
	slices.SortFunc(ls, func(x, y line) int {
		if x.pos != y.pos {
			return int(x.pos - y.pos)
		}
		return int(x.seq - y.seq)
	})
	var out []string
	for _, l := range ls {
		out = append(out, l.s)
	}
	return out
}

func (h *historyEnv) check(what string, n int) {
	h.t.Helper()
	if got, want := h.history(), rowmetatest.HistoryWant(rowmetatest.Entries(), n); !slices.Equal(got, want) {
		h.t.Fatalf("%s: the history is\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestHistory: with history: true every change lands in items_history once, in order, whatever the cut of the
// sequence into ranges (a truncate empties the mirror, not the history); every range replayed and ranges
// overlapping the fence append nothing; the mirror is as without history.
func TestHistory(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(rowmetatest.Cuts)) {
		t.Run(name, func(t *testing.T) {
			h := newHistoryEnv(t, nil)
			first := uint64(1)
			for _, last := range rowmetatest.Cuts[name] {
				h.apply(first, last, false)
				h.check(fmt.Sprintf("after %d..%d", first, last), int(last))
				first = last + 1
			}
			first = 1
			for _, last := range rowmetatest.Cuts[name] {
				h.apply(first, last, true)
				first = last + 1
			}
			h.apply(6, 11, true)
			h.check("after the replays", 11)
			rowmetatest.Compare(t, "mirror", rowmeta.Options{}, rowmetatest.Target{Read: func(ctx context.Context, table string) ([]string, []map[string]any, error) {
				return readLakeTable(ctx, h.d, h.raw, table)
			}}, rowmetatest.Expect(rowmetatest.Entries(), 11, rowmeta.Options{}), time.Now())
		})
	}
	t.Run("overlap", func(t *testing.T) {
		h := newHistoryEnv(t, nil)
		for _, r := range [][2]uint64{{1, 6}, {4, 9}, {2, 11}} {
			h.apply(r[0], r[1], false)
			h.check(fmt.Sprintf("after %d..%d", r[0], r[1]), int(r[1]))
		}
	})
	t.Run("spilled", func(t *testing.T) {
		// Every few rows go out as files before the commit: the numbering goes on across chunks.
		h := newHistoryEnv(t, nil)
		h.d.hooks.bufferBudget = 1
		h.apply(1, 11, false)
		h.check("after 1..11", 11)
	})
}

// TestHistoryCrashBetweenCommits: the apply dies after one of the two tables of the stream committed (the
// other's commit fails, as a SIGKILL between them leaves it); the engine's replay of the range applies only
// the other, and neither holds a change twice.
func TestHistoryCrashBetweenCommits(t *testing.T) {
	for _, failing := range []string{historyTable(rowmetatest.Table), rowmetatest.Table} {
		t.Run(failing+" fails", func(t *testing.T) {
			h := newHistoryEnv(t, map[string]any{"soft_delete": true})
			h.apply(1, 4, false)
			crash := errors.New("killed")
			h.d.hooks.beforeCommit = func(table string, _ int) error {
				if table == failing {
					return crash
				}
				return nil
			}
			if _, err := h.tryApply(5, 9); !errors.Is(err, crash) {
				t.Fatalf("apply 5..9 with %s failing: %v", failing, err)
			}
			h.d.hooks.beforeCommit = nil
			// LastApplied reports the mirror's fence for the stream, never the history's.
			applied, err := h.d.LastApplied(ctxT(t), h.raw, "p")
			if err != nil {
				t.Fatal(err)
			}
			wantFence := uint64(9)
			if failing == rowmetatest.Table {
				wantFence = 4
			}
			if want := map[string]uint64{rowmetatest.Stream: wantFence}; !maps.Equal(applied.Streams, want) || applied.Sequence != 4 {
				t.Fatalf("LastApplied after the crash: %+v, want sequence 4 and streams %v", applied, want)
			}
			h.apply(5, 9, false)
			h.check("after the replay of 5..9", 9)
			h.apply(10, 11, false)
			h.check("after 10..11", 11)
			opt := rowmeta.Options{SoftDelete: true}
			rowmetatest.Compare(t, "mirror", opt, rowmetatest.Target{Read: func(ctx context.Context, table string) ([]string, []map[string]any, error) {
				return readLakeTable(ctx, h.d, h.raw, table)
			}}, rowmetatest.Expect(rowmetatest.Entries(), 11, opt), time.Now())
		})
	}
}

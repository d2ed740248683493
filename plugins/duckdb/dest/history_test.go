package dest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta/rowmetatest"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// historyWant is the history table the change sequence's entries 1..n give: every change (a truncate is not
// one) as "position seq op id v committed", in order.
func historyWant(entries [][]rowmetatest.Change, n int) []string {
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
			if t := rowmetatest.CommitTime(uint64(e+1), j, ch.Op); !t.IsZero() {
				at = t.UTC().Format(time.RFC3339Nano)
			}
			out = append(out, fmt.Sprintf("%d %d %s %d %s %s", e+1, seq, rowmeta.OpName(ch.Op), ch.ID, v, at))
			seq++
		}
	}
	return out
}

// TestHistory: with history: true every change lands in items_history once, in order, whatever the cut of
// the sequence into ranges; every range replayed and ranges overlapping the fence append nothing.
func TestHistory(t *testing.T) {
	entries := rowmetatest.Entries()
	open := func(t *testing.T) (apply func(first, last uint64, wantSkipped bool), read func() []string) {
		path := filepath.Join(t.TempDir(), "h.duckdb")
		dest := &Destination{}
		d := serve.NewSessions(dest)
		t.Cleanup(func() {
			if err := d.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		raw, _ := json.Marshal(map[string]any{"path": path, "history": true})
		ctx := context.Background()
		apply = func(first, last uint64, wantSkipped bool) {
			t.Helper()
			items := rowmetatest.Items(entries, first, last)
			defer rowmetatest.Release(items)
			res, err := d.Apply(ctx, serve.ApplyRequest{Settings: raw, Pipeline: "p", FirstSequence: first, Sequence: last, Items: items})
			if err != nil {
				t.Fatalf("apply %d..%d: %v", first, last, err)
			}
			if res.Skipped != wantSkipped {
				t.Fatalf("apply %d..%d: skipped %v, want %v", first, last, res.Skipped, wantSkipped)
			}
		}
		read = func() []string {
			t.Helper()
			_, rows, err := readTable(ctx, dest, path, rowmetatest.Table+"_history")
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, r := range rows {
				at := "<nil>"
				if ts, ok := r[rowmeta.SourceCommittedAt].(time.Time); ok {
					at = ts.UTC().Format(time.RFC3339Nano)
				}
				out = append(out, fmt.Sprintf("%v %v %v %v %v %s", r[histPos], r[histSeq], r[histOp], r["id"], r["v"], at))
			}
			slices.SortFunc(out, func(x, y string) int {
				var p1, s1, p2, s2 int
				fmt.Sscan(x, &p1, &s1)
				fmt.Sscan(y, &p2, &s2)
				if p1 != p2 {
					return p1 - p2
				}
				return s1 - s2
			})
			return out
		}
		return apply, read
	}
	for _, name := range slices.Sorted(maps.Keys(rowmetatest.Cuts)) {
		t.Run(name, func(t *testing.T) {
			apply, read := open(t)
			first := uint64(1)
			for _, last := range rowmetatest.Cuts[name] {
				apply(first, last, false)
				if got, want := read(), historyWant(entries, int(last)); !slices.Equal(got, want) {
					t.Fatalf("after %d..%d the history is\n%s\nwant\n%s", first, last, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
				first = last + 1
			}
			first = 1
			for _, last := range rowmetatest.Cuts[name] {
				apply(first, last, true)
				first = last + 1
			}
			apply(6, 11, true)
			if got, want := read(), historyWant(entries, 11); !slices.Equal(got, want) {
				t.Fatalf("after the replays the history is\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
	t.Run("overlap", func(t *testing.T) {
		apply, read := open(t)
		for _, r := range [][2]uint64{{1, 6}, {4, 9}, {2, 11}} {
			apply(r[0], r[1], false)
			if got, want := read(), historyWant(entries, int(r[1])); !slices.Equal(got, want) {
				t.Fatalf("after %d..%d the history is\n%s\nwant\n%s", r[0], r[1], strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}
	})
}

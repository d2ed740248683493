package rowmetatest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// OtherStream is a second stream beside Stream, with the same schema and changes, that a per-table override
// of Stream must leave at the connection's settings; its table is OtherTable.
const (
	OtherStream = "public.others"
	OtherTable  = "others"
)

// OverrideCase is a row of the per-table override matrix: Settings (connection keys and a table_options entry
// for Stream) give Stream Options and every other stream Others.
type OverrideCase struct {
	Case
	Others rowmeta.Options
}

// OverrideCases are the per-table override settings every destination is checked under: a stream turned off
// while the connection is on, on while the connection is off, and one key overridden while the others come
// from the connection (metadata_columns replaced whole, not merged).
func OverrideCases() []OverrideCase {
	return []OverrideCase{
		{
			Case: Case{
				Name: "stream_off",
				Settings: map[string]any{"soft_delete": true, "metadata_columns": []any{"synced_at", "op", "position"}, "history": true,
					"table_options": map[string]any{Stream: map[string]any{"soft_delete": false, "metadata_columns": []any{}, "history": false}}},
			},
			Others: rowmeta.Options{SoftDelete: true, SyncedAt: true, Op: true, Position: true, History: true},
		},
		{
			Case: Case{
				Name: "stream_on",
				Settings: map[string]any{
					"table_options": map[string]any{Stream: map[string]any{"soft_delete": true, "metadata_columns": []any{"op", "position", "source_committed_at"}, "history": true}}},
				Options: rowmeta.Options{SoftDelete: true, Op: true, Position: true, SourceCommittedAt: true, History: true},
			},
		},
		{
			Case: Case{
				Name: "stream_partial",
				Settings: map[string]any{"soft_delete": true, "metadata_columns": []any{"synced_at"},
					"table_options": map[string]any{Stream: map[string]any{"metadata_columns": []any{"op"}}}},
				Options: rowmeta.Options{SoftDelete: true, Op: true},
			},
			Others: rowmeta.Options{SoftDelete: true, SyncedAt: true},
		},
	}
}

// OtherTarget is tg reading OtherStream's tables where a check reads Stream's (Table, HistoryTable), so that
// Compare and ReadHistory check the other stream.
func OtherTarget(tg Target) Target {
	return Target{
		Apply: tg.Apply,
		Read: func(ctx context.Context, table string) ([]string, []map[string]any, error) {
			switch table {
			case Table:
				table = OtherTable
			case HistoryTable:
				table = OtherTable + "_history"
			}
			return tg.Read(ctx, table)
		},
	}
}

// BothItems are the items of entries first..last of Stream and OtherStream, each entry's items together (Stream's
// first), as one pipeline carries two tables. The caller releases them (Release).
func BothItems(entries [][]Change, first, last uint64) []serve.Item {
	var out []serve.Item
	for seq := first; seq <= last; seq++ {
		out = append(out, Items(entries, seq, seq)...)
		out = append(out, itemsOf(OtherStream, schema, entries, seq, seq)...)
	}
	return out
}

// CheckOverride applies the change sequence to Stream and OtherStream in one pipeline, cut two ways, and
// checks each stream's table (and history table, or that it has none) against its own options: Stream's
// override must change Stream only. Then every range is replayed and must be skipped. newTarget opens the
// target with c.Settings on tables and a pipeline of its own, named by the cut.
func CheckOverride(t *testing.T, c OverrideCase, newTarget func(t *testing.T, name string) Target) {
	entries := Entries()
	for _, name := range []string{"per entry", "ranges"} {
		cuts := Cuts[name]
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			tg := newTarget(t, strings.ReplaceAll(name, " ", "_"))
			start := time.Now().Add(-time.Minute)
			apply := func(first, last uint64, wantSkipped bool) {
				t.Helper()
				items := BothItems(entries, first, last)
				defer Release(items)
				res, err := tg.Apply(ctx, first, last, items)
				if err != nil {
					t.Fatalf("apply %d..%d: %v", first, last, err)
				}
				if res.Skipped != wantSkipped {
					t.Fatalf("apply %d..%d: skipped %v, want %v", first, last, res.Skipped, wantSkipped)
				}
			}
			check := func(what string, n int) {
				t.Helper()
				for _, s := range []struct {
					stream string
					tg     Target
					opt    rowmeta.Options
				}{{Stream, tg, c.Options}, {OtherStream, OtherTarget(tg), c.Others}} {
					Compare(t, what+", stream "+s.stream, s.opt, s.tg, Expect(entries, n, s.opt), start)
					got, err := ReadHistory(ctx, s.tg)
					switch {
					case s.opt.History && err != nil:
						t.Fatalf("%s, stream %s: %v", what, s.stream, err)
					case s.opt.History:
						if want := HistoryWant(entries, n); !slices.Equal(got, want) {
							t.Errorf("%s, stream %s: the history is\n%s\nwant\n%s", what, s.stream, strings.Join(got, "\n"), strings.Join(want, "\n"))
						}
					case err == nil:
						t.Errorf("%s, stream %s: has a history table (%d rows), but its history is off", what, s.stream, len(got))
					}
				}
			}
			first := uint64(1)
			for _, last := range cuts {
				apply(first, last, false)
				check(fmt.Sprintf("after %d..%d", first, last), int(last))
				first = last + 1
			}
			first = 1
			for _, last := range cuts {
				apply(first, last, true)
				first = last + 1
			}
			check("after the replays", len(entries))
		})
	}
}

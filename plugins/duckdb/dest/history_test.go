package dest

import (
	"context"
	"encoding/json"
	"maps"
	"path/filepath"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta/rowmetatest"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// TestHistory runs the SDK's history check (rowmetatest.CheckHistory): with history: true every change lands
// in items_history once, in order, whatever the cut of the sequence into ranges; replays and ranges
// overlapping the fence append nothing; the mirror is as rowmetatest expects.
func TestHistory(t *testing.T) {
	for _, tc := range rowmetatest.HistoryCases() {
		t.Run(tc.Name, func(t *testing.T) {
			rowmetatest.CheckHistory(t, tc, func(t *testing.T, name string) rowmetatest.Target {
				path := filepath.Join(t.TempDir(), name+".duckdb")
				dest := &Destination{}
				d := serve.NewSessions(dest)
				t.Cleanup(func() {
					if err := d.Close(); err != nil {
						t.Errorf("close: %v", err)
					}
				})
				m := map[string]any{"path": path}
				maps.Copy(m, tc.Settings)
				raw, err := json.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				return rowmetatest.Target{
					Apply: func(ctx context.Context, first, last uint64, items []serve.Item) (serve.ApplyResult, error) {
						return d.Apply(ctx, serve.ApplyRequest{Settings: raw, Pipeline: "p", FirstSequence: first, Sequence: last, Items: items})
					},
					Read: func(ctx context.Context, table string) ([]string, []map[string]any, error) {
						return readTable(ctx, dest, path, table)
					},
				}
			})
		})
	}
}

package dest

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta/rowmetatest"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// TestRowMeta runs the SDK's soft delete and metadata columns check (plugin-sdk/rowmeta/rowmetatest) for each
// setting, each cut of the change sequence into ranges, and the replays.
func TestRowMeta(t *testing.T) {
	for _, tc := range rowmetatest.Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			// open returns the target of a file of its own, with the case's settings or (on) the same file's
			// target with them or without: one Destination holds the file for both.
			open := func(t *testing.T, name string) func(with bool) rowmetatest.Target {
				path := filepath.Join(t.TempDir(), name+".duckdb")
				dest := &Destination{}
				d := serve.NewSessions(dest)
				t.Cleanup(func() {
					if err := d.Close(); err != nil {
						t.Errorf("close: %v", err)
					}
				})
				return func(with bool) rowmetatest.Target {
					m := map[string]any{"path": path}
					if with {
						for k, v := range tc.Settings {
							m[k] = v
						}
					}
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
				}
			}
			target := func(t *testing.T, name string) rowmetatest.Target { return open(t, name)(true) }
			rowmetatest.Run(t, tc, target)
			t.Run("clash", func(t *testing.T) { rowmetatest.CheckClash(t, tc, target(t, "clash")) })
			t.Run("resnapshot", func(t *testing.T) { rowmetatest.CheckResnapshot(t, tc, target(t, "resnapshot")) })
			t.Run("keyless", func(t *testing.T) { rowmetatest.CheckKeyless(t, tc, target(t, "keyless")) })
			t.Run("turned on", func(t *testing.T) {
				on := open(t, "turned_on")
				rowmetatest.CheckTurnedOn(t, tc, on(false), on(true))
			})
		})
	}
}

// TestRowMetaOverride runs the SDK's per-table override check (rowmetatest.CheckOverride): a table_options
// entry changes soft_delete, metadata_columns and history for its stream only, the other stream in the same
// pipeline keeping the connection's; the stream's own options decide a clash and a re-snapshot's end.
func TestRowMetaOverride(t *testing.T) {
	for _, tc := range rowmetatest.OverrideCases() {
		t.Run(tc.Name, func(t *testing.T) {
			target := func(t *testing.T, name string) rowmetatest.Target {
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
			}
			rowmetatest.CheckOverride(t, tc, target)
			t.Run("clash", func(t *testing.T) { rowmetatest.CheckClash(t, tc.Case, target(t, "clash")) })
			t.Run("resnapshot", func(t *testing.T) { rowmetatest.CheckResnapshot(t, tc.Case, target(t, "resnapshot")) })
		})
	}
}

// readTable reads a table of the destination's open file.
func readTable(ctx context.Context, dest *Destination, path, table string) ([]string, []map[string]any, error) {
	dest.mu.Lock()
	o := dest.dbs[path]
	dest.mu.Unlock()
	if o == nil {
		return nil, nil, errors.New("database not open")
	}
	rs, err := o.db.QueryContext(ctx, "SELECT * FROM main."+table)
	if err != nil {
		return nil, nil, err
	}
	defer rs.Close()
	cols, err := rs.Columns()
	if err != nil {
		return nil, nil, err
	}
	var out []map[string]any
	for rs.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			return nil, nil, err
		}
		row := map[string]any{}
		for i, c := range cols {
			row[strings.ToLower(c)] = vals[i]
		}
		out = append(out, row)
	}
	return cols, out, rs.Err()
}

// TestRowMetaSettings: what the SDK refuses, the destination refuses when it parses its settings.
func TestRowMetaSettings(t *testing.T) {
	for cols, want := range map[string]string{
		`["op", "op"]`: `lists "op" twice`,
		`["when"]`:     `unknown column "when"`,
	} {
		_, err := ParseSettings(json.RawMessage(`{"path": "x.duckdb", "metadata_columns": ` + cols + `}`))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("metadata_columns %s: %v, want an error containing %q", cols, err, want)
		}
		// The same in a stream's override, naming the stream.
		_, err = ParseSettings(json.RawMessage(`{"path": "x.duckdb", "table_options": {"shop.orders": {"metadata_columns": ` + cols + `}}}`))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "table_options.shop.orders") {
			t.Errorf("table_options.shop.orders.metadata_columns %s: %v, want an error naming the stream containing %q", cols, err, want)
		}
	}
}

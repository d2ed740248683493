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
	"time"

	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/catalog"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta/rowmetatest"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// TestRowMeta runs the SDK's soft delete and metadata columns check (plugin-sdk/rowmeta/rowmetatest) for each
// setting, each cut of the change sequence into ranges, the replays, a re-snapshot's end, a clash with a source
// column, a stream without a key and the settings turned on over an existing table.
func TestRowMeta(t *testing.T) {
	for _, tc := range rowmetatest.Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			open := func(t *testing.T, name string) func(with bool) rowmetatest.Target {
				dir := t.TempDir()
				d := &Destination{Version: "test", Log: testLogger(t)}
				if strings.HasPrefix(name, "spilled") {
					d.hooks.bufferBudget = 1 // every item goes out as files before the commit
				}
				t.Cleanup(func() { d.Close() })
				return func(with bool) rowmetatest.Target {
					m := map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(dir, "wh")}, "namespace": "lake",
						"tables": map[string]any{rowmetatest.Stream: rowmetatest.Table, "public.log": "log"}}
					if with {
						maps.Copy(m, tc.Settings)
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
							return readLakeTable(ctx, d, raw, table)
						},
					}
				}
			}
			target := func(t *testing.T, name string) rowmetatest.Target { return open(t, name)(true) }
			rowmetatest.Run(t, tc, target)
			t.Run("spilled", func(t *testing.T) {
				rowmetatest.Run(t, tc, func(t *testing.T, name string) rowmetatest.Target { return target(t, "spilled_"+name) })
			})
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

// readLakeTable scans a table of namespace lake with its deletes applied, each value as Go gives it: int64,
// string, bool, time.Time (UTC) or nil.
func readLakeTable(ctx context.Context, d *Destination, raw json.RawMessage, name string) ([]string, []map[string]any, error) {
	s, err := ParseSettings(raw)
	if err != nil {
		return nil, nil, err
	}
	oc, err := d.catalog(ctx, raw, s)
	if err != nil {
		return nil, nil, err
	}
	tbl, err := oc.cat.LoadTable(ctx, append(s.NamespaceIdent(), name))
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var cols []string
	for _, f := range tbl.Schema().Fields() {
		cols = append(cols, f.Name)
	}
	at, err := tbl.Scan().ToArrowTable(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer at.Release()
	tr := array.NewTableReader(at, 1024)
	defer tr.Release()
	var out []map[string]any
	for tr.Next() {
		rec := tr.RecordBatch()
		for i := range int(rec.NumRows()) {
			row := map[string]any{}
			for j, f := range rec.Schema().Fields() {
				v, err := goValue(rec.Column(j), i)
				if err != nil {
					return nil, nil, fmt.Errorf("column %s: %w", f.Name, err)
				}
				row[f.Name] = v
			}
			out = append(out, row)
		}
	}
	return cols, out, tr.Err()
}

func goValue(c arrow.Array, i int) (any, error) {
	if c.IsNull(i) {
		return nil, nil
	}
	switch a := c.(type) {
	case *array.Int64:
		return a.Value(i), nil
	case *array.Int32:
		return int64(a.Value(i)), nil
	case *array.String:
		return a.Value(i), nil
	case *array.LargeString:
		return a.Value(i), nil
	case *array.Boolean:
		return a.Value(i), nil
	case *array.Timestamp:
		unit := a.DataType().(*arrow.TimestampType).Unit
		return a.Value(i).ToTime(unit).UTC(), nil
	}
	return nil, fmt.Errorf("type %s not read by the test", c.DataType())
}

// TestSoftDeleteResnapshotInOneApply: a re-snapshot that begins and ends within one apply keeps the row written
// before its begin and not received since, marked deleted by the end's entry with its values, whether the
// apply is held whole or written out chunk by chunk (the row then sits in an earlier chunk's file).
func TestSoftDeleteResnapshotInOneApply(t *testing.T) {
	R := change.OpRead
	row := func(id int64, v string) rowmetatest.Change { return rowmetatest.Change{Op: R, ID: id, V: v} }
	opt := rowmeta.Options{SoftDelete: true, Op: true, Position: true}
	for _, spill := range []bool{false, true} {
		t.Run(fmt.Sprintf("spilled %v", spill), func(t *testing.T) {
			d := &Destination{Version: "test", Log: testLogger(t)}
			t.Cleanup(func() { d.Close() })
			if spill {
				d.hooks.bufferBudget = 1
			}
			raw, _ := json.Marshal(map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(t.TempDir(), "wh")}, "namespace": "lake",
				"tables": map[string]any{rowmetatest.Stream: rowmetatest.Table}, "soft_delete": true, "metadata_columns": []string{"op", "position"}})
			first := rowmetatest.Items([][]rowmetatest.Change{{row(1, "a"), row(2, "b"), row(3, "c")}}, 1, 1)
			second := rowmetatest.Items([][]rowmetatest.Change{{row(1, "a"), row(3, "c")}}, 1, 1)
			defer rowmetatest.Release(first)
			defer rowmetatest.Release(second)
			items := slices.Clone(first)
			items = append(items, serve.Item{Stream: rowmetatest.Stream, Resnapshot: serve.ResnapshotBegin, Sequence: 2})
			for _, it := range second {
				it.Sequence = 2
				items = append(items, it)
			}
			items = append(items, serve.Item{Stream: rowmetatest.Stream, Resnapshot: serve.ResnapshotEnd, Sequence: 2})
			if _, err := d.Apply(ctxT(t), serve.ApplyRequest{Settings: raw, Pipeline: "p", FirstSequence: 1, Sequence: 2, Items: items}); err != nil {
				t.Fatal(err)
			}
			want := map[int64]rowmetatest.Row{
				1: {V: "a", Op: "snapshot", Position: 2},
				2: {V: "b", Deleted: true, Op: "delete", Position: 2},
				3: {V: "c", Op: "snapshot", Position: 2},
			}
			rowmetatest.Compare(t, "after the re-snapshot", opt, rowmetatest.Target{Read: func(ctx context.Context, table string) ([]string, []map[string]any, error) {
				return readLakeTable(ctx, d, raw, table)
			}}, want, time.Now())
		})
	}
}

package conformance

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
)

// checkCapabilities exercises each optional apply item a destination's capabilities announce, each as a
// subtest: the engine sends them only to a destination that announces them, so only the kit would find one
// that announces and fails them.
func checkCapabilities(ctx context.Context, t *testing.T, c *client.Client, cfg Config, caps *pluginv2.CapabilitiesResponse) {
	t.Run("updates-deletes", func(t *testing.T) { checkUpdatesDeletes(ctx, t, c, cfg, caps) })
	if caps.SchemaEvolution {
		t.Run("added-column", func(t *testing.T) { checkAddedColumn(ctx, t, c, cfg, caps) })
	}
	if caps.Truncate {
		t.Run("truncate", func(t *testing.T) { checkTruncate(ctx, t, c, cfg, caps) })
	}
	if caps.Resnapshot {
		t.Run("resnapshot", func(t *testing.T) { checkResnapshot(ctx, t, c, cfg, caps) })
	}
	if caps.RenamedStream {
		t.Run("renamed-stream", func(t *testing.T) {
			// A budget of its own, as when a destination's tests call CheckRenamedStream by itself.
			rctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
			defer cancel()
			checkRenamedStream(rctx, t, c, cfg, caps)
		})
	}
	if len(caps.UnsupportedTypes) > 0 {
		t.Run("type-limits", func(t *testing.T) { checkTypeLimits(t, caps.UnsupportedTypes) })
	}
}

// applier applies entries of one new pipeline and checks what the destination then holds.
type applier struct {
	ctx      context.Context
	t        *testing.T
	c        *client.Client
	cfg      Config
	caps     *pluginv2.CapabilitiesResponse
	pipeline string
}

func newApplier(ctx context.Context, t *testing.T, c *client.Client, cfg Config, caps *pluginv2.CapabilitiesResponse, name string) *applier {
	return &applier{ctx: ctx, t: t, c: c, cfg: cfg, caps: caps, pipeline: fmt.Sprintf("conformance-%s-%d", name, time.Now().UnixNano())}
}

// holds checks, when Config.Rows is set, that the destination holds exactly the rows of stream with keys ids.
func (a *applier) holds(stream, after string, ids ...int64) {
	a.t.Helper()
	if a.cfg.Rows == nil {
		return
	}
	rows, err := a.cfg.Rows(stream)
	if err != nil {
		a.t.Fatalf("Config.Rows(%q) after %s: %v", stream, after, err)
	}
	var want, got []string
	for _, id := range ids {
		want = append(want, fmt.Sprint(id))
	}
	for k := range rows {
		got = append(got, k)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		a.t.Errorf("after %s the destination holds rows %v of stream %s, want %v", after, got, stream, want)
	}
}

// holdsValues checks, when Config.Rows is set, that the destination holds exactly want of stream: per key, the
// columns named in want with these values ("" for a null, which Rows may also leave out).
func (a *applier) holdsValues(stream, after string, want map[string]map[string]string) {
	a.t.Helper()
	if a.cfg.Rows == nil {
		return
	}
	rows, err := a.cfg.Rows(stream)
	if err != nil {
		a.t.Fatalf("Config.Rows(%q) after %s: %v", stream, after, err)
	}
	if len(rows) != len(want) {
		a.t.Errorf("after %s the destination holds %d rows of stream %s (%v), want %d (%v)", after, len(rows), stream, rows, len(want), want)
	}
	for k, cols := range want {
		got, ok := rows[k]
		if !ok {
			a.t.Errorf("after %s stream %s has no row %s", after, stream, k)
			continue
		}
		for col, v := range cols {
			if g := got[col]; g != v && !(v == "" && (g == "<nil>" || g == "NULL")) {
				a.t.Errorf("after %s row %s of stream %s: column %s is %q, want %q", after, k, stream, col, g, v)
			}
		}
	}
}

// apply applies one entry; an exactly-once destination must then hold it, and skip it when it comes again.
func (a *applier) apply(seq uint64, what string, items ...client.ApplyItem) {
	a.t.Helper()
	r, err := a.c.Apply(a.ctx, a.cfg.Settings, a.pipeline, seq, items)
	if err != nil {
		a.t.Fatalf("apply %d (%s): %v", seq, what, err)
	}
	if r.Skipped {
		a.t.Errorf("apply %d (%s): skipped, but the destination never held it", seq, what)
	}
	if !a.caps.ExactlyOnce {
		return
	}
	la, err := a.c.LastApplied(a.ctx, a.cfg.Settings, a.pipeline)
	if err != nil {
		a.t.Fatalf("last applied: %v", err)
	}
	if la.Sequence != seq {
		a.t.Errorf("last applied after apply %d (%s): %d", seq, what, la.Sequence)
	}
	if r, err := a.c.Apply(a.ctx, a.cfg.Settings, a.pipeline, seq, items); err != nil || !r.Skipped {
		a.t.Errorf("apply %d (%s) again: skipped %v, error %v; a replay must be skipped", seq, what, r.GetSkipped(), err)
	}
}

// applyRange applies entries first..last in one apply (a destination that coalesces).
func (a *applier) applyRange(first, last uint64, what string, items ...client.ApplyItem) {
	a.t.Helper()
	r, err := a.c.ApplyRange(a.ctx, a.cfg.Settings, a.pipeline, first, last, slices.Values(items))
	if err != nil {
		a.t.Fatalf("apply %d..%d (%s): %v", first, last, what, err)
	}
	if r.Skipped {
		a.t.Errorf("apply %d..%d (%s): skipped, but the destination never held it", first, last, what)
	}
}

// A destination announcing truncate applies a truncate item between rows of the same entry, and in an entry
// of its own, in one commit with the rows around it: rows before it are gone, rows after it stay.
func checkTruncate(ctx context.Context, t *testing.T, c *client.Client, cfg Config, caps *pluginv2.CapabilitiesResponse) {
	a := newApplier(ctx, t, c, cfg, caps, "truncate")
	const stream = "conformance_truncate"
	st, ins := sampleBatchOf(t, stream, []change.Op{change.OpInsert, change.OpInsert, change.OpInsert}, []int64{1, 2, 3})
	_, four := sampleBatchOf(t, stream, []change.Op{change.OpInsert}, []int64{4})
	_, five := sampleBatchOf(t, stream, []change.Op{change.OpInsert}, []int64{5})
	trunc := client.ApplyItem{Truncate: stream}
	a.apply(1, "inserts, a truncate, an insert", client.ApplyItem{Schema: st}, client.ApplyItem{Batch: &ins}, trunc, client.ApplyItem{Batch: &four})
	a.holds(stream, "inserting 1, 2, 3, truncating and inserting 4 in one entry", 4)
	a.apply(2, "a truncate alone", trunc)
	a.holds(stream, "a truncate in an entry of its own")
	a.apply(3, "an insert after a truncate", client.ApplyItem{Batch: &five})
	a.holds(stream, "inserting 5 after the truncate", 5)
	if caps.Coalesce && caps.ExactlyOnce {
		a.applyRange(4, 5, "a range with a truncate inside", client.ApplyItem{Entry: 4}, client.ApplyItem{Batch: &ins},
			client.ApplyItem{Entry: 5}, trunc, client.ApplyItem{Batch: &four})
		a.holds(stream, "a range of entries 4 (inserting 1, 2, 3) and 5 (truncating, inserting 4)", 4)
	}
}

// A destination announcing resnapshot applies begin and end marks in entries of their own and around rows,
// with the copy spread over several applies: at the end it removes the rows the copy did not send.
func checkResnapshot(ctx context.Context, t *testing.T, c *client.Client, cfg Config, caps *pluginv2.CapabilitiesResponse) {
	a := newApplier(ctx, t, c, cfg, caps, "resnapshot")
	const stream = "conformance_resnapshot"
	st, ins := sampleBatchOf(t, stream, []change.Op{change.OpInsert, change.OpInsert, change.OpInsert}, []int64{1, 2, 3})
	_, reads := sampleBatchOf(t, stream, []change.Op{change.OpRead, change.OpRead}, []int64{1, 3})
	_, readOne := sampleBatchOf(t, stream, []change.Op{change.OpRead}, []int64{1})
	_, upd := sampleBatchOf(t, stream, []change.Op{change.OpUpdate}, []int64{1})
	begin := client.ApplyItem{Resnapshot: &pluginv2.ResnapshotMark{Stream: stream}}
	end := client.ApplyItem{Resnapshot: &pluginv2.ResnapshotMark{Stream: stream, End: true}}
	a.apply(1, "inserts", client.ApplyItem{Schema: st}, client.ApplyItem{Batch: &ins})
	a.apply(2, "a begin mark and snapshot reads", begin, client.ApplyItem{Batch: &reads})
	a.holds(stream, "a begin mark: nothing is removed before the end", 1, 2, 3)
	a.apply(3, "a change during the copy", client.ApplyItem{Batch: &upd})
	a.apply(4, "an end mark", end)
	a.holds(stream, "a copy of 1 and 3 over three entries", 1, 3)
	a.apply(5, "a whole copy in one entry", begin, client.ApplyItem{Batch: &readOne}, end)
	a.holds(stream, "a copy of 1 alone in one entry", 1)
	if caps.Coalesce && caps.ExactlyOnce {
		a.applyRange(6, 7, "a copy across a range", client.ApplyItem{Entry: 6}, client.ApplyItem{Batch: &ins}, begin,
			client.ApplyItem{Batch: &reads}, client.ApplyItem{Entry: 7}, client.ApplyItem{Batch: &upd}, end)
		a.holds(stream, "a range inserting 1, 2, 3 and copying 1 and 3", 1, 3)
	}
}

// knownTypes are the names arrow.DataType.Name() gives, which is what the engine matches unsupported types
// against: a name outside them (a typo, "DECIMAL256", "string") would never match, and the engine would send
// the destination the very type it declared it cannot hold.
var knownTypes = func() []string {
	var names []string
	for _, dt := range []arrow.DataType{
		arrow.Null, arrow.FixedWidthTypes.Boolean,
		arrow.PrimitiveTypes.Int8, arrow.PrimitiveTypes.Int16, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64,
		arrow.PrimitiveTypes.Uint8, arrow.PrimitiveTypes.Uint16, arrow.PrimitiveTypes.Uint32, arrow.PrimitiveTypes.Uint64,
		arrow.FixedWidthTypes.Float16, arrow.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float64,
		arrow.BinaryTypes.String, arrow.BinaryTypes.LargeString, arrow.BinaryTypes.StringView,
		arrow.BinaryTypes.Binary, arrow.BinaryTypes.LargeBinary, arrow.BinaryTypes.BinaryView, &arrow.FixedSizeBinaryType{ByteWidth: 1},
		arrow.FixedWidthTypes.Date32, arrow.FixedWidthTypes.Date64, arrow.FixedWidthTypes.Time32s, arrow.FixedWidthTypes.Time64us,
		arrow.FixedWidthTypes.Timestamp_us, arrow.FixedWidthTypes.Duration_us,
		arrow.FixedWidthTypes.MonthInterval, arrow.FixedWidthTypes.DayTimeInterval, arrow.FixedWidthTypes.MonthDayNanoInterval,
		&arrow.Decimal32Type{Precision: 9}, &arrow.Decimal64Type{Precision: 18}, &arrow.Decimal128Type{Precision: 38}, &arrow.Decimal256Type{Precision: 76},
		arrow.ListOf(arrow.Null), arrow.LargeListOf(arrow.Null), arrow.FixedSizeListOf(1, arrow.Null),
		arrow.ListViewOf(arrow.Null), arrow.LargeListViewOf(arrow.Null), arrow.StructOf(), arrow.MapOf(arrow.BinaryTypes.String, arrow.Null),
		&arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String},
		arrow.SparseUnionOf(nil, nil), arrow.DenseUnionOf(nil, nil),
		arrow.RunEndEncodedOf(arrow.PrimitiveTypes.Int32, arrow.Null),
	} {
		names = append(names, dt.Name())
	}
	return names
}()

// A destination's unsupported types must be names the engine can match.
func checkTypeLimits(t *testing.T, unsupported []string) {
	for _, err := range typeLimitErrors(unsupported) {
		t.Errorf("capabilities: %v", err)
	}
}

func typeLimitErrors(unsupported []string) []error {
	var errs []error
	for _, name := range unsupported {
		if !slices.Contains(knownTypes, name) {
			errs = append(errs, fmt.Errorf("unsupported type %q is not an Arrow type name (arrow.DataType.Name(), e.g. %q): the engine would never match it; known: %v",
				name, (&arrow.Decimal256Type{}).Name(), knownTypes))
		}
	}
	return errs
}

// A destination's rows, read back after inserts, updates and deletes in separate entries and within one, are
// the state the changes lead to: the last change of a key wins, a delete removes the row.
func checkUpdatesDeletes(ctx context.Context, t *testing.T, c *client.Client, cfg Config, caps *pluginv2.CapabilitiesResponse) {
	a := newApplier(ctx, t, c, cfg, caps, "updates")
	const stream = "conformance_updates"
	st, ins := sampleBatchOf(t, stream, []change.Op{change.OpInsert, change.OpInsert, change.OpInsert, change.OpInsert}, []int64{1, 2, 3, 4})
	_, upd := sampleBatchOf(t, stream, []change.Op{change.OpUpdate, change.OpDelete, change.OpUpdate}, []int64{1, 2, 3})
	// Within one entry: 4 is updated, then deleted; 5 is inserted, then updated; 3 is deleted, then inserted again.
	_, mixed := sampleBatchOf(t, stream, []change.Op{change.OpUpdate, change.OpDelete, change.OpInsert, change.OpUpdate, change.OpDelete, change.OpInsert},
		[]int64{4, 4, 5, 5, 3, 3})
	name := func(id int64, op change.Op) map[string]string {
		return map[string]string{"name": fmt.Sprintf("name-%d-%s", id, op)}
	}
	a.apply(1, "inserts", client.ApplyItem{Schema: st}, client.ApplyItem{Batch: &ins})
	a.holdsValues(stream, "inserting 1, 2, 3, 4", map[string]map[string]string{
		"1": name(1, change.OpInsert), "2": name(2, change.OpInsert), "3": name(3, change.OpInsert), "4": name(4, change.OpInsert)})
	a.apply(2, "updates and a delete", client.ApplyItem{Batch: &upd})
	a.holdsValues(stream, "updating 1 and 3, deleting 2", map[string]map[string]string{
		"1": name(1, change.OpUpdate), "3": name(3, change.OpUpdate), "4": name(4, change.OpInsert)})
	a.apply(3, "several changes of a key in one entry", client.ApplyItem{Batch: &mixed})
	a.holdsValues(stream, "an entry that deletes 4, inserts and updates 5, deletes and inserts 3", map[string]map[string]string{
		"1": name(1, change.OpUpdate), "3": name(3, change.OpInsert), "5": name(5, change.OpUpdate)})
}

// A destination announcing schema evolution adds a column a schema change brings: rows written after it carry
// the column's values, rows written before it read back with the column null, and an update fills it.
func checkAddedColumn(ctx context.Context, t *testing.T, c *client.Client, cfg Config, caps *pluginv2.CapabilitiesResponse) {
	a := newApplier(ctx, t, c, cfg, caps, "columns")
	const stream = "conformance_columns"
	st, ins := sampleBatchOf(t, stream, []change.Op{change.OpInsert, change.OpInsert}, []int64{1, 2})
	wide, rows := wideBatch(t, stream, []change.Op{change.OpInsert, change.OpUpdate}, []int64{3, 1})
	a.apply(1, "inserts", client.ApplyItem{Schema: st}, client.ApplyItem{Batch: &ins})
	a.apply(2, "a schema change adding a column, and rows using it", client.ApplyItem{Schema: wide}, client.ApplyItem{Batch: &rows})
	a.holdsValues(stream, "adding column extra, inserting 3 and updating 1 with it", map[string]map[string]string{
		"1": {"name": fmt.Sprintf("name-1-%s", change.OpUpdate), "extra": "extra-1"},
		"2": {"name": fmt.Sprintf("name-2-%s", change.OpInsert), "extra": ""},
		"3": {"name": fmt.Sprintf("name-3-%s", change.OpInsert), "extra": "extra-3"},
	})
}

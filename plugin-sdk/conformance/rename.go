package conformance

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
)

// CheckRenamedStream checks that a destination carries a stream the source renamed (RENAME TABLE a TO b, both
// captured): the source goes on under the new stream name, whose schema carries change.RenamedFromTableMeta.
// Rows go to stream a; then, in the next entry, stream b comes with the marker and changes of the rows written
// under a; then, in one entry, rows of b and a rename of b to c. Afterwards c holds every row, with each change,
// and a and b hold none. The marked schema applied again under a new sequence number (b exists by then) changes
// nothing, and a replay of a sequence number is skipped (exactly-once destinations).
//
// Run calls it when the destination declares Capabilities.RenamedStream (the engine refuses a rename before it
// reaches a destination that does not); a destination's tests may call it again with other settings. It
// fails for a destination that does not declare the capability. It needs Config.Rows to see what the
// destination holds; without it only the applies are checked.
func CheckRenamedStream(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 60 * time.Second
	}
	c := Start(t, cfg.Binary, cfg.Env)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	caps, err := c.Capabilities(ctx, cfg.Settings)
	if err != nil {
		t.Fatalf("capabilities: %v", err)
	}
	checkRenamedStream(ctx, t, c, cfg, caps)
}

// checkRenamedStream is CheckRenamedStream through a running plugin: Run's, since a destination whose store
// takes one writer (a DuckDB file) refuses a second process on the same settings.
func checkRenamedStream(ctx context.Context, t *testing.T, c *client.Client, cfg Config, caps *pluginv2.CapabilitiesResponse) {
	t.Helper()
	if !caps.RenamedStream {
		t.Fatalf("the destination does not declare capability renamed_stream (serve.Capabilities.RenamedStream): the engine stops a pipeline at a table rename rather than send it here; declare it once the destination follows renamed streams")
	}
	a := newApplier(ctx, t, c, cfg, caps, "rename")
	n := time.Now().UnixNano() % 1_000_000_000
	sa, sb, sc := fmt.Sprintf("shop.ren_a_%d", n), fmt.Sprintf("shop.ren_b_%d", n), fmt.Sprintf("shop.ren_c_%d", n)
	ops := func(op change.Op, k int) []change.Op {
		out := make([]change.Op, k)
		for i := range out {
			out[i] = op
		}
		return out
	}
	stA, ins := sampleBatchOf(t, sa, ops(change.OpInsert, 3), []int64{1, 2, 3})
	_, updA := sampleBatchOf(t, sa, ops(change.OpUpdate, 1), []int64{1})
	marked := change.MarkRenamedTable(sampleSchema(), sa)
	stB, insB := sampleBatchWith(t, sb, marked, ops(change.OpInsert, 1), []int64{4})
	_, delB := sampleBatchWith(t, sb, marked, ops(change.OpDelete, 1), []int64{2})
	_, updB := sampleBatchWith(t, sb, marked, ops(change.OpUpdate, 1), []int64{4})
	stC, insC := sampleBatchWith(t, sc, change.MarkRenamedTable(sampleSchema(), sb), ops(change.OpInsert, 1), []int64{5})
	name := func(id int64, op change.Op) string { return fmt.Sprintf("name-%d-%s", id, op) }

	a.apply(1, "rows of stream a", client.ApplyItem{Schema: stA}, client.ApplyItem{Batch: &ins})
	a.holds(sa, "inserting 1, 2, 3 into a", 1, 2, 3)
	afterB := map[string]map[string]string{
		"1": {"name": name(1, change.OpUpdate)}, "3": {"name": name(3, change.OpInsert)}, "4": {"name": name(4, change.OpInsert)},
	}
	renameB := []client.ApplyItem{{Schema: stB}, {Batch: &insB}, {Batch: &delB}}
	if caps.Coalesce && caps.ExactlyOnce {
		items := append([]client.ApplyItem{{Entry: 2}, {Batch: &updA}, {Entry: 3}}, renameB...)
		a.applyRange(2, 3, "a change of a, then a renamed to b with changes", items...)
		if r, err := c.ApplyRange(ctx, cfg.Settings, a.pipeline, 2, 3, slices.Values(items)); err != nil || !r.Skipped {
			t.Errorf("apply 2..3 again: skipped %v, error %v; a replay must be skipped", r.GetSkipped(), err)
		}
	} else {
		a.apply(2, "a change of a", client.ApplyItem{Batch: &updA})
		a.apply(3, "a renamed to b, with changes", renameB...)
	}
	a.holdsValues(sb, "a renamed to b", afterB)
	a.holds(sa, "a renamed to b")
	a.apply(4, "the renamed schema and its changes again (b exists)", renameB...)
	a.holdsValues(sb, "the renamed schema applied again", afterB)
	a.holds(sa, "the renamed schema applied again")

	a.apply(5, "rows of b and b renamed to c in one entry", client.ApplyItem{Batch: &updB}, client.ApplyItem{Schema: stC}, client.ApplyItem{Batch: &insC})
	a.holdsValues(sc, "b renamed to c", map[string]map[string]string{
		"1": {"name": name(1, change.OpUpdate)}, "3": {"name": name(3, change.OpInsert)}, "4": {"name": name(4, change.OpUpdate)}, "5": {"name": name(5, change.OpInsert)},
	})
	a.holds(sb, "b renamed to c")
	a.holds(sa, "b renamed to c")
}

package source

import (
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugins/postgres/config"
)

// TestPubWatchCompare: which differences between two reads of the publication stop the stream, and what the
// message names. The catalog side (that the rows change as assumed) is TestPublicationChangedMidStream's.
func TestPubWatchCompare(t *testing.T) {
	a, b := config.TableName{Schema: "public", Name: "a"}, config.TableName{Schema: "public", Name: "b"}
	intact := func() pubRow {
		return pubRow{exists: true, version: "16384/700", walNow: "0/200", ins: true, upd: true, del: true, trunc: true,
			members: map[string]string{"public.a": "table row 1", "public.b": "table row 2"}}
	}
	with := func(f func(*pubRow)) pubRow { r := intact(); f(&r); return r }
	for _, tc := range []struct {
		name       string
		truncate   string
		appendOnly bool
		seen       bool
		prev, cur  pubRow
		want       string // in the error; "" for none
	}{
		{name: "unchanged", seen: true, prev: intact(), cur: intact()},
		{name: "first check, intact", cur: intact()},
		{name: "dropped", seen: true, prev: intact(), cur: pubRow{walNow: "0/300"}, want: "was dropped"},
		{name: "dropped before resuming", cur: pubRow{walNow: "0/300"}, want: "as this Read resumed"},
		{name: "publish insert", seen: true, prev: intact(), cur: with(func(r *pubRow) { r.upd, r.del, r.trunc, r.version = false, false, false, "16384/701" }),
			want: "no longer publishes update, delete, truncate"},
		{name: "truncate off, truncate: ignore, never published", truncate: config.TruncateIgnore, prev: with(func(r *pubRow) { r.trunc = false }), seen: true,
			cur: with(func(r *pubRow) { r.trunc = false })},
		{name: "truncate narrowed, truncate: ignore", truncate: config.TruncateIgnore, seen: true, prev: intact(),
			cur: with(func(r *pubRow) { r.trunc, r.version = false, "16384/701" }), want: "no longer publishes truncate"},
		{name: "append publication publishes inserts only", appendOnly: true, seen: true, prev: with(func(r *pubRow) { r.upd, r.del = false, false }),
			cur: with(func(r *pubRow) { r.upd, r.del = false, false })},
		{name: "table dropped from it", seen: true, prev: intact(), cur: with(func(r *pubRow) { r.members["public.a"] = "" }), want: "no longer includes table public.a"},
		{name: "table missing at start", cur: with(func(r *pubRow) { r.members["public.b"] = "" }), want: "no longer includes table public.b"},
		{name: "table dropped and added again", seen: true, prev: intact(), cur: with(func(r *pubRow) { r.members["public.a"] = "table row 9" }),
			want: "lost and regained table public.a"},
		{name: "moved to the schema", seen: true, prev: intact(), cur: with(func(r *pubRow) { r.members["public.b"] = "schema row 3" }),
			want: "lost and regained table public.b"},
		{name: "row rewritten, options as before", seen: true, prev: intact(), cur: with(func(r *pubRow) { r.version = "16384/705" }), want: "was altered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &pubWatch{r: &reader{cfg: config.Settings{Truncate: tc.truncate}}, at: 0x100}
			p := watchedPub{name: "pub", appendOnly: tc.appendOnly, tables: []config.TableName{a, b}}
			err := w.compare(p, tc.prev, tc.seen, tc.cur, 0x180, 0x150)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("stopped: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("not stopped, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing after LSN 0/150 was checkpointed") {
				t.Errorf("error %q: want %q and the last checkpoint", err, tc.want)
			}
			if fault.ClassOf(err) != fault.Resnapshot || !strings.Contains(fault.FixOf(err), "skippr teardown") {
				t.Errorf("class %v, fix %q: want a re-snapshot with the way to one", fault.ClassOf(err), fault.FixOf(err))
			}
		})
	}
}

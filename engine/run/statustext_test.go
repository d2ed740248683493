package run

import (
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/engine/pipeline"
)

// A destination that waits between applies says so below the table, with where the wait comes from; one that
// applies at once, or cannot coalesce, says nothing.
func TestStatusesApplyInterval(t *testing.T) {
	for _, tc := range []struct {
		name  string
		apply *pipeline.ApplyStatus
		want  string // "" = no line
	}{
		{"plugin proposal", &pipeline.ApplyStatus{Coalesce: true, MaxIntervalMS: 60000, FromPlugin: []string{"max_interval"}},
			"p: destination wh applies at most every 1m0s (apply.max_interval, proposed by its plugin)"},
		{"from config", &pipeline.ApplyStatus{Coalesce: true, MaxIntervalMS: 400},
			"p: destination wh applies at most every 400ms (apply.max_interval, set in the config)"},
		{"no wait", &pipeline.ApplyStatus{Coalesce: true}, ""},
		{"one entry per apply", &pipeline.ApplyStatus{MaxIntervalMS: 60000}, ""},
		{"no apply status", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := PipelineStatus{Pipeline: "p", Running: true, State: "running",
				Live: &pipeline.Status{Destinations: []pipeline.DestinationStatus{{Name: "wh", Apply: tc.apply}}}}
			var b strings.Builder
			if err := (Statuses{ps}).WriteText(&b); err != nil {
				t.Fatal(err)
			}
			got := b.String()
			if tc.want == "" {
				if strings.Contains(got, "applies at most") {
					t.Fatalf("unexpected apply line:\n%s", got)
				}
				return
			}
			if !strings.Contains(got, tc.want+"\n") {
				t.Fatalf("want line %q in:\n%s", tc.want, got)
			}
		})
	}
}

// The table's columns, and the lines below it: re-snapshots, waits and faults with their fix.
func TestStatusesWriteText(t *testing.T) {
	since := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	stopped := PipelineStatus{Pipeline: "idle", State: "stopped"}
	stopped.WAL.Error = "no such bucket"
	failed := PipelineStatus{Pipeline: "bad", State: pipeline.StateFailed,
		Fault: &pipeline.Fault{Message: "crc mismatch", Class: "data", Fix: "re-snapshot", Since: since, Entry: 2, Segment: "segments/2"}}
	failed.WAL.Entries, failed.WAL.Bytes, failed.WAL.LastCommitted, failed.WAL.ReclaimedThrough = 3, 300, 4, 1
	live := PipelineStatus{Pipeline: "live", State: "running", Running: true, Live: &pipeline.Status{
		Backpressure: true,
		Destinations: []pipeline.DestinationStatus{{Name: "a", LastApplied: 7}, {Name: "b", LastApplied: 6}},
		Source:       pipeline.SourceStatus{RowsDone: 50, RowsTotal: 200, LagMS: 1500, Waiting: "a free slot", WaitingSeconds: 90},
		Resnapshot: map[string]pipeline.ResnapshotStatus{
			"t2": {State: "requested", Since: since},
			"t1": {State: "copying", Since: since, Rows: 10, Total: 40},
			"t3": {State: "refused", Since: since, Rows: 5, Reason: "no key"},
		},
	}, Fault: &pipeline.Fault{Message: "timeout", Class: "transient", Since: since, Attempt: 2}}
	for _, tc := range []struct {
		name string
		in   Statuses
		want string
	}{
		{"stopped", Statuses{stopped},
			"PIPELINE  STATE                          WAL ENTRIES  WAL BYTES  COMMITTED  RECLAIMED  APPLIED  SOURCE  LAG\n" +
				"idle      stopped (WAL: no such bucket)  0            0          0          0          -        -       -\n"},
		{"failed", Statuses{failed},
			"PIPELINE  STATE   WAL ENTRIES  WAL BYTES  COMMITTED  RECLAIMED  APPLIED  SOURCE  LAG\n" +
				"bad       failed  3            300        4          1          -        -       -\n" +
				"\nbad: failed: crc mismatch (since 2026-03-04T05:06:07Z)\n  class: data\n  wal entry: 2 (segment segments/2)\n  fix: re-snapshot\n"},
		{"live", Statuses{live},
			"PIPELINE  STATE                   WAL ENTRIES  WAL BYTES  COMMITTED  RECLAIMED  APPLIED  SOURCE          LAG\n" +
				"live      running (backpressure)  0            0          0          0          a=7,b=6  50/200 (25.0%)  1.5s\n" +
				"live: re-snapshot of t1: copying since 2026-03-04T05:06:07Z, 10/40 rows (25.0%)\n" +
				"live: re-snapshot of t2: requested since 2026-03-04T05:06:07Z\n" +
				"live: re-snapshot of t3: refused since 2026-03-04T05:06:07Z, 5 rows: no key\n" +
				"live: source waiting (1m30s): a free slot\n" +
				"\nlive: running: timeout (since 2026-03-04T05:06:07Z)\n  class: transient\n  attempt: 2\n"},
		{"tables", Statuses{{Pipeline: "pat", State: "running", Running: true, Live: &pipeline.Status{Source: pipeline.SourceStatus{Tables: []pipeline.CapturedTable{
			{Name: "public.t", Via: "name"}, {Name: "shop.b", Via: "pattern"}, {Name: "shop.a", Via: "pattern", Released: true}}}}}},
			"PIPELINE  STATE    WAL ENTRIES  WAL BYTES  COMMITTED  RECLAIMED  APPLIED  SOURCE  LAG\n" +
				"pat       running  0            0          0          0                   -       0s\n" +
				"pat: captures 2 tables: public.t, shop.b (pattern)\n" +
				"pat: released (dropped at the source, destination tables kept): shop.a\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := tc.in.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Fatalf("got:\n%s\nwant:\n%s", b.String(), tc.want)
			}
		})
	}
	if got := (Statuses{stopped, failed, live}).Failed(); len(got) != 1 || got[0] != "bad" {
		t.Fatalf("Failed() = %v, want [bad]", got)
	}
}

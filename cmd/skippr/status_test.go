package main

import (
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/run"
)

// TestPrintStatusApplyInterval: a destination that waits between applies says so below the table, with where
// the wait comes from; one that applies at once, or cannot coalesce, says nothing.
func TestPrintStatusApplyInterval(t *testing.T) {
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
			ps := run.PipelineStatus{Pipeline: "p", Running: true, State: "running",
				Live: &pipeline.Status{Destinations: []pipeline.DestinationStatus{{Name: "wh", Apply: tc.apply}}}}
			var b strings.Builder
			if err := printStatus(&b, []run.PipelineStatus{ps}); err != nil {
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

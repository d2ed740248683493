package pipeline

import (
	"fmt"
	"testing"
)

// TestStatusKeepsCapturedTables: the captured_table gauges of a source's checkpoint become the status's tables, in
// their order (a 0 marks a table released); a checkpoint without them (a snapshot chunk) keeps the last list.
func TestStatusKeepsCapturedTables(t *testing.T) {
	r := &runner{cfg: Config{Observer: noObserver{}}}
	gauge := func(table, via string, v float64) SourceMetric {
		return SourceMetric{Name: "captured_table", Value: v, Labels: map[string]string{"table": table, "via": via}}
	}
	for _, tc := range []struct {
		name    string
		metrics []SourceMetric
		want    string
	}{
		{"first", []SourceMetric{gauge("public.t", "name", 1), {Name: "other", Value: 3}, gauge("shop.a", "pattern", 1)},
			"[{public.t name false} {shop.a pattern false}]"},
		{"none: kept", []SourceMetric{{Name: "snapshot_rows_done", Value: 3}}, "[{public.t name false} {shop.a pattern false}]"},
		{"released", []SourceMetric{gauge("public.t", "name", 1), gauge("shop.b", "pattern", 1), gauge("shop.a", "pattern", 0)},
			"[{public.t name false} {shop.b pattern false} {shop.a pattern true}]"},
	} {
		r.sourceProgress(&SourceCheckpoint{Position: []byte("x"), Metrics: tc.metrics})
		if got := fmt.Sprint(r.status.Source.Tables); got != tc.want {
			t.Fatalf("%s: tables %s, want %s", tc.name, got, tc.want)
		}
	}
}

package pipeline

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		name     string
		statuses []Status
		elapsed  time.Duration
		rows     int64
		rate     float64
		text     []string // lines the text form holds
	}{
		{
			name: "two pipelines, streams by rows",
			statuses: []Status{
				{Pipeline: "shop", RowsCommitted: 51000, RowsApplied: 51000, StreamRows: map[string]int64{"public.qs_customers": 1000, "public.qs_orders": 50000}},
				{Pipeline: "audit", RowsCommitted: 9000, StreamRows: map[string]int64{"events": 9000}},
			},
			elapsed: 2 * time.Second,
			rows:    60000,
			rate:    30000,
			text: []string{
				"pipeline               stream   rows",
				"    shop     public.qs_orders  50000",
				"    shop  public.qs_customers   1000",
				"    shop                (all)  51000",
				"   audit               events   9000",
				"60000 rows in 2s (30000 rows/s)",
			},
		},
		{
			name:     "nothing new",
			statuses: []Status{{Pipeline: "shop"}},
			elapsed:  500 * time.Millisecond,
			text:     []string{"shop   (all)     0", "0 rows in 500ms (0 rows/s)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Summarize(tt.statuses, tt.elapsed)
			if s.Rows != tt.rows || s.RowsPerSec != tt.rate || len(s.Pipelines) != len(tt.statuses) {
				t.Errorf("Summarize = %+v; want %d rows, %v rows/s", s, tt.rows, tt.rate)
			}
			var b bytes.Buffer
			if err := s.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			for _, l := range tt.text {
				if !strings.Contains(b.String(), l) {
					t.Errorf("text lacks %q:\n%s", l, b.String())
				}
			}
		})
	}
}

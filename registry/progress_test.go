package registry

import (
	"bytes"
	"strings"
	"testing"
)

// Off a terminal the bar is a line per 10% with no carriage return; on one it redraws in place.
func TestProgressLinesOffTerminal(t *testing.T) {
	tests := []struct {
		name      string
		tty       bool
		total     int64
		chunks    int // the download arrives in this many equal writes
		wantLines int
		wantCR    bool
	}{
		{"log file, 100 small writes", false, 1000, 100, 10, false},
		{"log file, one write", false, 1000, 1, 1, false},
		{"log file, 3 writes", false, 999, 3, 3, false},
		{"log file, unknown size", false, -1, 10, 1, false},
		{"terminal", true, 1000, 100, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			p := newProgress(&out, tt.tty, "echo 1.2.3", tt.total)
			size := int64(1000)
			if tt.total > 0 {
				size = tt.total
			}
			chunk := make([]byte, size/int64(tt.chunks))
			for range tt.chunks {
				p.Write(chunk)
			}
			p.finish()
			s := out.String()
			if got := strings.Count(s, "\n"); got != tt.wantLines {
				t.Errorf("%d lines, want %d:\n%s", got, tt.wantLines, s)
			}
			if strings.Contains(s, "\r") != tt.wantCR {
				t.Errorf("carriage returns = %v, want %v: %q", !tt.wantCR, tt.wantCR, s)
			}
			if !strings.Contains(s, "100%") {
				t.Errorf("no final 100%%: %q", s)
			}
		})
	}
}

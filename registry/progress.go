package registry

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress draws a one-line bar, "name version [=====>    ]  1.2/3.4 MiB  35%",
// redrawn with \r at most every 100 ms and at the end.
type progress struct {
	w     io.Writer
	label string
	total int64
	done  int64
	last  time.Time
}

func newProgress(w io.Writer, label string, total int64) *progress {
	if w == nil {
		return nil
	}
	return &progress{w: w, label: label, total: total}
}

func (p *progress) Write(b []byte) (int, error) {
	if p == nil {
		return len(b), nil
	}
	p.done += int64(len(b))
	if now := time.Now(); now.Sub(p.last) >= 100*time.Millisecond {
		p.last = now
		p.draw()
	}
	return len(b), nil
}

// finish draws the final state and ends the line.
func (p *progress) finish() {
	if p == nil {
		return
	}
	p.draw()
	fmt.Fprintln(p.w)
}

func (p *progress) draw() {
	const width = 30
	pct := 100
	if p.total > 0 {
		pct = int(p.done * 100 / p.total)
	}
	fill := min(width, pct*width/100)
	bar := strings.Repeat("=", fill)
	if fill < width {
		bar += ">" + strings.Repeat(" ", width-fill-1)
	}
	fmt.Fprintf(p.w, "\r%s [%s] %s / %s %3d%%", p.label, bar, mib(p.done), mib(p.total), pct)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

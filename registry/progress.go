package registry

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress reports a download. On a terminal it draws one line,
// "name version [=====>    ]  1.2/3.4 MiB  35%", redrawn with \r at most every
// 100 ms and at the end. Anywhere else (a log file, a pipe) carriage returns
// would pile up in one huge line, so it writes a plain line at every 10%
// instead.
type progress struct {
	w      io.Writer
	tty    bool
	label  string
	total  int64
	done   int64
	last   time.Time
	lastPc int // the last 10% step written as a line; -1 before the first
}

func newProgress(w io.Writer, tty bool, label string, total int64) *progress {
	if w == nil {
		return nil
	}
	return &progress{w: w, tty: tty, label: label, total: total, lastPc: -1}
}

func (p *progress) Write(b []byte) (int, error) {
	if p == nil {
		return len(b), nil
	}
	p.done += int64(len(b))
	if !p.tty {
		if p.total > 0 {
			p.line(false)
		}
		return len(b), nil
	}
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
	if !p.tty {
		p.line(true)
		return
	}
	p.draw()
	fmt.Fprintln(p.w)
}

// line writes a line when the download has crossed into a new 10% step (or, at
// the end, when the last step has not been written yet).
func (p *progress) line(final bool) {
	step := 100
	if p.total > 0 {
		step = min(100, int(p.done*100/p.total)/10*10)
	}
	if final {
		step = 100
	}
	if step <= p.lastPc || (step == 0 && !final) {
		return
	}
	p.lastPc = step
	fmt.Fprintf(p.w, "%s %s / %s %3d%%\n", p.label, mib(p.done), mib(p.total), step)
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

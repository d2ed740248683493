package run

import (
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/engine/pipeline"
)

// Start phases, in the order a run passes them; each is logged as "<phase>_ms".
const (
	phaseRun      = "run"       // the pipeline's run began: the command's own start (config, plugin host) is behind
	phasePlugins  = "plugins"   // every plugin of the pipeline started: resolved, verified, exec'd, handshaken, spec read
	phaseChecks   = "checks"    // the source's and destinations' checks and the destinations' capabilities done
	phaseWAL      = "wal"       // the WAL opened and its lease acquired
	phaseFirstRow = "first_row" // the source's first batch reached the engine (its own line, "first row read")
)

// startClock times a pipeline run's start for the log. `skippr sync --once` is the start of an hourly job, and
// the time from the command to the source's first row is what such a job waits for (issue #31, BENCHMARKS.md
// "Start of an hourly job"): the "pipeline started" line says where that time went, as milliseconds since
// origin at the end of each phase, and the "first row read" line ends it. The origin is the process's start
// when the Runner knows it (Runner.Started), else the run's own start (a fleet takeover, a retry has its own).
type startClock struct {
	origin time.Time
	marks  []any // "<phase>_ms", ms, in the order passed
}

func newStartClock(origin time.Time) *startClock {
	if origin.IsZero() {
		origin = time.Now()
	}
	return &startClock{origin: origin}
}

// mark ends phase now.
func (c *startClock) mark(phase string) {
	c.marks = append(c.marks, phase+"_ms", c.since(time.Now()))
}

// since is t in milliseconds since the origin, to 0.1 ms (a stamped plugin resolves in well under 1 ms).
func (c *startClock) since(t time.Time) float64 {
	return math.Round(float64(t.Sub(c.origin))/float64(100*time.Microsecond)) / 10
}

// startedAttrs are the "pipeline started" line's timing: the phases passed, then each plugin's steps as
// plugin.<connection>.{resolve,exec,spec}_ms (durations; the plugins start at once, StartAll).
func (c *startClock) startedAttrs(plugins []*connector.Plugin) []any {
	attrs := append([]any(nil), c.marks...)
	var each []any
	for _, p := range plugins {
		each = append(each, slog.Group(p.Conn.Name, "resolve_ms", msOf(p.Took.Resolve), "exec_ms", msOf(p.Took.Exec), "spec_ms", msOf(p.Took.Spec)))
	}
	if len(each) > 0 {
		attrs = append(attrs, slog.Group("plugin", each...))
	}
	return attrs
}

func msOf(d time.Duration) float64 {
	return math.Round(float64(d)/float64(100*time.Microsecond)) / 10
}

// firstRead is the pipeline's observer with the run's first batch logged ("first row read", first_row_ms
// since the clock's origin): the end of the start. One log line per run, from the commit loop, which an
// Observer must not hold up; a write to the log is what every other line costs too.
type firstRead struct {
	pipeline.Observer
	clock *startClock
	log   *slog.Logger
	once  sync.Once
}

func (f *firstRead) Read(stream string, rows, bytes int64) {
	f.once.Do(func() {
		f.log.Info("first row read", "stream", stream, "rows", rows, phaseFirstRow+"_ms", f.clock.since(time.Now()))
	})
	f.Observer.Read(stream, rows, bytes)
}

// Package metrics exposes what `skippr sync` does to Prometheus, and whether it is healthy.
//
// Each process has its own registry (never prometheus' global one), so tests and several runs in one process
// do not share counters. Figures arrive through pipeline.Observer (reads, commits, applies, checkpoints, as
// they happen), through the pipeline's in-memory Status (backpressure), and from the restart supervisor (state,
// restarts, the last error's fault class): nothing is read back from status files. WAL depth is kept here from
// the observer calls rather than from Status, which is published at most once a second and so can miss the
// last commit before the pipeline goes quiet.
//
// Sources report their own gauges on checkpoints (a replication slot's retained WAL, snapshot progress per
// table); they appear as skippr_source_<name>{pipeline=…} with the source's labels. Such names come from a plugin
// and are checked here: a malformed one is dropped and logged once, never allowed to break a scrape.
//
// HTTP: /metrics (Prometheus text format), /healthz (200 while the process serves), /readyz (200 only while
// every pipeline runs; 503 naming the pipelines that do not, and why).
package metrics

import (
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// Pipeline states, the values of skippr_pipeline_state's state label.
const (
	StateStarting   = "starting"
	StateRunning    = "running"
	StateRestarting = "restarting"
	StateFailed     = "failed"
	StateStopped    = "stopped"
)

var states = []string{StateStarting, StateRunning, StateRestarting, StateFailed, StateStopped}

// errorClasses are fault's classes as label values.
var errorClasses = []fault.Class{fault.Unknown, fault.Transient, fault.Config, fault.Data, fault.Resnapshot}

// latencyBuckets span what a WAL commit (an fsync: ms; two S3 PUTs: tens of ms) and an apply (a destination
// transaction: ms to seconds; an Iceberg commit: seconds) take, with a tail for stalls.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Registry holds one process's metrics.
type Registry struct {
	reg *prometheus.Registry
	log *slog.Logger

	rowsRead, bytesRead           *prometheus.CounterVec
	rowsCommitted, bytesCommitted *prometheus.CounterVec
	rowsApplied, bytesApplied     *prometheus.CounterVec
	commitSeconds, applySeconds   *prometheus.HistogramVec
	applyEntries                  *prometheus.HistogramVec
	restarts                      *prometheus.CounterVec
	backpressure                  *prometheus.GaugeVec
	lag, sourceDone, sourceTotal  *prometheus.GaugeVec

	mu        sync.Mutex
	pipelines map[string]*Pipeline
	order     []string
	dropped   map[string]bool // malformed source metric names already logged
}

// New makes a registry with the process and Go runtime collectors and skippr's metrics.
func New(log *slog.Logger) *Registry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Registry{reg: prometheus.NewRegistry(), log: log, pipelines: map[string]*Pipeline{}, dropped: map[string]bool{}}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		r.reg.MustRegister(c)
		return c
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
		r.reg.MustRegister(g)
		return g
	}
	histogram := func(name, help string, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets}, labels)
		r.reg.MustRegister(h)
		return h
	}
	r.rowsRead = counter("skippr_rows_read_total", "Rows the source sent (before they are durable).", "pipeline", "stream")
	r.bytesRead = counter("skippr_bytes_read_total", "Arrow IPC bytes the source sent.", "pipeline", "stream")
	r.rowsCommitted = counter("skippr_rows_committed_total", "Rows made durable in the WAL and acknowledged to the source.", "pipeline", "stream")
	r.bytesCommitted = counter("skippr_bytes_committed_total", "Arrow IPC bytes made durable in the WAL.", "pipeline", "stream")
	r.rowsApplied = counter("skippr_rows_applied_total", "Rows a destination committed (replays it had applied before are not counted).", "pipeline", "destination", "stream")
	r.bytesApplied = counter("skippr_bytes_applied_total", "Arrow IPC bytes a destination committed.", "pipeline", "destination", "stream")
	r.commitSeconds = histogram("skippr_commit_duration_seconds", "Time to make a WAL entry durable and acknowledge the source.", "pipeline")
	r.applySeconds = histogram("skippr_apply_duration_seconds", "Time a destination took to commit one apply: a WAL entry, or a coalesced range of them.", "pipeline", "destination")
	// Powers of two up to 1024: a destination that coalesces takes up to its apply limits at once (32 default
	// entries in the default 256 MiB), more when entries are small.
	r.applyEntries = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "skippr_apply_entries",
		Help:    "WAL entries a destination took in one apply (1 unless it coalesces and was behind).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 11)}, []string{"pipeline", "destination"})
	r.reg.MustRegister(r.applyEntries)
	r.restarts = counter("skippr_pipeline_restarts_total", "Times a pipeline failed and was restarted from its last durable point.", "pipeline")
	r.backpressure = gauge("skippr_backpressure", "1 while source reads are paused because the WAL holds too many unapplied bytes.", "pipeline")
	r.lag = gauge("skippr_source_lag_seconds", "Age of the newest change the source read, as the source reports it (0 when caught up).", "pipeline")
	r.sourceDone = gauge("skippr_source_rows_done", "Rows the source has read, as it reports them.", "pipeline")
	r.sourceTotal = gauge("skippr_source_rows_total", "Rows the source expects to read (0 when unknown).", "pipeline")
	r.reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector(), (*collector)(r))
	return r
}

// Gatherer is what the HTTP handler and tests read.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Pipeline returns the figures of the named pipeline, registering it in state "starting".
func (r *Registry) Pipeline(name string) *Pipeline {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pipelines[name]; ok {
		return p
	}
	p := &Pipeline{r: r, name: name, state: StateStarting, wal: map[uint64]walEntry{}, applied: map[string]uint64{}, source: map[string][]sourceSeries{}}
	r.pipelines[name] = p
	r.order = append(r.order, name)
	p.restarts = r.restarts.WithLabelValues(name) // present at 0 from the start, so rate() sees the first restart
	p.commitSeconds = r.commitSeconds.WithLabelValues(name)
	return p
}

// Ready reports whether every pipeline is running; otherwise why not, one pipeline per line.
func (r *Registry) Ready() (bool, string) {
	r.mu.Lock()
	ps := make([]*Pipeline, 0, len(r.order))
	for _, n := range r.order {
		ps = append(ps, r.pipelines[n])
	}
	r.mu.Unlock()
	if len(ps) == 0 {
		return false, "no pipeline started yet"
	}
	var not []string
	for _, p := range ps {
		p.mu.Lock()
		state, reason := p.state, p.reason
		p.mu.Unlock()
		if state == StateRunning {
			continue
		}
		line := fmt.Sprintf("pipeline %s: %s", p.name, state)
		if reason != "" {
			line += ": " + reason
		}
		not = append(not, line)
	}
	if len(not) > 0 {
		return false, strings.Join(not, "\n")
	}
	return true, "ok"
}

// Pipeline is one pipeline's figures. It is the pipeline's Observer and takes its Status and the supervisor's
// state changes.
type Pipeline struct {
	r             *Registry
	name          string
	restarts      prometheus.Counter
	commitSeconds prometheus.Observer

	mu        sync.Mutex
	state     string
	reason    string // why the pipeline is not running (the last error), for /readyz
	lastClass *fault.Class
	wal       map[uint64]walEntry // entries in the log: committed, not yet applied by every destination
	lastSeq   uint64
	applied   map[string]uint64 // by destination
	started   bool              // wal and applied describe the log
	source    map[string][]sourceSeries
	// firstApply is when this run's first apply of new data committed (zero before): the end of a takeover.
	firstApply time.Time
	startedAt  time.Time // when the current run read its log
}

type walEntry struct {
	committed time.Time
	size      int64
}

type sourceSeries struct {
	labels map[string]string
	value  float64
	help   string
}

var _ pipeline.Observer = (*Pipeline)(nil)

// Started implements pipeline.Observer: the pipeline runs.
func (p *Pipeline) Started(inWAL []wal.CommitRecord, applied map[string]uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.state, p.reason, p.started = StateRunning, "", true
	p.firstApply, p.startedAt = time.Time{}, time.Now()
	clear(p.wal)
	p.lastSeq = 0
	for _, e := range inWAL {
		p.wal[e.Seq] = walEntry{committed: e.Time, size: e.Size}
		p.lastSeq = max(p.lastSeq, e.Seq)
	}
	p.applied = maps.Clone(applied)
	for _, a := range applied {
		p.lastSeq = max(p.lastSeq, a)
	}
	// No pruning here: with apply paused nothing is reclaimed, even what a destination applied before.
}

// Read implements pipeline.Observer.
func (p *Pipeline) Read(stream string, rows, bytes int64) {
	p.r.rowsRead.WithLabelValues(p.name, stream).Add(float64(rows))
	p.r.bytesRead.WithLabelValues(p.name, stream).Add(float64(bytes))
}

// Committed implements pipeline.Observer.
func (p *Pipeline) Committed(e pipeline.Entry, took time.Duration) {
	for s, f := range e.Streams {
		p.r.rowsCommitted.WithLabelValues(p.name, s).Add(float64(f.Rows))
		p.r.bytesCommitted.WithLabelValues(p.name, s).Add(float64(f.Bytes))
	}
	p.commitSeconds.Observe(took.Seconds())
	p.mu.Lock()
	p.wal[e.Seq] = walEntry{committed: e.Committed, size: e.Size}
	p.lastSeq = max(p.lastSeq, e.Seq)
	p.mu.Unlock()
}

// Applied implements pipeline.Observer.
func (p *Pipeline) Applied(destination string, e pipeline.Entry, skipped bool, took time.Duration) {
	if !skipped {
		for s, f := range e.Streams {
			p.r.rowsApplied.WithLabelValues(p.name, destination, s).Add(float64(f.Rows))
			p.r.bytesApplied.WithLabelValues(p.name, destination, s).Add(float64(f.Bytes))
		}
	}
	p.r.applySeconds.WithLabelValues(p.name, destination).Observe(took.Seconds())
	p.r.applyEntries.WithLabelValues(p.name, destination).Observe(float64(e.Entries()))
	p.mu.Lock()
	p.applied[destination] = e.Seq
	if !skipped && p.firstApply.IsZero() {
		p.firstApply = time.Now()
	}
	p.prune()
	p.mu.Unlock()
}

// Lag is how far a running pipeline's destinations are behind its WAL.
type Lag struct {
	Committed uint64 // the newest committed WAL sequence
	Applied   uint64 // what every destination applied
	// UnappliedBytes are the bytes of the entries some destination lacks; Oldest is the oldest one's commit
	// time (zero when every destination applied everything).
	UnappliedBytes int64
	Oldest         time.Time
	// Started is when this run read its log; FirstApply when it first applied new data (zero before).
	Started    time.Time
	FirstApply time.Time
}

// Lag reports the pipeline's lag; ok is false until a run has read its log.
func (p *Pipeline) Lag() (l Lag, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started {
		return Lag{}, false
	}
	l = Lag{Committed: p.lastSeq, Applied: p.minApplied(), Started: p.startedAt, FirstApply: p.firstApply}
	for seq, e := range p.wal {
		if seq > l.Applied {
			l.UnappliedBytes += e.size
		}
	}
	// Sequence numbers are consecutive: the oldest entry some destination lacks follows the lowest applied point.
	if e, ok := p.wal[l.Applied+1]; ok {
		l.Oldest = e.committed
	}
	return l, true
}

// prune forgets the entries every destination applied: the pipeline reclaims them right after. Callers hold p.mu.
func (p *Pipeline) prune() {
	lo := p.minApplied()
	for seq := range p.wal {
		if seq <= lo {
			delete(p.wal, seq)
		}
	}
}

// minApplied is what every destination applied (0 without destinations). Callers hold p.mu.
func (p *Pipeline) minApplied() uint64 {
	if len(p.applied) == 0 {
		return 0
	}
	return slices.Min(slices.Collect(maps.Values(p.applied)))
}

// Checkpoint implements pipeline.Observer.
func (p *Pipeline) Checkpoint(cp pipeline.SourceCheckpoint) {
	p.r.lag.WithLabelValues(p.name).Set(cp.Lag.Seconds())
	p.r.sourceDone.WithLabelValues(p.name).Set(float64(cp.RowsDone))
	p.r.sourceTotal.WithLabelValues(p.name).Set(float64(cp.RowsTotal))
	if len(cp.Metrics) == 0 {
		return
	}
	// A checkpoint that names a metric replaces all of its series: a state that ended (wal_status="reserved"
	// after "extended") must not linger at 1.
	fresh := map[string][]sourceSeries{}
	for _, m := range cp.Metrics {
		if err := checkSourceMetric(m); err != nil {
			p.r.dropOnce(m.Name, err)
			continue
		}
		fresh[m.Name] = append(fresh[m.Name], sourceSeries{labels: m.Labels, value: m.Value, help: m.Help})
	}
	p.mu.Lock()
	maps.Copy(p.source, fresh)
	p.mu.Unlock()
}

// Status takes the pipeline's published status (backpressure).
func (p *Pipeline) Status(st pipeline.Status) {
	r := p.r
	bp := 0.0
	if st.Backpressure {
		bp = 1
	}
	r.backpressure.WithLabelValues(p.name).Set(bp)
}

// Restarting records a failed run that the supervisor retries.
func (p *Pipeline) Restarting(err error) {
	p.restarts.Inc()
	p.setError(StateRestarting, err)
}

// Failed records a run that ended in an error no retry can fix.
func (p *Pipeline) Failed(err error) { p.setError(StateFailed, err) }

// Stopped records a pipeline that ended without error (interrupted, or `--once` done).
func (p *Pipeline) Stopped() {
	p.mu.Lock()
	p.state, p.reason = StateStopped, ""
	p.mu.Unlock()
}

func (p *Pipeline) setError(state string, err error) {
	c := fault.ClassOf(err)
	p.mu.Lock()
	p.state, p.lastClass = state, &c
	// The first line is enough for a probe's body; the log has the rest.
	p.reason = fmt.Sprintf("%s error: %s", c, strings.SplitN(err.Error(), "\n", 2)[0])
	p.mu.Unlock()
}

var (
	metricName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	labelName  = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
)

func checkSourceMetric(m pipeline.SourceMetric) error {
	if !metricName.MatchString(m.Name) || len(m.Name) > 100 {
		return fmt.Errorf("name %q does not match [a-z_][a-z0-9_]* (at most 100)", m.Name)
	}
	if reservedSourceNames[m.Name] {
		return fmt.Errorf("name %q is the engine's own %s%s", m.Name, sourcePrefix, m.Name)
	}
	for k := range m.Labels {
		if !labelName.MatchString(k) || strings.HasPrefix(k, "__") || k == "pipeline" {
			return fmt.Errorf("metric %s: label %q does not match [a-z_][a-z0-9_]* or is reserved", m.Name, k)
		}
	}
	return nil
}

func (r *Registry) dropOnce(name string, err error) {
	r.mu.Lock()
	seen := r.dropped[name]
	r.dropped[name] = true
	r.mu.Unlock()
	if !seen {
		r.log.Warn("source metric dropped (reported only once)", "metric", name, "err", err)
	}
}

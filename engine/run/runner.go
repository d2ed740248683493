package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/engine/metrics"
	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/precheck"
	"github.com/skippr-dev/skippr/engine/redact"
	"github.com/skippr-dev/skippr/engine/supervise"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// Runner runs the pipelines of one config on this host.
type Runner struct {
	Config   *config.Config
	Home     string // $SKIPPR_HOME: the state directories
	Host     connector.Starter
	Metrics  *metrics.Registry
	Logger   *slog.Logger
	Redact   *redact.Redactor
	Progress time.Duration // how often to log progress
	Once     bool          // stop when caught up and applied (sync --once)
	// Started is when the process began (zero: unknown). The start of each run is logged as milliseconds
	// since then (startClock); zero logs it since the run's own start.
	Started time.Time
}

// Pipeline runs pipeline p under the supervisor until ctx ends, it fails for good or (Once) it is done.
// waitLock waits for another writer's lease instead of failing; epoch is the fleet election's revision, the
// WAL writer epoch (0 outside fleet mode).
func (r *Runner) Pipeline(ctx context.Context, p *config.Pipeline, waitLock bool, epoch uint64) error {
	log := r.Logger.With("pipeline", p.Name)
	pr := &pipelineRun{r: r, p: p, epoch: epoch, log: log, m: r.Metrics.Pipeline(p.Name),
		status: newStatusWriter(StateOf(r.Home, p), log, r.Redact)}
	err := supervise.Run(ctx, supervise.Config{
		Name:      p.Name,
		Run:       pr.runOnce,
		Once:      r.Once,
		WaitLock:  waitLock,
		Progress:  pr.status.progress,
		Permanent: func(err error) bool { return CodeOf(err) != Failed },
		OnFault:   pr.fault,
		Logger:    log,
	})
	if err == nil {
		pr.m.Stopped()
	}
	return err
}

// Run runs the config's pipeline name as the holder of a fleet election's epoch (engine/fleet's Runner).
// WaitLock: an equal epoch (this worker again, same term) waits out its own earlier lease.
func (r *Runner) Run(ctx context.Context, name string, epoch uint64) error {
	p, ok := r.Config.Pipeline(name)
	if !ok {
		return withCode(Refused, fmt.Errorf("no pipeline %q in %s", name, r.Config.Path))
	}
	return r.Pipeline(ctx, p, true, epoch)
}

// pipelineRun is one supervised pipeline: runOnce starts its plugins and WAL and runs it once.
type pipelineRun struct {
	r      *Runner
	p      *config.Pipeline
	epoch  uint64
	log    *slog.Logger
	m      *metrics.Pipeline
	status *statusWriter
}

// fault records a supervisor's verdict in the status file and the metrics.
func (s *pipelineRun) fault(state string, f pipeline.Fault) {
	s.status.fault(state, f)
	err := fault.New(fault.ParseClass(f.Class), errors.New(f.Message), f.Fix)
	switch state {
	case pipeline.StateFailed:
		s.m.Failed(err)
	case pipeline.StateRetrying:
		s.m.Restarting(err)
	}
}

// hardReleaseWait bounds the WAL lease's release after a hard stop of `skippr sync`: a reachable S3 answers
// the one small conditional PUT well within it, and the next `skippr sync` then starts at once; an unreachable
// one leaves the lease to expire at its TTL, which `skippr sync --wait-lock` waits out. Before, the release came
// first and waited up to 10 s. A fleet worker does not release at a hard stop at all (see runOnce).
const hardReleaseWait = 500 * time.Millisecond

func (s *pipelineRun) runOnce(parent context.Context) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	clock := newStartClock(s.r.Started)
	clock.mark(phaseRun)
	cfg, p := s.r.Config, s.p
	srcConn, _ := cfg.Connection(p.Source)
	conns := []*config.Connection{srcConn}
	for _, name := range p.Destinations {
		cn, _ := cfg.Connection(name)
		conns = append(conns, cn)
	}
	plugins, err := connector.StartAll(ctx, s.r.Host, conns)
	if err != nil {
		return err
	}
	// A hard stop — parent ends: a fleet worker's lost lease, a second signal, a soft stop's grace run out —
	// kills every plugin process at once, together, in the middle of whatever it does, so that the worker has
	// stopped its pipelines within a second of its lease's loss (docs/fleet.md). Nothing in flight is waited
	// for, and nothing need be: a WAL commit cut off has an unknown outcome that the next writer fences (a
	// fence entry under its higher epoch, engine/wal/doc.go), and a destination commits its rows and its
	// applied sequence in one transaction, so a cut-off apply either landed whole, and its replay is skipped by
	// that fence, or not at all, and is applied again. A run that ends by itself or by a soft stop lets each
	// plugin exit cleanly.
	var killed sync.Once
	killNow := func() { killed.Do(func() { connector.KillAllNow(plugins) }) }
	unwatch := context.AfterFunc(parent, killNow)
	defer func() {
		if unwatch() {
			connector.KillAll(plugins)
		} else {
			killNow() // returns once the kill begun at the stop has finished
		}
	}()
	clock.mark(phasePlugins)
	src := plugins[0]
	if err := src.Require(connector.KindSource, fmt.Sprintf("%s: pipelines.%s.source", p.Pos, p.Name)); err != nil {
		return err
	}
	pc := pipeline.Config{
		Name:              p.Name,
		Source:            pipeline.Endpoint[pipeline.Source]{Name: srcConn.Name, Plugin: src},
		Streams:           p.Streams,
		ExactlyOnce:       p.Delivery == config.ExactlyOnce,
		SourceTruncates:   pipeline.SourceTruncates(src.Spec.SettingsSchema, src.Settings),
		MaxBatchBytes:     p.WAL.GroupCommit.MaxBytes,
		MaxDelay:          p.WAL.GroupCommit.MaxDelay,
		MaxUnappliedBytes: p.WAL.MaxUnappliedBytes,
		ApplyPaused:       p.Apply.Paused,
		Once:              s.r.Once,
		Logger:            s.log,
		Observer:          &firstRead{Observer: s.m, clock: clock, log: s.log},
		Resnapshots:       StateOf(s.r.Home, p).Resnapshots(),
		SourceResnapshots: src.Spec.Offers(protocol.ServiceResnapshot),
		SourcePlugin:      srcConn.Plugin,
	}
	pre := precheck.Config{Pipeline: p.Name, Streams: p.Streams, Source: precheck.Endpoint[precheck.Source]{Name: srcConn.Name, Plugin: src}, Logger: s.log}
	for k, name := range p.Destinations {
		d, cn := plugins[k+1], conns[k+1]
		if err := d.Require(connector.KindDestination, fmt.Sprintf("%s: pipelines.%s.destinations", p.Pos, p.Name)); err != nil {
			return err
		}
		a := cn.Apply
		pc.Destinations = append(pc.Destinations, pipeline.Endpoint[pipeline.Destination]{Name: name, Plugin: d, PluginName: cn.Plugin,
			Apply: pipeline.ApplyLimits{MaxInterval: a.MaxInterval, MaxBytes: a.MaxBytes, MaxEntries: a.MaxEntries,
				Unset: pipeline.ApplyKeys{MaxInterval: a.Unset.MaxInterval, MaxBytes: a.Unset.MaxBytes, MaxEntries: a.Unset.MaxEntries}}})
		pre.Destinations = append(pre.Destinations, precheck.Endpoint[precheck.Destination]{Name: name, Plugin: d, Settings: d.Settings,
			Shared: slices.ContainsFunc(cfg.Pipelines, func(q *config.Pipeline) bool { return q.Name != p.Name && slices.Contains(q.Destinations, name) })})
	}
	if err := precheck.Run(ctx, pre); err != nil {
		return refusedAtStart(err)
	}
	clock.mark(phaseChecks)
	wl, err := OpenWAL(ctx, p, s.log, s.epoch)
	if err != nil {
		return err
	}
	defer func() {
		if parent.Err() == nil {
			wl.Close()
			return
		}
		// Hard stop: the network call comes after the processes are gone, and briefly. A fleet holder (an
		// election's epoch) leaves its lease to expire: the next holder's higher epoch takes it at once and
		// fences this writer, so a release buys nothing, and with S3 out of reach — the cut link that cost the
		// worker its etcd lease — it would only delay the stop.
		killNow()
		wait := hardReleaseWait
		if s.epoch != 0 {
			wait = 0
		}
		rctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := wl.CloseContext(rctx); err != nil && s.epoch == 0 {
			s.log.Warn("WAL lease not released at the hard stop; it expires at its TTL", "err", err)
		}
	}()
	if err := wl.Acquire(ctx); err != nil {
		if errors.Is(err, wal.ErrLocked) {
			return withCode(Locked, fmt.Errorf("pipeline %s: %w", p.Name, err))
		}
		return fmt.Errorf("pipeline %s: %w", p.Name, err)
	}
	pc.Log = wl
	clock.mark(phaseWAL)
	var lastLog time.Time
	pc.OnStatus = func(st pipeline.Status) {
		s.m.Status(st)
		s.status.publish(st)
		if time.Since(lastLog) >= s.r.Progress {
			lastLog = time.Now()
			logProgress(s.log, st)
		}
	}
	s.log.Info("pipeline started", append([]any{"source", srcConn.Name, "destinations", p.Destinations, "wal", wl.URL(), "delivery", p.Delivery},
		clock.startedAttrs(plugins)...)...)
	return refusedAtStart(pipeline.Run(ctx, pc))
}

// refusedAtStart gives a pipeline refused before it reads anything — a failed check, a column type a
// destination cannot hold, a delivery guarantee a destination cannot honour — the code of bad configuration:
// the input must change, as for a config error, and a script can tell it from a failure.
func refusedAtStart(err error) error {
	if errors.Is(err, precheck.ErrRefused) || errors.Is(err, pipeline.ErrGuarantee) {
		return withCode(Refused, err)
	}
	return err
}

func logProgress(log *slog.Logger, st pipeline.Status) {
	attrs := []any{"state", st.State, "rows_committed", st.RowsCommitted, "rows_applied", st.RowsApplied,
		"wal_entries", st.WAL.Entries, "wal_bytes", st.WAL.Bytes, "last_committed", st.WAL.LastCommitted, "lag_ms", st.Source.LagMS}
	if st.Source.RowsTotal > 0 {
		attrs = append(attrs, "source_rows", st.Source.RowsDone, "source_total", st.Source.RowsTotal,
			"source_pct", fmt.Sprintf("%.1f", 100*float64(st.Source.RowsDone)/float64(st.Source.RowsTotal)))
	}
	log.Info("progress", attrs...)
}

// OpenWAL opens pipeline p's WAL for a writer whose epoch an election chose (fleet mode), or 0; S3 credentials
// come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. A WAL that cannot be opened is a config error.
func OpenWAL(ctx context.Context, p *config.Pipeline, log *slog.Logger, epoch uint64) (*wal.Log, error) {
	opts := wal.Options{Logger: log, Epoch: epoch, Compression: p.WAL.Compression, S3: wal.S3Options{
		Endpoint: p.WAL.S3.Endpoint, Region: p.WAL.S3.Region, PathStyle: p.WAL.S3.PathStyle,
		AccessKeyID: os.Getenv("AWS_ACCESS_KEY_ID"), SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
	}}
	wl, err := wal.Open(ctx, p.WAL.URL, opts)
	if err != nil {
		return nil, withCode(Refused, fmt.Errorf("%s: pipelines.%s.wal: %w", p.WAL.Pos, p.Name, err))
	}
	return wl, nil
}

// Select picks the pipelines named (all of cfg's when names is empty).
func Select(cfg *config.Config, names []string) ([]*config.Pipeline, error) {
	if len(names) == 0 {
		if len(cfg.Pipelines) == 0 {
			return nil, withCode(Refused, fmt.Errorf("%s declares no pipelines", cfg.Path))
		}
		return cfg.Pipelines, nil
	}
	var out []*config.Pipeline
	for _, n := range names {
		p, ok := cfg.Pipeline(n)
		if !ok {
			var known []string
			for _, k := range cfg.Pipelines {
				known = append(known, k.Name)
			}
			return nil, withCode(Refused, fmt.Errorf("no pipeline %q in %s (known: %v)", n, cfg.Path, known))
		}
		out = append(out, p)
	}
	return out, nil
}

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/engine/metrics"
	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/pluginhost"
	"github.com/skippr-dev/skippr/engine/precheck"
	"github.com/skippr-dev/skippr/engine/redact"
	"github.com/skippr-dev/skippr/engine/shutdown"
	"github.com/skippr-dev/skippr/engine/supervise"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

func syncCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "sync",
		Usage:     "run pipelines: read sources into the WAL, apply it to destinations",
		ArgsUsage: "[PIPELINE...]",
		Description: `Runs the named pipelines (all of them by default) until interrupted. Plugins pinned in skippr.lock
are installed on first use. A failed run (a plugin crash, a network error) is retried with backoff from
the last durable point, shown by ` + "`skippr status`" + ` as retrying; with --once, 5 attempts in a row without
progress end the run. Errors that a retry cannot fix (wrong settings or credentials, a value the destination
cannot hold, a source that lost its position, a refused delivery guarantee, a WAL held by another writer, a
corrupt WAL) stop the pipeline at once in state failed, with the reason and the fix. sync exits when every
pipeline it runs has stopped.

Exit codes: 0 done, 1 failure, 2 bad config or arguments, 3 plugin not found, 4 verification failed,
5 the WAL is held by another writer.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "once", Usage: "stop when the sources are caught up and every destination has applied everything, then print a summary (rows per stream, time, rows/s; JSON with --log-format json)"},
			&cli.BoolFlag{Name: "offline", Usage: "never contact a registry: refuse to start a plugin that is not installed"},
			&cli.BoolFlag{Name: "wait-lock", Usage: "when another writer holds the WAL, wait for its lease to expire instead of exiting (for restarts after a crash)"},
			&cli.DurationFlag{Name: "progress-every", Value: 5 * time.Second, Usage: "how often to log progress"},
			&cli.DurationFlag{Name: "stop-timeout", Value: shutdown.DefaultGrace, Usage: "after SIGTERM/SIGINT, how long the WAL commit and applies in flight may take to finish before sync stops at once (a second signal stops at once too)"},
			&cli.StringFlag{Name: "metrics-addr", Usage: "serve /metrics (Prometheus), /healthz and /readyz on this host:port (overrides metrics.addr in the config; port 0 picks a free one, logged)"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			shutdown.SetGrace(ctx, c.Duration("stop-timeout"))
			cfg, pipes, err := configuredPipelines(c, g)
			if err != nil {
				return err
			}
			host, err := newHost(c, g, cfg, c.Bool("offline"))
			if err != nil {
				return err
			}
			metricsCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			reg, err := serveMetrics(metricsCtx, g, cfg, c.String("metrics-addr"))
			if err != nil {
				return err
			}
			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				errs []error
			)
			for _, p := range pipes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s := &pipelineRun{g: g, cfg: cfg, p: p, host: host, once: c.Bool("once"), progress: c.Duration("progress-every"),
						status: newStatusWriter(g, p), m: reg.Pipeline(p.Name)}
					if err := s.supervise(ctx, c.Bool("wait-lock")); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if c.Bool("once") && len(errs) == 0 {
				return printSyncSummary(c, g, pipes)
			}
			if len(errs) == 1 {
				return errs[0]
			}
			return errors.Join(errs...)
		},
	}
}

// configuredPipelines loads the config and picks the pipelines named in the arguments (all by default).
func configuredPipelines(c *cli.Command, g *globals) (*config.Config, []*config.Pipeline, error) {
	cfg, err := loadConfig(g)
	if err != nil {
		return nil, nil, err
	}
	pipes, err := selectPipelines(cfg, c.Args().Slice())
	return cfg, pipes, err
}

func selectPipelines(cfg *config.Config, names []string) ([]*config.Pipeline, error) {
	if len(names) == 0 {
		if len(cfg.Pipelines) == 0 {
			return nil, withCode(exitUsage, fmt.Errorf("%s declares no pipelines", cfg.Path))
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
			return nil, withCode(exitUsage, fmt.Errorf("no pipeline %q in %s (known: %v)", n, cfg.Path, known))
		}
		out = append(out, p)
	}
	return out, nil
}

// pipelineRun starts one pipeline's plugins and WAL and runs it once; engine/supervise decides what follows.
type pipelineRun struct {
	g        *globals
	cfg      *config.Config
	p        *config.Pipeline
	host     *pluginhost.Host
	once     bool
	status   *statusWriter
	progress time.Duration
	m        *metrics.Pipeline
	// epoch is the fleet election's revision, the WAL writer epoch (0 outside fleet mode).
	epoch uint64
}

const exitLocked = 5

func (s *pipelineRun) supervise(ctx context.Context, waitLock bool) error {
	log := s.g.Log.With("pipeline", s.p.Name)
	err := supervise.Run(ctx, supervise.Config{
		Name:      s.p.Name,
		Run:       func(ctx context.Context) error { return s.runOnce(ctx, log) },
		Once:      s.once,
		WaitLock:  waitLock,
		Progress:  s.status.progress,
		Permanent: codedExit,
		OnFault:   s.fault,
		Logger:    log,
	})
	if err == nil {
		s.m.Stopped()
	}
	return err
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

// codedExit: errors that carry an exit code of their own (bad config, plugin not found, verification) need a
// person, like the permanent classes.
func codedExit(err error) bool {
	var ee *exitError
	return errors.As(err, &ee) && ee.code != exitFailure
}

func (s *pipelineRun) runOnce(ctx context.Context, log *slog.Logger) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srcConn, _ := s.cfg.Connection(s.p.Source)
	conns := []*config.Connection{srcConn}
	for _, name := range s.p.Destinations {
		cn, _ := s.cfg.Connection(name)
		conns = append(conns, cn)
	}
	plugins, err := connector.StartAll(ctx, s.host, conns)
	if err != nil {
		return connectorCode(err)
	}
	defer connector.KillAll(plugins)
	src := plugins[0]
	if err := src.Require(connector.KindSource, fmt.Sprintf("%s: pipelines.%s.source", s.p.Pos, s.p.Name)); err != nil {
		return connectorCode(err)
	}
	pc := pipeline.Config{
		Name:              s.p.Name,
		Source:            pipeline.Endpoint[pipeline.Source]{Name: srcConn.Name, Plugin: src.Wire(), Settings: src.Settings},
		Streams:           s.p.Streams,
		ExactlyOnce:       s.p.Delivery == config.ExactlyOnce,
		SourceTruncates:   pipeline.SourceTruncates(src.Spec.SettingsSchema, src.Settings),
		MaxBatchBytes:     s.p.WAL.GroupCommit.MaxBytes,
		MaxDelay:          s.p.WAL.GroupCommit.MaxDelay,
		MaxUnappliedBytes: s.p.WAL.MaxUnappliedBytes,
		ApplyPaused:       s.p.Apply.Paused,
		Once:              s.once,
		Logger:            log,
		Observer:          s.m,
		Resnapshots:       resnapshotStore(s.g.Home, s.p),
		SourceResnapshots: src.Spec.Offers(protocol.ServiceResnapshot),
		SourcePlugin:      srcConn.Plugin,
	}
	pre := precheck.Config{Pipeline: s.p.Name, Streams: s.p.Streams,
		Source: precheck.Endpoint[precheck.Source]{Name: srcConn.Name, Plugin: src}}
	for k, name := range s.p.Destinations {
		d, cn := plugins[k+1], conns[k+1]
		if err := d.Require(connector.KindDestination, fmt.Sprintf("%s: pipelines.%s.destinations", s.p.Pos, s.p.Name)); err != nil {
			return connectorCode(err)
		}
		a := cn.Apply
		pc.Destinations = append(pc.Destinations, pipeline.Endpoint[pipeline.Destination]{Name: name, Plugin: d.Wire(), Settings: d.Settings, PluginName: cn.Plugin,
			Apply: pipeline.ApplyLimits{MaxInterval: a.MaxInterval, MaxBytes: a.MaxBytes, MaxEntries: a.MaxEntries,
				Unset: pipeline.ApplyKeys{MaxInterval: a.Unset.MaxInterval, MaxBytes: a.Unset.MaxBytes, MaxEntries: a.Unset.MaxEntries}}})
		pre.Destinations = append(pre.Destinations, precheck.Endpoint[precheck.Destination]{Name: name, Plugin: d})
	}
	if err := precheck.Run(ctx, pre); err != nil {
		return refusedAtStart(err)
	}
	wl, err := openWALEpoch(ctx, s.p, log, s.epoch)
	if err != nil {
		return err
	}
	defer wl.Close()
	if err := wl.Acquire(ctx); err != nil {
		if errors.Is(err, wal.ErrLocked) {
			return withCode(exitLocked, fmt.Errorf("pipeline %s: %w", s.p.Name, err))
		}
		return fmt.Errorf("pipeline %s: %w", s.p.Name, err)
	}
	pc.Log = wl
	var lastLog time.Time
	pc.OnStatus = func(st pipeline.Status) {
		s.m.Status(st)
		s.status.publish(st)
		if time.Since(lastLog) >= s.progress {
			lastLog = time.Now()
			logProgress(log, st)
		}
	}
	log.Info("pipeline started", "source", srcConn.Name, "destinations", s.p.Destinations, "wal", wl.URL(), "delivery", s.p.Delivery)
	return refusedAtStart(pipeline.Run(ctx, pc))
}

// refusedAtStart gives a pipeline refused before it reads anything — a failed check, a column type a
// destination cannot hold, a delivery guarantee a destination cannot honour — the exit code of bad
// configuration: the input must change, as for a config error, and a script can tell it from a failure.
func refusedAtStart(err error) error {
	if errors.Is(err, precheck.ErrRefused) || errors.Is(err, pipeline.ErrGuarantee) {
		return withCode(exitUsage, err)
	}
	return err
}

// serveMetrics makes the process's metrics registry and, when an address is set (the flag wins over the
// config), serves it until ctx ends.
func serveMetrics(ctx context.Context, g *globals, cfg *config.Config, addr string) (*metrics.Registry, error) {
	reg := metrics.New(g.Log)
	if addr == "" {
		addr = cfg.Metrics.Addr
	}
	if addr == "" {
		return reg, nil
	}
	ln, err := reg.Listen(ctx, addr)
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	g.Log.Info("metrics listening", "addr", ln.Addr().String(), "paths", "/metrics /healthz /readyz")
	go func() {
		if err := reg.Serve(ctx, ln); err != nil {
			g.Log.Error("metrics server stopped", "err", err)
		}
	}()
	return reg, nil
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

func openWAL(ctx context.Context, p *config.Pipeline, log *slog.Logger) (*wal.Log, error) {
	return openWALEpoch(ctx, p, log, 0)
}

// openWALEpoch opens the WAL for a writer whose epoch an election chose (fleet mode), or 0.
func openWALEpoch(ctx context.Context, p *config.Pipeline, log *slog.Logger, epoch uint64) (*wal.Log, error) {
	opts := wal.Options{Logger: log, Epoch: epoch, Compression: p.WAL.Compression, S3: wal.S3Options{
		Endpoint: p.WAL.S3.Endpoint, Region: p.WAL.S3.Region, PathStyle: p.WAL.S3.PathStyle,
		AccessKeyID: os.Getenv("AWS_ACCESS_KEY_ID"), SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
	}}
	wl, err := wal.Open(ctx, p.WAL.URL, opts)
	if err != nil {
		return nil, withCode(exitUsage, fmt.Errorf("%s: pipelines.%s.wal: %w", p.WAL.Pos, p.Name, err))
	}
	return wl, nil
}

// statusFile is keyed by the pipeline's name and WAL location, so two configs with a pipeline of the same name
// keep their own figures.
func statusFile(home string, p *config.Pipeline) string {
	sum := sha256.Sum256([]byte(p.WAL.URL))
	return filepath.Join(home, "state", p.Name+"-"+hex.EncodeToString(sum[:6]), "status.json")
}

// legacyStatusFile is where releases before the WAL-keyed name wrote the status; read it once after an upgrade.
func legacyStatusFile(home, name string) string {
	return filepath.Join(home, "state", name, "status.json")
}

// readStatus reads the pipeline's status file, falling back to the legacy location; nil when there is none.
func readStatus(home string, p *config.Pipeline) (*pipeline.Status, error) {
	for _, path := range []string{statusFile(home, p), legacyStatusFile(home, p.Name)} {
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var st pipeline.Status
		if err := json.Unmarshal(b, &st); err != nil {
			return nil, fmt.Errorf("status file %s: %w", path, err)
		}
		return &st, nil
	}
	return nil, nil
}

// statusWriter keeps the pipeline's last published status, so a fault reported between runs keeps its figures.
type statusWriter struct {
	path   string
	log    *slog.Logger
	redact *redact.Redactor
	mu     sync.Mutex
	last   pipeline.Status
	prog   atomic.Uint64
}

func newStatusWriter(g *globals, p *config.Pipeline) *statusWriter {
	w := &statusWriter{path: statusFile(g.Home, p), log: g.Log.With("pipeline", p.Name), redact: g.Redact, last: pipeline.Status{Pipeline: p.Name}}
	if st, err := readStatus(g.Home, p); err == nil && st != nil {
		w.last = *st
		w.last.Fault = nil
	}
	return w
}

// progress grows with every commit and apply: the WAL's last sequence plus each destination's applied one.
func (w *statusWriter) progress() uint64 { return w.prog.Load() }

func (w *statusWriter) publish(st pipeline.Status) {
	p := st.WAL.LastCommitted
	for _, d := range st.Destinations {
		p += d.LastApplied
	}
	if p > w.prog.Load() {
		w.prog.Store(p)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = st
	w.write(st)
}

func (w *statusWriter) fault(state string, f pipeline.Fault) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.last
	st.State, st.Fault, st.PID, st.Updated = state, &f, os.Getpid(), time.Now()
	w.write(st)
}

func (w *statusWriter) write(st pipeline.Status) {
	if st.Fault != nil {
		// Before encoding: JSON escaping would hide a value with quotes from the redaction of the whole file.
		f := *st.Fault
		f.Message, f.Fix = w.redact.String(f.Message), w.redact.String(f.Fix)
		st.Fault = &f
	}
	if err := writeStatus(w.path, st, w.redact); err != nil {
		w.log.Warn("write status", "err", err)
	}
}

// writeStatus replaces the status file atomically; it is advisory, so no fsync.
func writeStatus(path string, st pipeline.Status, red *redact.Redactor) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	b = []byte(red.String(string(b)))
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/pluginhost"
	"github.com/skippr-dev/skippr/engine/wal"
	pluginv1 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v1"
)

func syncCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "sync",
		Usage:     "run pipelines: read sources into the WAL, apply it to destinations",
		ArgsUsage: "[PIPELINE...]",
		Description: `Runs the named pipelines (all of them by default) until interrupted. Plugins pinned in skippr.lock
are installed on first use. A failed run (a plugin crash, a network error) is retried with backoff from
the last durable point; errors that a retry cannot fix (a refused delivery guarantee, a WAL held by another
writer, a corrupt WAL segment) stop the pipeline.

Exit codes: 0 done, 1 failure, 2 bad config or arguments, 3 plugin not found, 4 verification failed,
5 the WAL is held by another writer.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "once", Usage: "stop when the sources are caught up and every destination has applied everything, then print a summary (rows per stream, time, rows/s; JSON with --log-format json)"},
			&cli.BoolFlag{Name: "offline", Usage: "never contact a registry: refuse to start a plugin that is not installed"},
			&cli.BoolFlag{Name: "wait-lock", Usage: "when another writer holds the WAL, wait for its lease to expire instead of exiting (for restarts after a crash)"},
			&cli.DurationFlag{Name: "progress-every", Value: 5 * time.Second, Usage: "how often to log progress"},
		},
		Action: func(c *cli.Context) error {
			cfg, pipes, err := configuredPipelines(c, g)
			if err != nil {
				return err
			}
			host, err := newHost(c, g, cfg, c.Bool("offline"))
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
					s := &supervisor{g: g, cfg: cfg, p: p, host: host, once: c.Bool("once"), waitLock: c.Bool("wait-lock"), progressEvery: c.Duration("progress-every")}
					if err := s.run(c.Context); err != nil {
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
func configuredPipelines(c *cli.Context, g *globals) (*config.Config, []*config.Pipeline, error) {
	args, err := commandArgs(c)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := loadConfig(g)
	if err != nil {
		return nil, nil, err
	}
	pipes, err := selectPipelines(cfg, args)
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

// supervisor runs one pipeline, restarting it after failures a retry can fix.
type supervisor struct {
	g             *globals
	cfg           *config.Config
	p             *config.Pipeline
	host          *pluginhost.Host
	once          bool
	waitLock      bool
	progressEvery time.Duration
}

const (
	exitLocked     = 5
	minBackoff     = 500 * time.Millisecond
	maxBackoff     = 30 * time.Second
	healthyRunTime = time.Minute
)

func (s *supervisor) run(ctx context.Context) error {
	log := s.g.Log.With("pipeline", s.p.Name)
	backoff := minBackoff
	for attempt := 1; ; attempt++ {
		started := time.Now()
		err := s.runOnce(ctx, log)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			log.Info("stopped")
			return nil
		case s.waitLock && errors.Is(err, wal.ErrLocked):
			log.Warn("WAL held by another writer; waiting for its lease to expire", "err", err)
		case permanent(err):
			return err
		}
		if time.Since(started) > healthyRunTime {
			backoff = minBackoff
		}
		log.Error("pipeline failed; restarting from the last durable point", "err", err, "attempt", attempt, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// permanent errors need a human: retrying cannot fix them.
func permanent(err error) bool {
	var ee *exitError
	if errors.As(err, &ee) && ee.code != exitFailure {
		return true
	}
	return errors.Is(err, pipeline.ErrGuarantee) || errors.Is(err, pipeline.ErrLogBehind) ||
		errors.Is(err, wal.ErrCorrupt) || errors.Is(err, wal.ErrMissing) ||
		errors.Is(err, wal.ErrLocked) || errors.Is(err, wal.ErrFenced)
}

func (s *supervisor) runOnce(ctx context.Context, log *slog.Logger) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srcConn, _ := s.cfg.Connection(s.p.Source)
	src, err := startConnection(ctx, s.host, srcConn)
	if err != nil {
		return err
	}
	defer src.client.Kill()
	if !src.hasKind(pluginv1.Kind_KIND_SOURCE) {
		return withCode(exitUsage, fmt.Errorf("%s: pipelines.%s.source: plugin %s is not a source", s.p.Pos, s.p.Name, srcConn.Plugin))
	}
	pc := pipeline.Config{
		Name:              s.p.Name,
		Source:            pipeline.Endpoint[pipeline.Source]{Name: srcConn.Name, Plugin: src.client, Settings: src.settings},
		Streams:           s.p.Streams,
		ExactlyOnce:       s.p.Delivery == config.ExactlyOnce,
		MaxBatchBytes:     s.p.WAL.GroupCommit.MaxBytes,
		MaxDelay:          s.p.WAL.GroupCommit.MaxDelay,
		MaxUnappliedBytes: s.p.WAL.MaxUnappliedBytes,
		ApplyPaused:       s.p.Apply.Paused,
		Once:              s.once,
		Logger:            log,
	}
	for _, name := range s.p.Destinations {
		cn, _ := s.cfg.Connection(name)
		d, err := startConnection(ctx, s.host, cn)
		if err != nil {
			return err
		}
		defer d.client.Kill()
		if !d.hasKind(pluginv1.Kind_KIND_DESTINATION) {
			return withCode(exitUsage, fmt.Errorf("%s: pipelines.%s.destinations: plugin %s is not a destination", s.p.Pos, s.p.Name, cn.Plugin))
		}
		pc.Destinations = append(pc.Destinations, pipeline.Endpoint[pipeline.Destination]{Name: name, Plugin: d.client, Settings: d.settings})
	}
	wl, err := openWAL(ctx, s.p, log)
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
	statusPath := statusFile(s.g.Home, s.p.Name)
	var lastLog time.Time
	pc.OnStatus = func(st pipeline.Status) {
		if err := writeStatus(statusPath, st); err != nil {
			log.Warn("write status", "err", err)
		}
		if time.Since(lastLog) >= s.progressEvery {
			lastLog = time.Now()
			logProgress(log, st)
		}
	}
	log.Info("pipeline started", "source", srcConn.Name, "destinations", s.p.Destinations, "wal", wl.URL(), "delivery", s.p.Delivery)
	return pipeline.Run(ctx, pc)
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
	opts := wal.Options{Logger: log, S3: wal.S3Options{
		Endpoint: p.WAL.S3.Endpoint, Region: p.WAL.S3.Region, PathStyle: p.WAL.S3.PathStyle,
		AccessKeyID: os.Getenv("AWS_ACCESS_KEY_ID"), SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
	}}
	wl, err := wal.Open(ctx, p.WAL.URL, opts)
	if err != nil {
		return nil, withCode(exitUsage, fmt.Errorf("%s: pipelines.%s.wal: %w", p.WAL.Pos, p.Name, err))
	}
	return wl, nil
}

func statusFile(home, pipelineName string) string {
	return filepath.Join(home, "state", pipelineName, "status.json")
}

// writeStatus replaces the status file atomically; it is advisory, so no fsync.
func writeStatus(path string, st pipeline.Status) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

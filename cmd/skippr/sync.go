package main

import (
	"cmp"
	"context"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/metrics"
	"github.com/skippr-dev/skippr/engine/run"
	"github.com/skippr-dev/skippr/engine/shutdown"
)

func syncCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:        "sync",
		Usage:       "run pipelines: read sources into the WAL, apply it to destinations",
		ArgsUsage:   "[PIPELINE...]",
		Description: helpText("sync"),
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
			r := &run.Runner{Config: cfg, Home: g.Home, Host: host, Metrics: reg, Logger: g.Log, Redact: g.Redact,
				Progress: c.Duration("progress-every"), Once: c.Bool("once"), Started: g.Started}
			if err := r.All(ctx, pipes, c.Bool("wait-lock")); err != nil || !c.Bool("once") {
				return err
			}
			return printSyncSummary(c, g, pipes)
		},
	}
}

// configuredPipelines loads the config and picks the pipelines named in the arguments (all by default).
func configuredPipelines(c *cli.Command, g *globals) (*config.Config, []*config.Pipeline, error) {
	cfg, err := loadConfig(g)
	if err != nil {
		return nil, nil, err
	}
	pipes, err := run.Select(cfg, c.Args().Slice())
	return cfg, pipes, err
}

// serveMetrics makes the process's metrics registry and serves it on addr, else on the config's metrics.addr
// (none: not served), until ctx ends.
func serveMetrics(ctx context.Context, g *globals, cfg *config.Config, addr string) (*metrics.Registry, error) {
	reg, err := metrics.Start(ctx, g.Log, cmp.Or(addr, cfg.Metrics.Addr))
	return reg, withCode(exitUsage, err)
}

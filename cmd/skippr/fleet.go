package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/urfave/cli/v3"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/skippr-dev/skippr/engine/fleet"
	"github.com/skippr-dev/skippr/engine/run"
	"github.com/skippr-dev/skippr/engine/shutdown"
)

// etcdFlags are the flags every fleet command needs to reach etcd.
func etcdFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "fleet", Sources: cli.EnvVars("SKIPPR_FLEET"), Usage: "the fleet: etcd://h1:2379,h2:2379,h3:2379/prefix (etcds:// for TLS)"},
		&cli.StringFlag{Name: "etcd-ca", Sources: cli.EnvVars("SKIPPR_ETCD_CA"), Usage: "PEM file of the CA that signed etcd's certificates (implies TLS)"},
		&cli.StringFlag{Name: "etcd-cert", Sources: cli.EnvVars("SKIPPR_ETCD_CERT"), Usage: "PEM client certificate for etcd (with --etcd-key)"},
		&cli.StringFlag{Name: "etcd-key", Sources: cli.EnvVars("SKIPPR_ETCD_KEY"), Usage: "PEM private key of --etcd-cert"},
		&cli.StringFlag{Name: "etcd-user", Sources: cli.EnvVars("SKIPPR_ETCD_USER"), Usage: "etcd user name; the password comes from $SKIPPR_ETCD_PASSWORD only"},
	}
}

func etcdClient(c *cli.Command) (*clientv3.Client, fleet.Target, error) {
	raw := c.String("fleet")
	if raw == "" {
		return nil, fleet.Target{}, withCode(exitUsage, errors.New("no fleet given: pass --fleet etcd://h1:2379,h2:2379/prefix or set SKIPPR_FLEET"))
	}
	t, err := fleet.ParseURL(raw)
	if err != nil {
		return nil, t, withCode(exitUsage, err)
	}
	cli, err := t.Client(fleet.ClientOptions{
		CAFile: c.String("etcd-ca"), CertFile: c.String("etcd-cert"), KeyFile: c.String("etcd-key"),
		Username: c.String("etcd-user"), Password: os.Getenv("SKIPPR_ETCD_PASSWORD"),
	})
	if err != nil {
		return nil, t, withCode(exitUsage, err)
	}
	return cli, t, nil
}

func workerCommand(g *globals) *cli.Command {
	host, _ := os.Hostname()
	return &cli.Command{
		Name:        "worker",
		Usage:       "run as one worker of a fleet: the pipelines of the config are spread over every live worker (etcd)",
		ArgsUsage:   "[PIPELINE...]",
		Description: helpText("worker"),
		Flags: append(etcdFlags(),
			&cli.StringFlag{Name: "name", Value: host, Sources: cli.EnvVars("SKIPPR_WORKER_NAME"), Usage: "this worker's name, unique in the fleet (pins refer to it)"},
			&cli.DurationFlag{Name: "lease-ttl", Value: fleet.DefaultTTL, Usage: "etcd lease: how long a dead worker's pipelines wait before moving (whole seconds)"},
			&cli.BoolFlag{Name: "offline", Usage: "never contact a registry: refuse to start a plugin that is not installed"},
			&cli.DurationFlag{Name: "progress-every", Value: 5 * time.Second, Usage: "how often to log progress"},
			&cli.DurationFlag{Name: "stop-timeout", Value: shutdown.DefaultGrace, Usage: "how long a pipeline being handed over (or stopped by SIGTERM) may take to finish its WAL commit and applies in flight"},
			&cli.StringFlag{Name: "metrics-addr", Usage: "serve /metrics, /healthz, /readyz on this host:port (overrides metrics.addr in the config)"},
			&cli.StringFlag{Name: "health-addr", Usage: "serve GET /fleet/pipelines/NAME on this host:port: 200 on the worker that runs NAME, 503 on the others (for a load balancer in front of an HTTP source)"},
		),
		Action: func(ctx context.Context, c *cli.Command) error {
			shutdown.SetGrace(ctx, c.Duration("stop-timeout"))
			cfg, pipes, err := configuredPipelines(c, g)
			if err != nil {
				return err
			}
			fps, err := run.FleetPipelines(pipes)
			if err != nil {
				return err
			}
			cli, target, err := etcdClient(c)
			if err != nil {
				return err
			}
			defer cli.Close()
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
			r := &run.Runner{Config: cfg, Home: g.Home, Host: host, Metrics: reg, Logger: g.Log, Redact: g.Redact, Progress: c.Duration("progress-every")}
			w := &fleet.Worker{
				Client: cli, Prefix: target.Prefix, Name: c.String("name"), Version: version, TTL: c.Duration("lease-ttl"),
				Pipelines: fps, Logger: g.Log, StopTimeout: c.Duration("stop-timeout"),
				Progress: run.FleetProgress(reg),
				Runner:   r,
			}
			if addr := c.String("health-addr"); addr != "" {
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					return withCode(exitUsage, fmt.Errorf("--health-addr %s: %w", addr, err))
				}
				srv := &http.Server{Handler: w.Health(), ReadHeaderTimeout: 5 * time.Second}
				go srv.Serve(ln)
				defer srv.Close()
				g.Log.Info("fleet health listening", "addr", ln.Addr().String(), "path", "/fleet/pipelines/NAME")
			}
			g.Log.Info("fleet worker starting", "worker", w.Name, "fleet", target.Endpoints, "prefix", target.Prefix, "pipelines", len(fps))
			if err := w.Serve(ctx); err != nil {
				if errors.Is(err, fleet.ErrNameTaken) {
					return withCode(exitUsage, err)
				}
				return err
			}
			return nil
		},
	}
}

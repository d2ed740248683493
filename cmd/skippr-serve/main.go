// Command skippr-serve is the Flight SQL server behind `skippr serve` (package servecli says why it is a
// binary of its own). Run it through `skippr serve`, or directly with the same flags and the global ones.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/cmd/internal/servecli"
	"github.com/skippr-dev/skippr/engine/cmdline"
	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/lakequery"
	"github.com/skippr-dev/skippr/engine/queryserve"
	"github.com/skippr-dev/skippr/engine/redact"
	"github.com/skippr-dev/skippr/engine/run"
	"github.com/skippr-dev/skippr/engine/shutdown"
	"github.com/skippr-dev/skippr/engine/wal"
)

// walCacheBytes of each pipeline's decoded WAL entries are kept between statements (lakequery.Options);
// entries beyond are read again by each statement.
const walCacheBytes = 256 << 20

// version is set at build time with -ldflags "-X main.version=…", as the core's.
var version = "0.1.0-dev"

func main() {
	rd := redact.New()
	app := &cli.Command{
		Name:           servecli.Companion,
		Usage:          servecli.Usage,
		Description:    servecli.Description,
		Version:        version,
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Value: "skippr.yml", Sources: cli.EnvVars("SKIPPR_CONFIG"), Usage: "pipeline configuration file"},
			&cli.StringFlag{Name: "home", Value: cmdline.DefaultHome(), Sources: cli.EnvVars("SKIPPR_HOME"), Usage: "directory for installed plugins and local state"},
			&cli.StringFlag{Name: "log-level", Value: "info", Sources: cli.EnvVars("SKIPPR_LOG_LEVEL"), Usage: "debug, info, warn or error"},
			&cli.StringFlag{Name: "log-format", Value: "text", Sources: cli.EnvVars("SKIPPR_LOG_FORMAT"), Usage: "text or json"},
			&cli.DurationFlag{Name: "plugin-start-timeout", Value: 60 * time.Second, Sources: cli.EnvVars("SKIPPR_PLUGIN_START_TIMEOUT"), Usage: "how long a plugin may take to start"},
		}, servecli.Flags()...),
		Action: func(ctx context.Context, c *cli.Command) error { return serve(ctx, c, rd) },
	}
	app.Writer = rd.Writer(os.Stdout)
	app.ErrWriter = rd.Writer(os.Stderr)
	ctx, stop := shutdown.OnSignals(context.Background(), 0, os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := app.Run(ctx, os.Args)
	stop()
	os.Exit(cmdline.Exit(err, "skippr serve", os.Stderr, rd.String))
}

func serve(ctx context.Context, c *cli.Command, rd *redact.Redactor) error {
	log, err := cmdline.NewLogger(c.String("log-level"), c.String("log-format"), c.Root().ErrWriter, rd.Handler)
	if err != nil {
		return cmdline.WithCode(cmdline.ExitUsage, err)
	}
	if c.Args().Len() > 0 {
		return cmdline.WithCode(cmdline.ExitUsage, fmt.Errorf("serve: unexpected arguments %v", c.Args().Slice()))
	}
	var listen queryserve.Listen
	for _, spec := range c.StringSlice("token") {
		client, env, ok := strings.Cut(spec, "=")
		if !ok || client == "" || env == "" {
			return cmdline.WithCode(cmdline.ExitUsage, fmt.Errorf("serve: --token %q: want CLIENT=ENV_VAR (the token itself stays in the environment)", spec))
		}
		secret, ok := os.LookupEnv(env)
		if !ok || secret == "" {
			return cmdline.WithCode(cmdline.ExitUsage, fmt.Errorf("serve: --token %s: $%s is not set", spec, env))
		}
		rd.Add(map[string]string{env: secret})
		listen.Tokens = append(listen.Tokens, queryserve.Token{Client: client, Secret: secret})
	}
	if err := queryserve.CheckTokens(listen.Tokens); err != nil {
		return cmdline.WithCode(cmdline.ExitUsage, fmt.Errorf("serve: %w", err))
	}
	switch cert, key, ca := c.String("tls-cert"), c.String("tls-key"), c.String("tls-client-ca"); {
	case (cert == "") != (key == ""):
		return cmdline.WithCode(cmdline.ExitUsage, errors.New("serve: --tls-cert and --tls-key go together"))
	case ca != "" && cert == "":
		return cmdline.WithCode(cmdline.ExitUsage, errors.New("serve: --tls-client-ca needs --tls-cert and --tls-key (client certificates are checked in the TLS handshake)"))
	case cert != "":
		if listen.TLS, err = queryserve.ServerTLS(cert, key, ca, log); err != nil {
			return cmdline.WithCode(cmdline.ExitUsage, fmt.Errorf("serve: %w", err))
		}
	}
	addr := c.String("addr")
	if err := queryserve.CheckExposure(addr, listen); err != nil {
		return cmdline.WithCode(cmdline.ExitUsage, fmt.Errorf("serve: %w", err))
	}
	q, err := openQuerier(ctx, c, rd, log)
	if err != nil {
		return err
	}
	defer q.Close()
	srv, err := queryserve.New(queryserve.Options{Querier: q, Timeout: c.Duration("query-timeout"), MemoryLimit: c.String("query-memory"),
		MaxConcurrent: int(c.Int("max-concurrent")), Version: version, Log: log})
	if err != nil {
		return cmdline.WithCode(cmdline.ExitUsage, fmt.Errorf("serve: %w", err))
	}
	if c.Bool("mcp-stdio") {
		log.Info("serving MCP on stdin/stdout")
		if err := srv.MCPServer().Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
			return cmdline.WithCode(cmdline.ExitFailure, fmt.Errorf("serve: mcp: %w", err))
		}
		return nil
	}
	if mcpAddr := c.String("mcp-addr"); mcpAddr != "" {
		if err := queryserve.CheckExposure(mcpAddr, listen); err != nil {
			return cmdline.WithCode(cmdline.ExitUsage, fmt.Errorf("serve: --mcp-addr: %w", err))
		}
		stop, err := srv.ServeMCPHTTP(mcpAddr, listen)
		if err != nil {
			return cmdline.WithCode(cmdline.ExitFailure, fmt.Errorf("serve: %w", err))
		}
		defer stop(ctx)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return cmdline.WithCode(cmdline.ExitFailure, fmt.Errorf("serve: %w", err))
	}
	scheme := "grpc"
	if listen.TLS != nil {
		scheme = "grpc+tls"
	}
	log.Info("serving Flight SQL", "addr", lis.Addr().String(), "uri", scheme+"://"+lis.Addr().String(),
		"clients", len(listen.Tokens), "client_certificates", queryserve.RequiresClientCerts(listen.TLS), "query_timeout", c.Duration("query-timeout"))
	if err := srv.Serve(ctx, lis, listen, 5*time.Second); err != nil {
		return cmdline.WithCode(cmdline.ExitFailure, fmt.Errorf("serve: %w", err))
	}
	return nil
}

// openQuerier starts the plugins of the lakes of the pipelines named with --pipeline (default: all), as
// `skippr query` does (cmd/skippr's openQuerier).
func openQuerier(ctx context.Context, c *cli.Command, rd *redact.Redactor, log *slog.Logger) (*lakequery.Querier, error) {
	path := c.String("config")
	cfg, err := config.Load(path, os.LookupEnv)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, cmdline.WithCode(cmdline.ExitUsage, fmt.Errorf("config %s not found (set --config or SKIPPR_CONFIG)", path))
		}
		return nil, cmdline.WithCode(cmdline.ExitUsage, err)
	}
	rd.Add(cfg.Secrets())
	var pipes []*config.Pipeline
	if names := c.StringSlice("pipeline"); len(names) > 0 {
		if pipes, err = run.Select(cfg, names); err != nil {
			return nil, err
		}
	}
	host, err := run.NewHost(cfg, run.HostOptions{
		Home: c.String("home"), LockPath: filepath.Join(filepath.Dir(path), "skippr.lock"), Offline: c.Bool("offline"),
		StartTimeout: c.Duration("plugin-start-timeout"), Log: log,
		Progress: c.Root().ErrWriter, ProgressTTY: cmdline.IsTerminal(c.Root().ErrWriter),
	})
	if err != nil {
		return nil, err
	}
	q, err := lakequery.Open(ctx, lakequery.Options{
		Config:    cfg,
		Pipelines: pipes,
		Host:      host,
		OpenWAL:   func(ctx context.Context, p *config.Pipeline) (*wal.Log, error) { return run.OpenWAL(ctx, p, log, 0) },
		// Statements follow the WAL's tail: up to this much of its decoded entries stays in memory.
		WALCacheBytes: walCacheBytes,
		// ... and the query engine keeps the rows it was sent: each entry crosses to it once.
		EngineKeepsWAL: true,
	})
	switch {
	case errors.Is(err, lakequery.ErrNoLake):
		return nil, cmdline.WithCode(cmdline.ExitUsage, fmt.Errorf("serve: %w", err))
	case err != nil:
		return nil, fmt.Errorf("serve: %w", err)
	}
	return q, nil
}

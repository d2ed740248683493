// Command skippr-plugin-mysql is MySQL or MariaDB as a skippr source: a consistent snapshot of the tables,
// then the binary log (row format) from exactly the snapshot's position. See README.md.
package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"runtime/pprof"

	vtlog "vitess.io/vitess/go/vt/log"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/mysql/config"
	"github.com/skippr-dev/skippr/plugins/mysql/source"
)

// version is the plugin's release version, set at build time with -ldflags "-X main.version=…".
var version = "0.1.0"

type plugin struct{ *source.Source }

func (p *plugin) Spec() serve.Spec {
	return serve.Spec{
		Name: "mysql", Version: version, Kind: serve.KindSource,
		Description:    "MySQL/MariaDB: consistent snapshot, then the row-format binary log (GTIDs, or file and position) as a source",
		SettingsSchema: config.Schema,
	}
}

func (p *plugin) Check(ctx context.Context, raw json.RawMessage) error { return source.Check(ctx, raw) }

// TeardownPipeline deletes the pipeline's row of the re-snapshot watermark table (named by the server_id the
// pipeline's name derives); nothing else is held on the server.
func (p *plugin) TeardownPipeline(ctx context.Context, raw json.RawMessage, pipeline string) ([]string, error) {
	return source.Teardown(ctx, raw, pipeline)
}

func main() {
	// Importing vitess's mysql package sends vitess's own log lines to a JSON logger of its own, and the
	// standard log package to it too; both go to the plugin's slog logger instead (serve points the standard
	// log package at slog), whose lines the host understands.
	vtlog.SwapLogger(serve.Logger("mysql"))
	if path := os.Getenv("SKIPPR_PLUGIN_CPUPROFILE"); path != "" {
		defer cpuProfile(path)()
	}
	serve.Serve(&plugin{Source: source.New()})
}

// cpuProfile profiles the plugin until the returned function runs: when the host stops the plugin (bench/
// reads the per-row cost of the snapshot path so). A profile that cannot start is logged, not fatal.
func cpuProfile(path string) func() {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		slog.Error("cpu profile", "path", path, "err", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			slog.Error("cpu profile", "path", path, "err", err)
		}
	}
}

// Command skippr-plugin-postgres is PostgreSQL as a skippr source (snapshot, then logical replication with
// pgoutput) and destination (transactional upserts, exactly-once). See README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/postgres/config"
	"github.com/skippr-dev/skippr/plugins/postgres/dest"
	"github.com/skippr-dev/skippr/plugins/postgres/source"
)

// version is the plugin's release version, set at build time with -ldflags "-X main.version=…".
var version = "0.1.0"

// plugin plays both roles; one settings object serves both (the source's settings start at tables, the
// destination's is schema).
type plugin struct {
	*source.Source
	*dest.Destination
}

var _ serve.SessionDestination = (*plugin)(nil)

func (p *plugin) Spec() serve.Spec {
	return serve.Spec{
		Name: "postgres", Version: version, Kind: serve.KindBoth,
		Description:    "PostgreSQL: consistent snapshot plus logical replication (pgoutput) as a source; transactional exactly-once upserts as a destination",
		SettingsSchema: config.Schema,
	}
}

// Check checks the source role when tables are set, the destination role when they are not or when a
// schema is set explicitly.
func (p *plugin) Check(ctx context.Context, raw json.RawMessage) error {
	cfg, err := config.Parse(raw)
	if err != nil {
		return err
	}
	var probe struct {
		Schema *string `json:"schema"`
	}
	_ = json.Unmarshal(raw, &probe)
	var errs []error
	if len(cfg.TableNames) > 0 || len(cfg.Patterns) > 0 {
		if err := source.Check(ctx, cfg); err != nil {
			errs = append(errs, err)
		}
	}
	if len(cfg.TableNames) == 0 && len(cfg.Patterns) == 0 || probe.Schema != nil {
		if err := dest.Check(ctx, cfg); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Teardown drops the pipeline's replication slot and the publication this plugin created.
func (p *plugin) Teardown(ctx context.Context, raw json.RawMessage) ([]string, error) {
	return source.Drop(ctx, raw)
}

func main() {
	serve.Serve(&plugin{Source: source.New(), Destination: dest.New()})
}

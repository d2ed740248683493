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
	// The role is decided before parsing, since each role's parse refuses the other role's table_options
	// keys (a destination's are keyed by stream names that need not be in tables).
	var probe struct {
		Tables []string `json:"tables"`
		Schema *string  `json:"schema"`
	}
	_ = json.Unmarshal(raw, &probe)
	var errs []error
	if len(probe.Tables) > 0 {
		if cfg, err := config.ParseSource(raw); err != nil {
			errs = append(errs, err)
		} else if err := p.Source.Check(ctx, cfg); err != nil {
			errs = append(errs, err)
		}
	}
	if len(probe.Tables) == 0 || probe.Schema != nil {
		if cfg, err := config.ParseDestination(raw); err != nil {
			if len(errs) == 0 || errs[0].Error() != err.Error() { // the same fault of both roles, once
				errs = append(errs, err)
			}
		} else if err := dest.Check(ctx, cfg); err != nil {
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

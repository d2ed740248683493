package dest

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// The destination offers the optional services lake.plan (what `skippr query` reads) and lake.compact (what
// `skippr lake compact` runs), so the core finds them by what the plugin offers rather than by its name.
var (
	_ serve.LakePlanner   = (*Destination)(nil)
	_ serve.LakeCompactor = (*Destination)(nil)
)

// PlanLake plans the namespace's tables for a reader outside iceberg-go (see PlanTables), over the
// destination's catalog connection and its plan cache: `skippr serve` asks once per statement, a table whose
// metadata location has not moved since is not planned again, and with an SQL catalog whose tables' metadata
// locations all stayed where they were the last plan is the answer without loading any table (planCache).
func (d *Destination) PlanLake(ctx context.Context, settings json.RawMessage, req lakequery.PlanRequest) (lakequery.Plan, error) {
	s, err := ParseSettings(settings)
	if err != nil {
		return lakequery.Plan{}, err
	}
	oc, err := d.catalog(ctx, settings, s)
	if err != nil {
		return lakequery.Plan{}, err
	}
	key := wholeKey{settings: string(settings), pipeline: req.Pipeline, fetchDir: req.FetchDir}
	streams := strings.Join(req.Streams, "\x00")
	var pointers string
	if oc.db != nil {
		// A failed read only costs the shortcut: the plan below reads the catalog the ordinary way.
		if pointers, err = catalogPointers(ctx, oc.db); err != nil {
			d.log().Debug("lake plan: read the catalog's metadata locations", "err", err)
			pointers = ""
		}
		if p, ok := d.plans.getWhole(key, streams, pointers); ok {
			return p, nil
		}
	}
	d.plans.loads.Add(1)
	p, err := planTables(ctx, oc.cat, s, PlanOptions{Pipeline: req.Pipeline, Streams: req.Streams, FetchDir: req.FetchDir, settings: string(settings)}, &d.plans)
	if err != nil {
		return lakequery.Plan{}, err
	}
	d.plans.putWhole(key, streams, pointers, *p)
	return *p, nil
}

// CompactLake maintains one table (see Compact) and reports what it did.
func (d *Destination) CompactLake(ctx context.Context, settings json.RawMessage, req lakequery.CompactRequest) (json.RawMessage, error) {
	res, err := Compact(ctx, settings, req.Table, CompactOptions{
		TargetFileSize:   req.TargetFileSize,
		ExpireOlderThan:  req.ExpireOlderThan,
		RetainLast:       req.RetainLast,
		OrphansOlderThan: req.OrphansOlderThan,
	})
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(res, "", "  ")
}

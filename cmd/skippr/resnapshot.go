package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/engine/resnapshot"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

func resnapshotCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "resnapshot",
		Usage:     "copy tables of a pipeline again while its stream goes on",
		ArgsUsage: "PIPELINE TABLE...",
		Description: `Records a request to copy the named tables (streams) of the pipeline again, without a new slot and
without stopping the other tables: a running ` + "`skippr sync`" + ` picks it up within a second (one that is not
running, when it starts). The source copies each table in key-ordered chunks beside the changes it streams
(the watermark method), and each destination removes at the end the rows of the table it did not receive
during the copy — rows the source no longer has. A copy interrupted by a crash resumes from its last chunk.
Asking again for a table already requested changes nothing. ` + "`skippr status`" + ` shows the progress.

Refused (exit 2) for a source that cannot re-snapshot (only the postgres source can, for now), a destination
that cannot apply a re-snapshot, or a table the source does not offer.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "offline", Usage: "never contact a registry"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON for scripts"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			args := c.Args().Slice()
			if len(args) < 2 {
				return withCode(exitUsage, errors.New("resnapshot: name a pipeline and at least one table"))
			}
			cfg, err := loadConfig(g)
			if err != nil {
				return err
			}
			pipes, err := selectPipelines(cfg, args[:1])
			if err != nil {
				return err
			}
			p, tables := pipes[0], args[1:]
			t, err := resnapshotTargets(ctx, c, g, cfg, p)
			if err != nil {
				return err
			}
			if err := resnapshot.Check(tables, t.offered, t.source, t.lacking); err != nil {
				return withCode(exitUsage, fmt.Errorf("pipeline %s: %w", p.Name, err))
			}
			reqs, err := resnapshotStore(g.Home, p).Add(tables)
			if err != nil {
				return withCode(exitFailure, err)
			}
			if c.Bool("json") {
				return json.NewEncoder(c.Root().Writer).Encode(map[string]any{"pipeline": p.Name, "requests": reqs})
			}
			for _, r := range reqs {
				fmt.Fprintf(c.Root().Writer, "pipeline %s: re-snapshot of %s requested (%s); a running sync starts it within a second; see skippr status\n", p.Name, r.Stream, r.ID)
			}
			return nil
		},
	}
}

// targets is what the plugins of a pipeline say about a re-snapshot.
type targets struct {
	offered []string // the source's streams
	source  string   // "connection (plugin name)" when the source cannot re-snapshot
	lacking []string // destinations that cannot apply one
}

// resnapshotTargets asks the source which streams it offers and whether it can re-snapshot, and the
// destinations whether they can apply a re-snapshot.
func resnapshotTargets(ctx context.Context, c *cli.Command, g *globals, cfg *config.Config, p *config.Pipeline) (targets, error) {
	var t targets
	host, err := newHost(c, g, cfg, c.Bool("offline"))
	if err != nil {
		return t, err
	}
	cn, _ := cfg.Connection(p.Source)
	s, err := connector.Start(ctx, host, cn)
	if err != nil {
		return t, connectorCode(err)
	}
	defer s.Kill()
	if !s.Spec.Offers(protocol.ServiceResnapshot) {
		t.source = fmt.Sprintf("%s (plugin %s)", cn.Name, s.Spec.Name)
	}
	streams, err := s.Discover(ctx)
	if err != nil {
		return t, fmt.Errorf("pipeline %s: source %s: %w", p.Name, cn.Name, err)
	}
	for _, st := range streams {
		t.offered = append(t.offered, st.Name)
	}
	for _, name := range p.Destinations {
		dc, _ := cfg.Connection(name)
		d, err := connector.Start(ctx, host, dc)
		if err != nil {
			return t, connectorCode(err)
		}
		caps, err := d.Capabilities(ctx)
		d.Kill()
		if err != nil {
			return t, fmt.Errorf("pipeline %s: destination %s: %w", p.Name, name, err)
		}
		if !caps.Resnapshot {
			t.lacking = append(t.lacking, name)
		}
	}
	return t, nil
}

// resnapshotStore is the pipeline's request directory, beside its status file.
func resnapshotStore(home string, p *config.Pipeline) resnapshot.Store {
	return resnapshot.Store{Dir: filepath.Join(filepath.Dir(statusFile(home, p)), "resnapshot")}
}

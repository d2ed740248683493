package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

type discoveredField struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable"`
}

type discoveredStream struct {
	Name       string            `json:"name"`
	PrimaryKey []string          `json:"primary_key"`
	Modes      []string          `json:"modes"`
	SchemaID   string            `json:"schema_id"`
	Fields     []discoveredField `json:"fields"`
}

func discoverCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "discover",
		Usage:     "list a source connection's streams and their schemas",
		ArgsUsage: "CONNECTION",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON for scripts"},
			&cli.BoolFlag{Name: "offline", Usage: "never contact a registry"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			args := c.Args().Slice()
			if len(args) != 1 {
				return withCode(exitUsage, fmt.Errorf("discover: want one connection name"))
			}
			s, err := startNamedConnection(ctx, c, g, args[0])
			if err != nil {
				return err
			}
			defer s.Kill()
			if err := s.Require(connector.KindSource, "connection "+s.Conn.Name); err != nil {
				return err
			}
			streams, err := s.Discover(ctx)
			if err != nil {
				return err
			}
			var out []discoveredStream
			for _, st := range streams {
				sc, err := protocol.DecodeSchema(memory.DefaultAllocator, st.ArrowSchema)
				if err != nil {
					return fmt.Errorf("stream %s: %w", st.Name, err)
				}
				ds := discoveredStream{Name: st.Name, PrimaryKey: st.PrimaryKey, SchemaID: st.SchemaID}
				for _, m := range st.Modes {
					ds.Modes = append(ds.Modes, m.String())
				}
				for _, f := range change.DataFields(sc) {
					ds.Fields = append(ds.Fields, discoveredField{Name: f.Name, Type: f.Type.String(), Nullable: f.Nullable})
				}
				out = append(out, ds)
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.Root().Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			for _, ds := range out {
				fmt.Fprintf(c.Root().Writer, "stream %s  key (%s)  modes %s\n", ds.Name, strings.Join(ds.PrimaryKey, ", "), strings.Join(ds.Modes, ", "))
				tw := tabwriter.NewWriter(c.Root().Writer, 0, 4, 2, ' ', 0)
				for _, f := range ds.Fields {
					null := "not null"
					if f.Nullable {
						null = "null"
					}
					fmt.Fprintf(tw, "  %s\t%s\t%s\n", f.Name, f.Type, null)
				}
				tw.Flush()
			}
			return nil
		},
	}
}

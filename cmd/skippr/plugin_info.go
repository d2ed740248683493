package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/engine/pluginhost"
)

func pluginInfoCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:        "info",
		Usage:       "show a plugin's versions in the registry and its settings",
		ArgsUsage:   "NAME",
		Description: helpText("plugin-info"),
		Flags:       append(registryFlags(), &cli.BoolFlag{Name: "json", Usage: "print JSON for scripts"}),
		Action: func(ctx context.Context, c *cli.Command) error {
			args := c.Args().Slice()
			if len(args) != 1 {
				return withCode(exitUsage, fmt.Errorf("plugin info: want NAME, got %d arguments", len(args)))
			}
			name := args[0]
			rc, err := pluginClient(c, g)
			if err != nil {
				return err
			}
			si, err := rc.Find(ctx, name)
			if err != nil {
				return withCode(registryExitCode(err), err)
			}
			out := connector.Describe(ctx, rc, si.Info(name), g.Log)
			if c.Bool("json") {
				enc := json.NewEncoder(c.Root().Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			return out.WriteText(c.Root().Writer, pluginhost.Protocols)
		},
	}
}

func pluginMirrorCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:        "mirror",
		Usage:       "copy the pinned plugins and the signed index into a folder, for air-gapped machines",
		ArgsUsage:   "DIR",
		Description: helpText("plugin-mirror"),
		Flags:       registryFlags(),
		Action: func(ctx context.Context, c *cli.Command) error {
			args := c.Args().Slice()
			if len(args) != 1 {
				return withCode(exitUsage, fmt.Errorf("plugin mirror: want DIR, got %d arguments", len(args)))
			}
			rc, err := pluginClient(c, g)
			if err != nil {
				return err
			}
			ms, err := rc.Mirror(ctx, lockPath(g), args[0])
			if err != nil {
				return withCode(registryExitCode(err), err)
			}
			for _, m := range ms {
				fmt.Fprintf(c.Root().Writer, "mirrored %s into %s: %s\n", m.From, m.Dir, strings.Join(m.Plugins, ", "))
			}
			return nil
		},
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/pluginhost"
)

func commands(g *globals) []*cli.Command {
	return []*cli.Command{
		versionCommand(),
		pluginCommand(g),
		registryCommand(g),
		connectCommand(g),
		discoverCommand(g),
		syncCommand(g),
		statusCommand(g),
		walCommand(g),
		teardownCommand(g),
		resnapshotCommand(g),
		lakeCommand(g),
		queryCommand(g),
		serveCommand(g),
		workerCommand(g),
		fleetCommand(g),
	}
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the engine version and the plugin protocol versions it speaks",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON for scripts"}},
		Action: func(ctx context.Context, c *cli.Command) error {
			v := map[string]any{"version": version, "protocol_versions": pluginhost.Protocols, "go": runtime.Version(), "platform": runtime.GOOS + "_" + runtime.GOARCH}
			if c.Bool("json") {
				return json.NewEncoder(c.Root().Writer).Encode(v)
			}
			_, err := fmt.Fprintf(c.Root().Writer, "skippr %s (plugin protocol %v, %s, %s)\n", version, pluginhost.Protocols, v["go"], v["platform"])
			return err
		},
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/urfave/cli/v2"

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
		workerCommand(g),
		fleetCommand(g),
	}
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the engine version and the plugin protocol versions it speaks",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON for scripts"}},
		Action: func(c *cli.Context) error {
			v := map[string]any{"version": version, "protocol_versions": pluginhost.Protocols, "go": runtime.Version(), "platform": runtime.GOOS + "_" + runtime.GOARCH}
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(v)
			}
			_, err := fmt.Fprintf(c.App.Writer, "skippr %s (plugin protocol %v, %s, %s)\n", version, pluginhost.Protocols, v["go"], v["platform"])
			return err
		},
	}
}

package main

import (
	"encoding/json"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/run"
)

// printSyncSummary prints what `sync --once` did, from the pipelines' final status files: a table on stdout,
// or one JSON object with --log-format json.
func printSyncSummary(c *cli.Command, g *globals, pipes []*config.Pipeline) error {
	sum, err := run.Summary(g.Home, pipes, g.Started)
	if err != nil {
		return err
	}
	if g.LogFormat == "json" {
		return json.NewEncoder(c.Root().Writer).Encode(sum)
	}
	return sum.WriteText(c.Root().Writer)
}

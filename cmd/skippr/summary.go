package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/pipeline"
)

// printSyncSummary prints what `sync --once` did, from the pipelines' final status files: a table on stdout,
// or one JSON object with --log-format json.
func printSyncSummary(c *cli.Command, g *globals, pipes []*config.Pipeline) error {
	var sts []pipeline.Status
	for _, p := range pipes {
		b, err := os.ReadFile(statusFile(g.Home, p))
		if err != nil {
			return fmt.Errorf("summary of pipeline %s: %w", p.Name, err)
		}
		var st pipeline.Status
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("summary of pipeline %s: status file: %w", p.Name, err)
		}
		sts = append(sts, st)
	}
	sum := pipeline.Summarize(sts, time.Since(g.Started))
	if g.LogFormat == "json" {
		return json.NewEncoder(c.Root().Writer).Encode(sum)
	}
	return sum.WriteText(c.Root().Writer)
}

package main

import (
	"context"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
)

// backlogBench fills a local WAL with rows of datagen while apply is paused, then applies the whole backlog
// as one coalesced range into testdest (apply max_bytes above the backlog) and prints testdest's peak RSS:
// what issue #31 bounds. The WAL is never held back while paused, so the backlog is as large as asked.
func backlogBench(ctx context.Context, binDir string, rows int64) {
	settings := []byte(fmt.Sprintf(`{"seed": 3, "rows": %d, "batch_size": 10000, "update_ratio": 0.2, "delete_ratio": 0.05}`, rows))
	walDir, _ := os.MkdirTemp("", "skippr-bench-wal-")
	outDir, _ := os.MkdirTemp("", "skippr-bench-out-")
	defer os.RemoveAll(walDir)
	defer os.RemoveAll(outDir)
	run := func(paused bool) (pipeline.Status, int64, time.Duration) {
		src := startPlugin(ctx, filepath.Join(binDir, "skippr-plugin-datagen"))
		dst := startPlugin(ctx, filepath.Join(binDir, "skippr-plugin-testdest"))
		defer src.Kill()
		defer dst.Kill()
		l, err := wal.Open(ctx, "file://"+walDir, wal.Options{})
		if err != nil {
			log.Fatal(err)
		}
		defer l.Close()
		if err := l.Acquire(ctx); err != nil {
			log.Fatal(err)
		}
		var last pipeline.Status
		start := time.Now()
		err = pipeline.Run(ctx, pipeline.Config{
			Name:   "backlog",
			Source: pipeline.Endpoint[pipeline.Source]{Name: "gen", Plugin: connector.Attach(src, settings)},
			Destinations: []pipeline.Endpoint[pipeline.Destination]{{Name: "sink",
				Plugin: connector.Attach(dst, []byte(fmt.Sprintf(`{"dir": %q}`, outDir))),
				Apply:  pipeline.ApplyLimits{MaxBytes: 1 << 50}}},
			Log: l, ExactlyOnce: true, ApplyPaused: paused, Once: true,
			MaxUnappliedBytes: 1 << 50,
			OnStatus:          func(s pipeline.Status) { last = s },
		})
		if err != nil {
			log.Fatal(err)
		}
		return last, procPeakRSS(dst.Pid()), time.Since(start)
	}
	filled, _, fillDur := run(true)
	walBytes := dirBytes(walDir)
	applied, rss, applyDur := run(false)
	applies := 0
	if err := filedest.Scan(outDir, func(f filedest.Frame) error {
		if f.Apply != nil {
			applies++
		}
		return nil
	}); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("\n## Backlog applied as one range (testdest)\n\n")
	fmt.Printf("| backlog | WAL bytes | fill | apply | applies | rows applied | testdest peak RSS |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	fmt.Printf("| %d rows | %s | %s | %s | %d | %d | %s |\n", filled.RowsCommitted, mib(walBytes),
		fillDur.Round(time.Millisecond), applyDur.Round(time.Millisecond), applies, applied.RowsApplied, mib(rss))
}

func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

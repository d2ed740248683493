package serve

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A plugin process's temporary files (a query engine's WAL copies and databases, a warehouse destination's
// staged Parquet files, DuckDB's spill) go under one scratch directory of its own: Serve points TMPDIR at it,
// so os.TempDir and os.MkdirTemp("", …) in the plugin land there, and removes it when the host ends the
// plugin. A process killed outside Serve's control (SIGKILL, the OOM killer, a host that died) cannot remove
// anything, so each plugin start sweeps the scratch directories of processes that are gone: the owner holds
// an exclusive lock on the directory's lock file for its whole life (released by the kernel when it dies),
// and a directory younger than scratchGrace is left alone, since its owner may not hold the lock yet.
const (
	scratchPrefix   = "skippr-scratch-"
	scratchLockFile = ".lock"
	scratchGrace    = time.Minute
)

// scratchDir makes the process's scratch directory in parent (sweeping dead processes' first) and sets
// TMPDIR to it; done restores TMPDIR and removes the directory. On failure nothing changes and the plugin
// keeps the system's temp directory: scratch space is housekeeping, not a reason to refuse to start.
func scratchDir(parent, name string, log *slog.Logger) (done func()) {
	sweepScratch(parent, log)
	dir, unlock, err := makeScratch(parent, name)
	if err != nil {
		log.Warn("no scratch directory; temporary files go to the system's temp directory", "err", err)
		return func() {}
	}
	prev, had := os.LookupEnv("TMPDIR")
	os.Setenv("TMPDIR", dir)
	return func() {
		if had {
			os.Setenv("TMPDIR", prev)
		} else {
			os.Unsetenv("TMPDIR")
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("remove scratch directory", "dir", dir, "err", err)
		}
		unlock()
	}
}

// makeScratch creates a scratch directory in parent and takes its lock.
func makeScratch(parent, name string) (dir string, unlock func(), err error) {
	if dir, err = os.MkdirTemp(parent, fmt.Sprintf("%s%s-%d-", scratchPrefix, safeName(name), os.Getpid())); err != nil {
		return "", nil, err
	}
	if unlock, err = lockScratch(filepath.Join(dir, scratchLockFile)); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return dir, unlock, nil
}

// sweepScratch removes the scratch directories in parent whose process is gone: older than scratchGrace and
// with a lock file nobody holds.
func sweepScratch(parent string, log *slog.Logger) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), scratchPrefix) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < scratchGrace {
			continue
		}
		unlock, err := lockScratch(filepath.Join(dir, scratchLockFile))
		if err != nil {
			continue // held: its process is alive (or the lock cannot be taken here: leave it)
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("remove a dead plugin process's scratch directory", "dir", dir, "err", err)
		} else {
			log.Debug("removed a dead plugin process's scratch directory", "dir", dir)
		}
		unlock()
	}
}

// safeName keeps a plugin name's letters, digits, '-' and '_' for a directory name.
func safeName(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, name)
}

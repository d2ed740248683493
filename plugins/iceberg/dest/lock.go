package dest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// catalogLock lets compaction win against a running sync on the embedded SQL catalog. Applies hold it shared
// (several pipelines may apply at once); a compaction holds it exclusively from planning to commit. Without
// it, a compaction that takes longer than the gap between two applies is planned again after every lost
// commit and, under constant load, never lands. The lock is an flock(2) on a file beside the catalog's
// SQLite file, so it works between processes on one host, which is where an embedded catalog lives. A REST
// catalog has no such file: there a compaction retries as before.
type catalogLock struct{ main, gate *os.File }

// lockCatalog takes the catalog's lock, waiting (while ctx lasts) for the other kind to be released. It
// returns a nil lock for catalogs that have none.
//
// flock prefers no one, so a compaction could wait forever behind applies that follow each other closely. A
// second file, the gate, gives it priority: an apply passes the gate (shared, for a moment) before taking
// the lock; a compaction closes the gate (exclusive) and then waits for the applies in flight.
func lockCatalog(ctx context.Context, s Settings, exclusive bool) (*catalogLock, error) {
	if s.Catalog.Type != "sql" {
		return nil, nil
	}
	gate, err := flock(ctx, s.Catalog.Path+".gate", exclusive)
	if err != nil {
		return nil, err
	}
	main, err := flock(ctx, s.Catalog.Path+".lock", exclusive)
	if err != nil {
		gate.Close()
		return nil, err
	}
	if !exclusive {
		gate.Close()
		gate = nil
	}
	return &catalogLock{main: main, gate: gate}, nil
}

// flock opens path and locks it, polling so that ctx can end the wait.
func flock(ctx context.Context, path string, exclusive bool) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("catalog lock %s: %w", path, err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("catalog lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("catalog lock %s: %w", path, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// unlock releases the lock; closing a file releases its flock.
func (l *catalogLock) unlock() {
	if l == nil {
		return
	}
	l.main.Close()
	if l.gate != nil {
		l.gate.Close()
	}
}

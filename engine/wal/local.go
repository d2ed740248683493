package wal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// localStore keeps the log in a directory; see doc.go for the layout.
type localStore struct {
	root string
}

func (s *localStore) path(name string) string { return filepath.Join(s.root, filepath.FromSlash(name)) }

func (s *localStore) url(name string) string {
	if name == "" {
		return "file://" + filepath.ToSlash(s.root)
	}
	return "file://" + filepath.ToSlash(s.path(name))
}

func (s *localStore) prepare(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, d := range []string{"", segmentsDir, commitsDir, checkpointsDir} {
		p := s.path(d)
		if _, err := os.Stat(p); err == nil {
			continue
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", p, err)
		}
		// The new directory entry must survive a crash like any file would.
		if err := syncDir(filepath.Dir(p)); err != nil {
			return err
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// writeTemp writes data to a fresh hidden file in dir and fsyncs it.
func writeTemp(dir, base string, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, ".tmp-"+base+"-*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("write %s: %w", tmp, err)
	}
	return tmp, nil
}

// reserveSize is ample for a checkpoint record (a few hundred bytes) and the directory block it may need.
const reserveSize = 64 << 10

func (s *localStore) reserve() error {
	if _, err := os.Stat(s.path(reserveName)); err == nil {
		return nil
	}
	return s.put(context.Background(), reserveName, make([]byte, reserveSize))
}

func (s *localStore) unreserve() error { return os.Remove(s.path(reserveName)) }

func (s *localStore) put(ctx context.Context, name string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p := s.path(name)
	dir := filepath.Dir(p)
	tmp, err := writeTemp(dir, filepath.Base(p), data)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename %s: %w", p, err)
	}
	return syncDir(dir)
}

func (s *localStore) create(ctx context.Context, name string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p := s.path(name)
	dir := filepath.Dir(p)
	tmp, err := writeTemp(dir, filepath.Base(p), data)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotWritten, err)
	}
	// link(2) fails with EEXIST instead of replacing: an existing record is never overwritten.
	err = os.Link(tmp, p)
	os.Remove(tmp)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s: %w", p, errExists)
	}
	if err != nil {
		return fmt.Errorf("link %s: %w: %w", p, errNotWritten, err)
	}
	return syncDir(dir)
}

func (s *localStore) get(ctx context.Context, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(s.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNotFound
	}
	return b, err
}

func (s *localStore) list(ctx context.Context, dir, startAfter string) ([]object, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(s.path(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []object
	for _, e := range ents { // ReadDir sorts by name
		if strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() {
			continue
		}
		name := dir + "/" + e.Name()
		if name <= startAfter {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since ReadDir (Reclaim)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, object{name: name, size: info.Size()})
	}
	return out, nil
}

func (s *localStore) remove(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Not fsynced: a removal lost in a crash leaves an orphan or a reclaimed
	// object, both of which readers ignore and the next writer deletes again.
	if err := os.Remove(s.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (s *localStore) sweep(ctx context.Context) error {
	for _, d := range []string{"", segmentsDir, commitsDir, checkpointsDir} {
		ents, err := os.ReadDir(s.path(d))
		if err != nil {
			return err
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".tmp-") {
				if err := os.Remove(filepath.Join(s.path(d), e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
		}
	}
	return ctx.Err()
}

func (s *localStore) close() error { return nil }

// lockInfo is what the holder writes into the LOCK file, for error messages and Head.
type lockInfo struct {
	Owner string    `json:"owner"`
	PID   int       `json:"pid"`
	Epoch uint64    `json:"epoch"`
	Since time.Time `json:"since"`
}

type epochRecord struct {
	Epoch uint64 `json:"epoch"`
}

func (s *localStore) readEpoch(ctx context.Context) (uint64, error) {
	b, err := s.get(ctx, epochName)
	if errors.Is(err, errNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var r epochRecord
	if err := openRecord(kindEpoch, b, &r); err != nil {
		return 0, fmt.Errorf("%s: %w", s.url(epochName), err)
	}
	return r.Epoch, nil
}

func (s *localStore) readLockInfo() (lockInfo, bool) {
	var li lockInfo
	b, err := os.ReadFile(s.path(lockName))
	if err != nil || json.Unmarshal(b, &li) != nil {
		return li, false
	}
	return li, true
}

func (s *localStore) lock(ctx context.Context, req lockRequest) (writerLease, error) {
	p := s.path(lockName)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", p, err)
	}
	// flock belongs to the open file description, so a second Log in this
	// same process is refused exactly like another process.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			if li, ok := s.readLockInfo(); ok {
				return nil, fmt.Errorf("wal %s: %w: held by %s (pid %d, epoch %d) since %s, until that process exits or closes the log",
					s.url(""), ErrLocked, li.Owner, li.PID, li.Epoch, li.Since.Format(time.RFC3339))
			}
			return nil, fmt.Errorf("wal %s: %w: %s is held by a process that has not written its identity yet", s.url(""), ErrLocked, p)
		}
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	l := &localLease{f: f, path: p}
	fail := func(err error) (writerLease, error) {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
		return nil, err
	}
	prev, err := s.readEpoch(ctx)
	if err != nil {
		return fail(err)
	}
	l.ep = max(prev, req.minEpoch) + 1
	rec, err := sealRecord(kindEpoch, epochRecord{Epoch: l.ep})
	if err != nil {
		return fail(err)
	}
	if err := s.put(ctx, epochName, rec); err != nil {
		return fail(fmt.Errorf("write %s: %w", s.url(epochName), err))
	}
	l.own = req.owner
	info, _ := json.Marshal(lockInfo{Owner: req.owner, PID: os.Getpid(), Epoch: l.ep, Since: time.Now().UTC()})
	if err := f.Truncate(0); err != nil {
		return fail(fmt.Errorf("write %s: %w", p, err))
	}
	if _, err := f.WriteAt(append(info, '\n'), 0); err != nil {
		return fail(fmt.Errorf("write %s: %w", p, err))
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("fsync %s: %w", p, err))
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	l.ino = fi.Sys().(*syscall.Stat_t).Ino
	return l, nil
}

func (s *localStore) holder(ctx context.Context) (string, uint64, error) {
	ep, err := s.readEpoch(ctx)
	if err != nil {
		return "", 0, err
	}
	li, ok := s.readLockInfo()
	if !ok || li.PID <= 0 {
		return "", ep, nil
	}
	// Probing the flock itself (even shared) could make a concurrent Acquire
	// fail, so liveness is judged by the recorded pid instead.
	if !pidAlive(li.PID) {
		return "", ep, nil
	}
	return li.Owner, ep, nil
}

type localLease struct {
	f    *os.File
	path string
	ino  uint64
	ep   uint64
	own  string
}

func (l *localLease) epoch() uint64       { return l.ep }
func (l *localLease) owner() string       { return l.own }
func (l *localLease) takenOver() string   { return "" } // flock dies with its holder: no zombie writer
func (l *localLease) deadline() time.Time { return time.Time{} }

// check catches the one way two local writers could coexist: the directory or
// LOCK file being deleted or replaced under a running writer.
func (l *localLease) check() error {
	fi, err := os.Stat(l.path)
	if err != nil {
		return fmt.Errorf("lock file %s: %v: %w", l.path, err, ErrFenced)
	}
	if fi.Sys().(*syscall.Stat_t).Ino != l.ino {
		return fmt.Errorf("lock file %s was replaced: %w", l.path, ErrFenced)
	}
	return nil
}

func (l *localLease) release(context.Context) error {
	l.f.Truncate(0) // clear the identity before the lock is free
	err := unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A commit that finds the disk full says so (ErrNoSpace), leaves no partial segment or temp file behind, and
// leaves the log writable: the same frames commit once Reclaim has freed space.
func TestCommitOnFullDiskCanBeRetried(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root (CI runs as root)")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	l := mustAcquire(t, "file://"+dir, Options{})
	t.Cleanup(func() { l.Close() })
	var (
		frames []Frame
		err    error
		n      uint64
	)
	for i := 1; ; i++ {
		// Random-looking rows compress badly, so the disk fills after a few entries.
		frames = []Frame{batchFrame(t, "s", 2000, uint64(i))}
		_, err = l.Commit(ctxT(t), frames, []byte(fmt.Sprint(i)))
		if err != nil {
			break
		}
		n++
		if i > 1000 {
			t.Fatal("a 1 MiB disk never filled")
		}
	}
	wantErr(t, err, ErrNoSpace, fmt.Sprintf("wal commit %d", n+1))
	if n == 0 {
		t.Fatal("not even one entry fit: the test proves nothing")
	}
	if segs := names(t, l, segmentsDir); len(segs) != int(n) {
		t.Fatalf("%d entries committed but %d segments on disk: %v", n, len(segs), segs)
	}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".tmp-") {
			t.Errorf("temp file left behind: %s", p)
		}
		return nil
	})
	// Fill the last bytes too: Reclaim must write its checkpoint record before it may delete anything.
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for _, err = filler.Write(make([]byte, 4096)); err == nil; _, err = filler.Write(make([]byte, 4096)) {
	}
	filler.Close()
	if err := l.Reclaim(ctxT(t), n); err != nil {
		t.Fatalf("reclaim on the full disk: %v", err)
	}
	rec, err := l.Commit(ctxT(t), frames, []byte("retried"))
	if err != nil {
		t.Fatalf("retry after reclaim: %v", err)
	}
	if rec.Seq != n+1 {
		t.Fatalf("retried entry has seq %d, want %d", rec.Seq, n+1)
	}
	got, err := l.ReadSegment(ctxT(t), rec)
	if err != nil || !framesEqual(got, frames) {
		t.Fatalf("retried entry reads back wrong: %v", err)
	}
}

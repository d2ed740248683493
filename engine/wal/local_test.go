package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestLocalLockHeldByOtherProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	url := "file://" + dir
	pid, _, kill := startWriter(t, url, "WAL_TEST_HELPER_COMMITS=2")

	l := mustOpen(t, url, Options{Owner: "parent"})
	wantErr(t, l.Acquire(ctxT(t)), ErrLocked, "held by helper-process", fmt.Sprintf("pid %d", pid), "epoch 1")
	if h := mustHead(t, l); h.Holder != "helper-process" || h.LastSeq != 2 {
		t.Fatalf("head while the other process holds the log: %+v", h)
	}

	kill() // the kernel drops the flock of a dead process
	if h := mustHead(t, l); h.Holder != "" {
		t.Fatalf("head names a dead holder: %+v", h)
	}
	if err := l.Acquire(ctxT(t)); err != nil {
		t.Fatalf("Acquire after the holder died: %v", err)
	}
	if rec := mustCommit(t, l, nil, "x"); rec.Seq != 3 || rec.Epoch != 2 {
		t.Fatalf("commit after takeover: %+v", rec)
	}
}

func TestLocalCleanExitReleasesLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	url := "file://" + dir
	_, stop, _ := startWriter(t, url, "WAL_TEST_HELPER_COMMITS=1")
	stop()
	l := mustAcquire(t, url, Options{Owner: "parent"})
	if h := mustHead(t, l); h.Epoch != 2 || h.LastSeq != 1 {
		t.Fatalf("head: %+v", h)
	}
}

func TestLocalLockFileReplacedFencesWriter(t *testing.T) {
	url, opts := localBackend().fresh(t)
	l := mustAcquire(t, url, opts)
	mustCommit(t, l, nil, "a")
	lock := l.st.(*localStore).path(lockName)
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	_, err := l.Commit(ctxT(t), nil, []byte("b"))
	wantErr(t, err, ErrFenced, "lock file "+lock)
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = l.Commit(ctxT(t), nil, []byte("b"))
	wantErr(t, err, ErrFenced, "was replaced")
}

func TestLocalLeavesNoTempFiles(t *testing.T) {
	url, opts := localBackend().fresh(t)
	l := mustAcquire(t, url, opts)
	root := l.st.(*localStore).root
	// A crashed writer's half-written temp file.
	if err := os.WriteFile(filepath.Join(root, commitsDir, ".tmp-x-1"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		mustCommit(t, l, []Frame{batchFrame(t, "s", 1, uint64(i))}, "c")
	}
	if got := mustEntries(t, l, 0); len(got) != 3 {
		t.Fatalf("entries: %v", seqsOf(got))
	}
	l.Close()
	mustAcquire(t, url, opts)
	for _, d := range []string{segmentsDir, commitsDir} {
		ents, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Name()[0] == '.' {
				t.Fatalf("temp file %s/%s survived Acquire", d, e.Name())
			}
		}
		if len(ents) != 3 {
			t.Fatalf("%s holds %d files", d, len(ents))
		}
	}
}

// A commit record write that fails after the segment is stored leaves the
// outcome unknown: the Log refuses to write again, and a reopened Log
// cleans up and carries on from what is durable.
func TestFailedCommitRecordPoisonsTheLog(t *testing.T) {
	url, opts := localBackend().fresh(t)
	l := mustAcquire(t, url, opts)
	mustCommit(t, l, []Frame{batchFrame(t, "s", 1, 1)}, "a")
	commits := filepath.Join(l.st.(*localStore).root, commitsDir)
	if err := os.Rename(commits, commits+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(commits, nil, 0o644); err != nil { // a file where the directory was
		t.Fatal(err)
	}
	_, err := l.Commit(ctxT(t), []Frame{batchFrame(t, "s", 1, 2)}, []byte("b"))
	wantErr(t, err, nil, "wal commit 2: commit record", "outcome unknown")
	if err := os.Remove(commits); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(commits+".away", commits); err != nil {
		t.Fatal(err)
	}
	_, err = l.Commit(ctxT(t), []Frame{batchFrame(t, "s", 1, 2)}, []byte("b"))
	wantErr(t, err, nil, "refusing to write after an earlier failure; reopen the log")
	if n := names(t, l, segmentsDir); len(n) != 2 {
		t.Fatalf("segments: %v", n)
	}
	l.Close()

	l2 := mustAcquire(t, url, opts)
	if n := names(t, l2, segmentsDir); len(n) != 1 {
		t.Fatalf("orphan segment of the failed commit not cleaned: %v", n)
	}
	if rec := mustCommit(t, l2, []Frame{batchFrame(t, "s", 1, 2)}, "b"); rec.Seq != 2 {
		t.Fatalf("seq %d", rec.Seq)
	}
}

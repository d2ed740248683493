package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestVerifyInstalledStamp(t *testing.T) {
	content := []byte("#!/bin/sh\necho plugin\n")
	sum := sha256.Sum256(content)
	want := hex.EncodeToString(sum[:])
	// An hour ahead: every file these cases write is old enough to be stamped, unless a case says otherwise.
	later := func() time.Time { return time.Now().Add(time.Hour) }
	for _, tc := range []struct {
		name string
		now  func() time.Time
		// between the first and the second verification
		change    func(t *testing.T, path string)
		wantHash2 bool  // the second verification reads the file
		wantErr2  error // and fails with
	}{
		{name: "unchanged: the stamp vouches, no second read", now: later},
		{name: "changed within the racy window: no stamp, read again", now: time.Now, wantHash2: true},
		{name: "same size, mtime put back: ctime tells", now: later, wantHash2: true, wantErr2: ErrChecksum,
			change: func(t *testing.T, path string) {
				fi, _ := os.Stat(path)
				waitForNextTick(t, path)
				if err := os.WriteFile(path, []byte("#!/bin/sh\necho tamper\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "replaced by a copy with the same bytes: another inode, read again and accepted", now: later, wantHash2: true,
			change: func(t *testing.T, path string) {
				tmp := path + ".new"
				if err := os.WriteFile(tmp, content, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, path); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "a stamp of another checksum does not vouch", now: later, wantHash2: true,
			change: func(t *testing.T, path string) {
				s, err := readStamp(filepath.Join(filepath.Dir(path), stampName))
				if err != nil {
					t.Fatal(err)
				}
				s.SHA256 = "00" + s.SHA256[2:]
				if err := writeStamp(filepath.Join(filepath.Dir(path), stampName), s); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "a torn stamp does not parse and is read again", now: later, wantHash2: true,
			change: func(t *testing.T, path string) {
				if err := os.WriteFile(filepath.Join(filepath.Dir(path), stampName), []byte(`{"sha256":"`), 0o644); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "skippr-plugin-x")
			if err := os.WriteFile(path, content, 0o755); err != nil {
				t.Fatal(err)
			}
			hashes := 0
			v := stampedVerifier{window: racyWindow, now: tc.now, hash: func(p, w string) error { hashes++; return VerifyFile(p, w) }}
			id, err := v.verify(path, want)
			if err != nil || id.IsZero() || hashes != 1 {
				t.Fatalf("first verification: id %+v, err %v, %d reads; want an identity, no error, one read", id, err, hashes)
			}
			if tc.change != nil {
				tc.change(t, path)
			}
			_, err = v.verify(path, want)
			if !errors.Is(err, tc.wantErr2) || (tc.wantErr2 == nil && err != nil) {
				t.Fatalf("second verification: %v, want %v", err, tc.wantErr2)
			}
			if got := hashes == 2; got != tc.wantHash2 {
				t.Fatalf("second verification read the file: %v, want %v", got, tc.wantHash2)
			}
		})
	}
}

// waitForNextTick waits until the clock that stamps ctime has moved past the file's ctime, so that a change
// made now gets a later one (the kernel's file clock is coarse: a tick of a few milliseconds).
func waitForNextTick(t *testing.T, path string) {
	before, err := StatID(path)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	probe := filepath.Join(filepath.Dir(path), "tick")
	for time.Now().Before(deadline) {
		if err := os.WriteFile(probe, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := StatID(probe)
		if err != nil {
			t.Fatal(err)
		}
		if p.CtimeNs > before.CtimeNs {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the file clock did not move in 10 s")
}

package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

func TestMirrorThenInstallAirGapped(t *testing.T) {
	f := newFixture(t)
	host := f.publish("echo", "1.0.0", "source", 1)
	foreign := f.addForeign("echo", "1.0.0", "windows", "arm64", "source", 1)
	f.publish("echo", "1.1.0", "source", 1) // not pinned: not mirrored
	f.sign()
	srv, _ := f.serve()

	lockPath := filepath.Join(t.TempDir(), "skippr.lock")
	online := newClient(t, t.TempDir(), nil, f.reg(srv.URL))
	if _, err := online.Install(testCtx(t), "echo", "1.0.0", lockPath); err != nil {
		t.Fatal(err)
	}
	mirrorDir := filepath.Join(t.TempDir(), "mirror")
	ms, err := online.Mirror(testCtx(t), lockPath, mirrorDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].Dir != mirrorDir || len(ms[0].Plugins) != 1 {
		t.Fatalf("mirrored %+v", ms)
	}
	for _, name := range []string{IndexFile, SignatureFile} {
		orig, _ := os.ReadFile(filepath.Join(f.dir, name))
		cp, err := os.ReadFile(filepath.Join(mirrorDir, name))
		if err != nil || !bytes.Equal(orig, cp) {
			t.Fatalf("%s not copied verbatim (err %v)", name, err)
		}
	}
	for _, a := range []Artifact{host, foreign} {
		if err := VerifyFile(filepath.Join(mirrorDir, filepath.FromSlash(a.URL)), a.SHA256); err != nil {
			t.Errorf("mirror lacks a pinned platform: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(mirrorDir, "echo", "1.1.0")); !os.IsNotExist(err) {
		t.Errorf("unpinned version mirrored: %v", err)
	}
	srv.Close() // the original registry is gone: air-gapped from here

	offline := newClient(t, t.TempDir(), nil, f.reg("file://"+mirrorDir), f.reg(srv.URL))
	got, err := offline.Ensure(testCtx(t), EnsureRequest{Name: "echo", LockPath: lockPath})
	if err != nil {
		t.Fatal(err)
	}
	if got.SHA256 != host.SHA256 {
		t.Fatalf("installed %+v from the mirror", got)
	}
	// An explicit install of the pinned version works from the mirror too.
	home := t.TempDir()
	c := newClient(t, home, nil, f.reg("file://"+mirrorDir))
	if _, err := c.Install(testCtx(t), "echo", "1.0.0", ""); err != nil {
		t.Fatal(err)
	}
	// The unpinned newer version is listed but its binary is not there.
	if _, err := c.Install(testCtx(t), "echo", "1.1.0", ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("install of an unmirrored version: %v", err)
	}
	assertNothingElse(t, home, "echo/1.0.0")
}

// assertNothingElse fails if plugins/ holds a version dir other than keep.
func assertNothingElse(t *testing.T, home, keep string) {
	t.Helper()
	for _, e := range pluginsEntries(t, home) {
		switch e {
		case ".lock", filepath.Dir(keep), keep, filepath.Join(keep, BinaryName(filepath.Dir(keep))):
		default:
			t.Errorf("unexpected %s under plugins/", e)
		}
	}
}

// An index may point at binaries elsewhere (a CDN). A mirror cannot rewrite
// those URLs without breaking the signature, so it stores the binaries by
// hash and installs look there first.
func TestMirrorAbsoluteArtifactURLs(t *testing.T) {
	f := newFixture(t)
	art := f.publish("echo", "1.0.0", "source", 1)
	cdnDir := t.TempDir()
	if err := os.CopyFS(cdnDir, os.DirFS(f.dir)); err != nil {
		t.Fatal(err)
	}
	cdn := httptest.NewServer(http.FileServer(http.Dir(cdnDir)))
	defer cdn.Close()
	// Point the index at the CDN and drop the local copy.
	ix, err := readIndexFile(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	abs := cdn.URL + "/" + art.URL
	a := ix.Plugins["echo"].Versions["1.0.0"].Platforms[HostPlatform().String()]
	a.URL = abs
	ix.Plugins["echo"].Versions["1.0.0"].Platforms[HostPlatform().String()] = a
	if err := writeIndexFile(f.dir, ix); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(f.dir, "echo"))
	f.sign()

	lockPath := filepath.Join(t.TempDir(), "skippr.lock")
	c := newClient(t, t.TempDir(), nil, f.reg(f.fileURL()))
	if _, err := c.Install(testCtx(t), "echo", "", lockPath); err != nil {
		t.Fatal(err)
	}
	mirrorDir := t.TempDir()
	if _, err := c.Mirror(testCtx(t), lockPath, mirrorDir); err != nil {
		t.Fatal(err)
	}
	if err := VerifyFile(filepath.Join(mirrorDir, "blobs", "sha256", art.SHA256), art.SHA256); err != nil {
		t.Fatal(err)
	}
	cdn.Close()
	off := newClient(t, t.TempDir(), nil, f.reg("file://"+mirrorDir))
	if _, err := off.Ensure(testCtx(t), EnsureRequest{Name: "echo", LockPath: lockPath}); err != nil {
		t.Fatal(err)
	}
}

func TestMirrorRefusesLockMismatch(t *testing.T) {
	f := newFixture(t)
	f.publish("echo", "1.0.0", "source", 1)
	f.sign()
	lockPath := filepath.Join(t.TempDir(), "skippr.lock")
	c := newClient(t, t.TempDir(), nil, f.reg(f.fileURL()))
	if _, err := c.Install(testCtx(t), "echo", "", lockPath); err != nil {
		t.Fatal(err)
	}
	// Hand-edit the lock's hash for this platform.
	b, _ := os.ReadFile(lockPath)
	var l Lock
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	e := l.Plugins["echo"]
	e.SHA256[HostPlatform().String()] = "00000000000000000000000000000000000000000000000000000000000000ff"
	l.Plugins["echo"] = e
	if err := l.Write(lockPath); err != nil {
		t.Fatal(err)
	}
	mirrorDir := t.TempDir()
	_, err := newClient(t, t.TempDir(), nil, f.reg(f.fileURL())).Mirror(context.Background(), lockPath, mirrorDir)
	if !errors.Is(err, ErrLockMismatch) {
		t.Fatalf("error %v", err)
	}
	if ents, _ := os.ReadDir(mirrorDir); len(ents) != 0 {
		t.Errorf("mirror wrote %d entries before failing", len(ents))
	}
}

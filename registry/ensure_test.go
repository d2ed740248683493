package registry

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnsure(t *testing.T) {
	f := newFixture(t)
	v1 := f.publish("echo", "1.0.0", "source", 1)
	f.addForeign("echo", "1.0.0", "windows", "amd64", "source", 1)
	f.sign()
	srv, log := f.serve()
	reg := f.reg(srv.URL)
	home := t.TempDir()
	lockPath := filepath.Join(t.TempDir(), "skippr.lock")

	// First use: not locked, not installed → resolve, install, record.
	c := newClient(t, home, nil, reg)
	inst, err := c.Ensure(testCtx(t), EnsureRequest{Name: "echo", Constraint: "~> 1.0", LockPath: lockPath})
	if err != nil {
		t.Fatal(err)
	}
	if inst.Version != "1.0.0" || inst.SHA256 != v1.SHA256 || inst.Path != PluginPath(home, "echo", "1.0.0") {
		t.Fatalf("ensure: %+v", inst)
	}
	lock, err := ReadLock(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	if e := lock.Plugins["echo"]; e.Version != "1.0.0" || len(e.SHA256) != 2 || e.SHA256["windows_amd64"] == "" {
		t.Fatalf("lock entry after first use: %+v", e)
	}

	// A newer version appears; the lock keeps 1.0.0.
	f.publish("echo", "1.1.0", "source", 1)
	f.sign()

	t.Run("reuses installed without network", func(t *testing.T) {
		before := len(log.binaries())
		c := newClient(t, home, nil, f.reg(closedPortURL(t)))
		got, err := c.Ensure(testCtx(t), EnsureRequest{Name: "echo", Constraint: "~> 1.0", LockPath: lockPath, Offline: true})
		if err != nil {
			t.Fatal(err)
		}
		// The identity of the verified bytes comes with it, for the plugin host's check of the started process.
		if id, err := StatID(inst.Path); err != nil || got.File != id {
			t.Fatalf("got the identity %+v, the file has %+v (%v)", got.File, id, err)
		}
		got.File = FileID{}
		if got != inst {
			t.Fatalf("got %+v, want %+v", got, inst)
		}
		if n := len(log.binaries()); n != before {
			t.Errorf("reuse downloaded %d binaries", n-before)
		}
	})

	t.Run("installs the locked version, not the newest", func(t *testing.T) {
		home2 := t.TempDir()
		c := newClient(t, home2, nil, reg)
		got, err := c.Ensure(testCtx(t), EnsureRequest{Name: "echo", Constraint: "~> 1.0", LockPath: lockPath})
		if err != nil {
			t.Fatal(err)
		}
		if got.Version != "1.0.0" || got.SHA256 != v1.SHA256 {
			t.Fatalf("installed %+v, want the locked 1.0.0", got)
		}
	})

	t.Run("offline and not installed", func(t *testing.T) {
		home2 := t.TempDir()
		c := newClient(t, home2, nil, reg)
		_, err := c.Ensure(testCtx(t), EnsureRequest{Name: "echo", Constraint: "~> 1.0", LockPath: lockPath, Offline: true})
		if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "plugin echo 1.0.0 is not installed and --offline is set") {
			t.Fatalf("error %v", err)
		}
		assertNothingInstalled(t, home2)
	})

	t.Run("offline and not locked", func(t *testing.T) {
		c := newClient(t, t.TempDir(), nil, reg)
		_, err := c.Ensure(testCtx(t), EnsureRequest{Name: "echo", LockPath: filepath.Join(t.TempDir(), "skippr.lock"), Offline: true})
		if !errors.Is(err, ErrNotInstalled) {
			t.Fatalf("error %v", err)
		}
	})

	t.Run("constraint changed", func(t *testing.T) {
		c := newClient(t, home, nil, reg) // a Client sees each index as first fetched
		_, err := c.Ensure(testCtx(t), EnsureRequest{Name: "echo", Constraint: ">= 1.1", LockPath: lockPath})
		if !errors.Is(err, ErrLockMismatch) || !strings.Contains(err.Error(), "skippr plugin install 'echo@>= 1.1'") {
			t.Fatalf("error %v", err)
		}
		// The explicit upgrade path works and rewrites the lock.
		up, err := c.Install(testCtx(t), "echo", ">= 1.1", lockPath)
		if err != nil || up.Version != "1.1.0" {
			t.Fatalf("install upgrade: %+v %v", up, err)
		}
		got, err := c.Ensure(testCtx(t), EnsureRequest{Name: "echo", Constraint: ">= 1.1", LockPath: lockPath})
		if err != nil || got.Version != "1.1.0" {
			t.Fatalf("ensure after upgrade: %+v %v", got, err)
		}
		// Restore the 1.0.0 pin for the next subtests.
		if _, err := c.Install(testCtx(t), "echo", "~> 1.0.0", lockPath); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("installed binary differs from lock", func(t *testing.T) {
		home2 := t.TempDir()
		c := newClient(t, home2, nil, reg)
		got, err := c.Ensure(testCtx(t), EnsureRequest{Name: "echo", LockPath: lockPath})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(got.Path, []byte("swapped"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, err = c.Ensure(testCtx(t), EnsureRequest{Name: "echo", LockPath: lockPath})
		if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "skippr plugin remove echo@1.0.0") {
			t.Fatalf("error %v", err)
		}
	})

	t.Run("registry republished the locked version", func(t *testing.T) {
		// Same key, same version, other bytes: a second folder built from scratch.
		evil := &fixture{t: t, dir: t.TempDir(), pub: f.pub, keyFile: f.keyFile}
		evil.publish("echo", "1.0.0", "both", 1) // kind differs → other bytes
		evil.sign()
		home2 := t.TempDir()
		c := newClient(t, home2, nil, evil.reg(evil.fileURL()))
		_, err := c.Ensure(testCtx(t), EnsureRequest{Name: "echo", LockPath: lockPath})
		if !errors.Is(err, ErrLockMismatch) || !strings.Contains(err.Error(), "republished") {
			t.Fatalf("error %v", err)
		}
		assertNothingInstalled(t, home2)
	})

	t.Run("protocol of locked version no longer spoken", func(t *testing.T) {
		c, err := New(Options{Home: home, Registries: []Registry{reg}, Protocols: []int{2}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Ensure(testCtx(t), EnsureRequest{Name: "echo", LockPath: lockPath})
		if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "no version of echo in the configured registries speaks protocol [2]") {
			t.Fatalf("error %v", err)
		}
		// Once a version speaking 2 is published, the refusal names it (the lock still pins 1.0.0).
		f.publish("echo", "2.0.0", "source", 2)
		f.sign()
		c, err = New(Options{Home: home, Registries: []Registry{reg}, Protocols: []int{2}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Ensure(testCtx(t), EnsureRequest{Name: "echo", LockPath: lockPath})
		if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "the newest version of echo that speaks protocol [2] is 2.0.0") {
			t.Fatalf("error %v", err)
		}
		_, err = c.Ensure(testCtx(t), EnsureRequest{Name: "echo", LockPath: lockPath, Offline: true})
		if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "(--offline)") {
			t.Fatalf("offline: error %v", err)
		}
	})
}

func TestEnsureLockedYankedVersionStillInstalls(t *testing.T) {
	f := newFixture(t)
	f.publish("echo", "1.0.0", "source", 1)
	f.sign()
	lockPath := filepath.Join(t.TempDir(), "skippr.lock")
	c := newClient(t, t.TempDir(), nil, f.reg(f.fileURL()))
	if _, err := c.Ensure(testCtx(t), EnsureRequest{Name: "echo", LockPath: lockPath}); err != nil {
		t.Fatal(err)
	}
	if err := Yank(f.dir, "echo", "1.0.0", "bad release"); err != nil {
		t.Fatal(err)
	}
	f.sign()
	// A fresh machine with the committed lock still gets the pinned bytes.
	c2 := newClient(t, t.TempDir(), nil, f.reg(f.fileURL()))
	if _, err := c2.Ensure(testCtx(t), EnsureRequest{Name: "echo", LockPath: lockPath}); err != nil {
		t.Fatal(err)
	}
	// Without the lock, the yanked version is not chosen.
	_, err := c2.Ensure(testCtx(t), EnsureRequest{Name: "echo", LockPath: filepath.Join(t.TempDir(), "skippr.lock")})
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "yanked: bad release") {
		t.Fatalf("error %v", err)
	}
}

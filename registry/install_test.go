package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestPublishAndInstall(t *testing.T) {
	f := newFixture(t)
	host := f.publish("echo", "1.2.3", "source", 1)
	foreignOS := "darwin"
	if HostPlatform().OS == "darwin" {
		foreignOS = "linux"
	}
	foreign := f.addForeign("echo", "1.2.3", foreignOS, "arm64", "source", 1)
	f.sign()
	srv, _ := f.serve()

	for _, tc := range []struct{ name, url string }{
		{"file", f.fileURL()},
		{"http", srv.URL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			lockPath := filepath.Join(t.TempDir(), "skippr.lock")
			var bar bytes.Buffer
			c := newClient(t, home, &bar, f.reg(tc.url))
			inst, err := c.Install(testCtx(t), "echo", "~> 1.2", lockPath)
			if err != nil {
				t.Fatal(err)
			}
			want := filepath.Join(home, "plugins", "echo", "1.2.3", "skippr-plugin-echo")
			if inst.Path != want || inst.SHA256 != host.SHA256 || inst.Version != "1.2.3" {
				t.Fatalf("installed %+v, want path %s sha %s", inst, want, host.SHA256)
			}
			st, err := os.Stat(inst.Path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o755 {
				t.Errorf("mode %v, want 0755", st.Mode().Perm())
			}
			if err := VerifyFile(inst.Path, host.SHA256); err != nil {
				t.Fatal(err)
			}
			// The installed binary is the real plugin: it answers for itself.
			info, err := ReadPluginInfo(testCtx(t), inst.Path)
			if err != nil || info.Name != "echo" || info.Version != "1.2.3" {
				t.Fatalf("installed binary reports %+v, %v", info, err)
			}
			if !strings.Contains(bar.String(), "100%") || !strings.Contains(bar.String(), "echo 1.2.3") {
				t.Errorf("progress output %q lacks the finished bar", bar.String())
			}

			lock, err := ReadLock(lockPath)
			if err != nil {
				t.Fatal(err)
			}
			if raw, _ := os.ReadFile(lockPath); !bytes.Contains(raw, []byte(`"constraint": "~> 1.2"`)) {
				t.Errorf("lock file escapes the constraint:\n%s", raw)
			}
			e := lock.Plugins["echo"]
			if e.Version != "1.2.3" || e.Constraint != "~> 1.2" || e.Kind != "source" || fmt.Sprint(e.ProtocolVersions) != "[1]" {
				t.Errorf("lock entry %+v", e)
			}
			if n, _ := NormalizeURL(tc.url); e.Registry != n {
				t.Errorf("lock registry %q, want %q", e.Registry, n)
			}
			wantSums := map[string]string{HostPlatform().String(): host.SHA256, foreignOS + "_arm64": foreign.SHA256}
			if fmt.Sprint(e.SHA256) != fmt.Sprint(wantSums) {
				t.Errorf("lock sha256 %v, want every platform %v", e.SHA256, wantSums)
			}
			if got := pluginsEntries(t, home); fmt.Sprint(got) != fmt.Sprint([]string{".lock", "echo", "echo/1.2.3", "echo/1.2.3/skippr-plugin-echo"}) {
				t.Errorf("plugins/ holds %v", got)
			}
		})
	}
}

func TestInstallFailuresLeaveNothing(t *testing.T) {
	good := newFixture(t)
	art := good.publish("echo", "1.0.0", "source", 1)
	good.sign()

	cases := []struct {
		name  string
		setup func(t *testing.T) Registry
		want  error
		msg   []string // substrings the error must contain
	}{
		{
			name: "tampered binary",
			setup: func(t *testing.T) Registry {
				f := copyFixture(t, good)
				p := filepath.Join(f.dir, filepath.FromSlash(art.URL))
				b, _ := os.ReadFile(p)
				b[len(b)/2] ^= 0xff
				os.WriteFile(p, b, 0o755)
				return f.reg(f.fileURL())
			},
			want: ErrChecksum,
			msg:  []string{"echo 1.0.0", "sha256 is", art.SHA256},
		},
		{
			name: "tampered index",
			setup: func(t *testing.T) Registry {
				f := copyFixture(t, good)
				p := filepath.Join(f.dir, IndexFile)
				b, _ := os.ReadFile(p)
				os.WriteFile(p, bytes.Replace(b, []byte(`"source"`), []byte(`"both"`), 1), 0o644)
				return f.reg(f.fileURL())
			},
			want: ErrSignature,
			msg:  []string{"modified after signing", good.pub.ID()},
		},
		{
			name: "untrusted key",
			setup: func(t *testing.T) Registry {
				other := newFixture(t)
				return Registry{URL: good.fileURL(), Keys: []PublicKey{other.pub}}
			},
			want: ErrSignature,
			msg:  []string{good.fileURL(), "signed by key " + good.pub.ID()},
		},
		{
			name: "unsigned",
			setup: func(t *testing.T) Registry {
				f := copyFixture(t, good)
				os.Remove(filepath.Join(f.dir, SignatureFile))
				return f.reg(f.fileURL())
			},
			want: ErrSignature,
			msg:  []string{"index.json.sig is missing"},
		},
		{
			name:  "unreachable",
			setup: func(t *testing.T) Registry { return good.reg(closedPortURL(t)) },
			want:  ErrUnreachable,
			msg:   []string{"127.0.0.1", "index.json"},
		},
		{
			name: "truncated download",
			setup: func(t *testing.T) Registry {
				files := http.FileServer(http.Dir(good.dir))
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if strings.HasSuffix(r.URL.Path, "skippr-plugin-echo") {
						b, _ := os.ReadFile(filepath.Join(good.dir, filepath.FromSlash(art.URL)))
						w.Header().Set("Content-Length", fmt.Sprint(len(b)))
						w.Write(b[:len(b)/3])
						panic(http.ErrAbortHandler) // drop the connection mid-body
					}
					files.ServeHTTP(w, r)
				}))
				t.Cleanup(srv.Close)
				return good.reg(srv.URL)
			},
			want: ErrUnreachable,
			msg:  []string{"truncated", fmt.Sprint(art.Size)},
		},
		{
			name: "wrong length announced",
			setup: func(t *testing.T) Registry {
				files := http.FileServer(http.Dir(good.dir))
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if strings.HasSuffix(r.URL.Path, "skippr-plugin-echo") {
						w.Write([]byte("short and wrong"))
						return
					}
					files.ServeHTTP(w, r)
				}))
				t.Cleanup(srv.Close)
				return good.reg(srv.URL)
			},
			want: ErrChecksum,
			msg:  []string{"got 15 bytes"},
		},
		{
			name: "binary missing",
			setup: func(t *testing.T) Registry {
				f := copyFixture(t, good)
				os.Remove(filepath.Join(f.dir, filepath.FromSlash(art.URL)))
				return f.reg(f.fileURL())
			},
			want: ErrNotFound,
			msg:  []string{"skippr-plugin-echo"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			lockPath := filepath.Join(t.TempDir(), "skippr.lock")
			c := newClient(t, home, nil, tc.setup(t))
			_, err := c.Install(testCtx(t), "echo", "", lockPath)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			t.Logf("error: %v", err)
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
			assertNothingInstalled(t, home)
			if _, statErr := os.Stat(lockPath); statErr == nil {
				t.Error("a failed install wrote the lock file")
			}
		})
	}
}

// copyFixture copies a registry folder so a test can damage it.
func copyFixture(t *testing.T, f *fixture) *fixture {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(f.dir)); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, dir: dst, pub: f.pub, keyFile: f.keyFile}
}

func TestProtocolMismatchRejectedBeforeDownload(t *testing.T) {
	f := newFixture(t)
	f.publish("echo", "1.4.0", "source", 1)
	f.publish("echo", "2.0.0", "source", 2)
	f.sign()
	srv, log := f.serve()
	home := t.TempDir()
	c := newClient(t, home, nil, f.reg(srv.URL))

	_, err := c.Install(testCtx(t), "echo", "~> 2.0", "")
	if !errors.Is(err, ErrIncompatible) {
		t.Fatalf("error %v, want ErrIncompatible", err)
	}
	t.Logf("error: %v", err)
	for _, m := range []string{"2.0.0", "protocol [2]", "newest version that works with this engine and platform: 1.4.0"} {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
	if b := log.binaries(); len(b) != 0 {
		t.Errorf("downloaded %v before rejecting the protocol", b)
	}
	assertNothingInstalled(t, home)

	// Without a constraint the newest compatible version is chosen.
	inst, err := c.Install(testCtx(t), "echo", "", "")
	if err != nil || inst.Version != "1.4.0" {
		t.Fatalf("install any: %+v, %v; want 1.4.0", inst, err)
	}
}

func TestReinstallReplacesDamagedInstall(t *testing.T) {
	f := newFixture(t)
	art := f.publish("echo", "1.0.0", "source", 1)
	f.sign()
	home := t.TempDir()
	c := newClient(t, home, nil, f.reg(f.fileURL()))
	inst, err := c.Install(testCtx(t), "echo", "1.0.0", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inst.Path, []byte("damaged"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := VerifyFile(inst.Path, art.SHA256); !errors.Is(err, ErrChecksum) {
		t.Fatalf("VerifyFile on a damaged binary: %v", err)
	}
	if _, err := c.Install(testCtx(t), "echo", "1.0.0", ""); err != nil {
		t.Fatal(err)
	}
	if err := VerifyFile(inst.Path, art.SHA256); err != nil {
		t.Fatal(err)
	}
	if got := pluginsEntries(t, home); len(got) != 4 {
		t.Errorf("plugins/ holds %v, want .lock and one binary", got)
	}
}

func TestConcurrentInstalls(t *testing.T) {
	f := newFixture(t)
	art := f.publish("echo", "1.0.0", "source", 1)
	f.publish("other", "0.1.0", "destination", 1)
	f.sign()
	srv, _ := f.serve()
	home := t.TempDir()

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := []string{"echo", "other"}[i%2]
			c := newClient(t, home, nil, f.reg(srv.URL)) // separate clients: no shared memo
			_, err := c.Install(testCtx(t), name, "", "")
			errs <- err
		}()
	}

	// Two more installs of the same plugin from other processes, in parallel
	// with the goroutines.
	spec, _ := json.Marshal(helperSpec{Home: home, URL: srv.URL, PubKey: f.pub.String(), Name: "echo"})
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+string(spec))
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("installer process: %v\n%s", err, outs[i])
		}
	}
	if err := VerifyFile(PluginPath(home, "echo", "1.0.0"), art.SHA256); err != nil {
		t.Fatal(err)
	}
	want := []string{".lock", "echo", "echo/1.0.0", "echo/1.0.0/skippr-plugin-echo", "other", "other/0.1.0", "other/0.1.0/skippr-plugin-other"}
	if got := pluginsEntries(t, home); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("plugins/ holds %v, want %v", got, want)
	}
}

func TestStaleTempDirsSwept(t *testing.T) {
	f := newFixture(t)
	f.publish("echo", "1.0.0", "source", 1)
	f.sign()
	home := t.TempDir()
	// What a crash mid-install leaves behind.
	for _, d := range []string{".tmp-echo-1.0.0-123", ".trash-456"} {
		if err := os.MkdirAll(filepath.Join(home, "plugins", d, "x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, home, nil, f.reg(f.fileURL()))
	if _, err := c.Install(testCtx(t), "echo", "", ""); err != nil {
		t.Fatal(err)
	}
	for _, e := range pluginsEntries(t, home) {
		if strings.HasPrefix(e, ".tmp-") || strings.HasPrefix(e, ".trash-") {
			t.Errorf("stale %s not swept", e)
		}
	}
}

package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// helperEnv makes the test binary act as a second installer process.
const helperEnv = "SKIPPR_REGISTRY_TEST_HELPER"

type helperSpec struct {
	Home, URL, PubKey, Name, Constraint string
}

var builds = struct {
	sync.Mutex
	dir   string
	cache map[string]string
}{cache: map[string]string{}}

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(runHelper(spec))
	}
	dir, err := os.MkdirTemp("", "skippr-registry-test-plugins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	builds.dir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runHelper installs one plugin, as a separate process would.
func runHelper(spec string) int {
	var s helperSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	pub, err := ParsePublicKey(s.PubKey)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c, err := New(Options{Home: s.Home, Registries: []Registry{{URL: s.URL, Keys: []PublicKey{pub}}}, Protocols: []int{1}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	inst, err := c.Install(context.Background(), s.Name, s.Constraint, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(inst.Path)
	return 0
}

const pluginSource = `package main

import (
	"fmt"
	"os"
)

var name, version, kind, protos string

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--skippr-plugin-info" {
		fmt.Printf("{\"name\":%q,\"version\":%q,\"kind\":%q,\"protocol_versions\":[%s]}\n", name, version, kind, protos)
		return
	}
	fmt.Fprintln(os.Stderr, "this test plugin only answers --skippr-plugin-info")
	os.Exit(3)
}
`

// buildPlugin compiles a tiny plugin-like binary that reports the given info
// for --skippr-plugin-info. Builds are cached for the whole test run.
func buildPlugin(t *testing.T, name, version, kind string, protos ...int) string {
	t.Helper()
	ps := make([]string, len(protos))
	for i, p := range protos {
		ps[i] = fmt.Sprint(p)
	}
	key := strings.Join([]string{name, version, kind, strings.Join(ps, ",")}, "|")
	builds.Lock()
	defer builds.Unlock()
	if p, ok := builds.cache[key]; ok {
		return p
	}
	src := filepath.Join(builds.dir, "src")
	if _, err := os.Stat(src); err != nil {
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module testplugin\n\ngo 1.26\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(pluginSource), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(builds.dir, fmt.Sprintf("plugin-%d", len(builds.cache)))
	ld := fmt.Sprintf("-X main.name=%s -X main.version=%s -X main.kind=%s -X main.protos=%s", name, version, kind, strings.Join(ps, ","))
	cmd := exec.Command("go", "build", "-o", out, "-ldflags", ld, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build test plugin: %v\n%s", err, b)
	}
	builds.cache[key] = out
	return out
}

// fixture is a registry folder with a signing key.
type fixture struct {
	t       *testing.T
	dir     string
	pub     PublicKey
	keyFile string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	keys := t.TempDir()
	pubPath, privPath, _, err := Keygen(keys)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ReadPublicKeyFile(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, dir: t.TempDir(), pub: pub, keyFile: privPath}
}

// publish builds a host binary reporting the given info and adds it.
func (f *fixture) publish(name, version, kind string, protos ...int) Artifact {
	f.t.Helper()
	bin := buildPlugin(f.t, name, version, kind, protos...)
	a, err := Add(context.Background(), AddRequest{Dir: f.dir, Artifact: bin, Name: name, Version: version})
	if err != nil {
		f.t.Fatalf("add %s %s: %v", name, version, err)
	}
	return a
}

// addForeign adds a binary for another platform; it cannot run here, so the
// info comes from the request.
func (f *fixture) addForeign(name, version, os_, arch, kind string, protos ...int) Artifact {
	f.t.Helper()
	bin := filepath.Join(f.t.TempDir(), "foreign")
	if err := os.WriteFile(bin, []byte("foreign binary "+name+" "+version+" "+os_+"_"+arch), 0o755); err != nil {
		f.t.Fatal(err)
	}
	a, err := Add(context.Background(), AddRequest{Dir: f.dir, Artifact: bin, Name: name, Version: version, OS: os_, Arch: arch, ProtocolVersions: protos, Kind: kind})
	if err != nil {
		f.t.Fatalf("add %s %s %s_%s: %v", name, version, os_, arch, err)
	}
	return a
}

func (f *fixture) sign() {
	f.t.Helper()
	if _, err := Sign(f.dir, f.keyFile); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) fileURL() string { return "file://" + f.dir }

func (f *fixture) reg(url string) Registry { return Registry{URL: url, Keys: []PublicKey{f.pub}} }

// requestLog records the paths an HTTP registry served.
type requestLog struct {
	mu    sync.Mutex
	paths []string
}

func (l *requestLog) add(p string) {
	l.mu.Lock()
	l.paths = append(l.paths, p)
	l.mu.Unlock()
}

func (l *requestLog) binaries() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, p := range l.paths {
		if !strings.HasSuffix(p, "/index.json") && !strings.HasSuffix(p, "/index.json.sig") {
			out = append(out, p)
		}
	}
	return out
}

// serve serves the fixture's folder over HTTP on 127.0.0.1.
func (f *fixture) serve() (*httptest.Server, *requestLog) {
	f.t.Helper()
	log := &requestLog{}
	fs := http.FileServer(http.Dir(f.dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r.URL.Path)
		fs.ServeHTTP(w, r)
	}))
	f.t.Cleanup(srv.Close)
	return srv, log
}

func newClient(t *testing.T, home string, progress *bytes.Buffer, regs ...Registry) *Client {
	t.Helper()
	opts := Options{Home: home, Registries: regs, Protocols: []int{1}, Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if progress != nil {
		opts.Progress = progress
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testWriter sends slog output to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// pluginsEntries lists everything under home/plugins (relative paths).
func pluginsEntries(t *testing.T, home string) []string {
	t.Helper()
	root := filepath.Join(home, "plugins")
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// assertNothingInstalled fails unless plugins/ holds at most its flock file.
func assertNothingInstalled(t *testing.T, home string) {
	t.Helper()
	for _, e := range pluginsEntries(t, home) {
		if e != ".lock" {
			t.Errorf("left under plugins/ after a failed install: %s (all: %v)", e, pluginsEntries(t, home))
			return
		}
	}
}

// closedPortURL returns an http URL on 127.0.0.1 where nothing listens.
func closedPortURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/registry"
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

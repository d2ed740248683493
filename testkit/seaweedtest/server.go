// Package seaweedtest runs a throwaway SeaweedFS (`weed mini`) on 127.0.0.1 for tests: an S3 gateway and the
// Iceberg REST catalog it embeds, whose warehouses are S3 table buckets. Clients authenticate to both with
// AWS Signature V4 and the server's AccessKey/SecretKey.
//
//	func TestX(t *testing.T) {
//		srv := seaweedtest.New(t)                 // killed when the test ends
//		wh := srv.NewTableBucket(t)               // a fresh warehouse: s3://NAME
//		// catalog at srv.CatalogURI, files at srv.S3Endpoint (path style, region seaweedtest.Region)
//	}
//
// The binary is $SEAWEEDFS, else `weed` on PATH; `make tools` builds it into .cache/bin. Without it the test
// is skipped, or fails when $CI is set, so that CI never passes by skipping.
package seaweedtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/skippr-dev/skippr/testkit/internal/proc"
)

// Module is the SeaweedFS module version the Makefile builds weed from. The Go proxy serves only this
// pseudo-version, and `go install …/weed@VERSION` refuses it (its go.mod has a replace directive), so the
// Makefile builds it from the module cache.
const Module = "github.com/seaweedfs/seaweedfs@v0.0.0-20261109003541-7506e5f91cd6"

// BuildHint says how to get the binary.
const BuildHint = "run `make tools` (builds weed from " + Module + " into .cache/bin) or set $SEAWEEDFS to a weed binary"

// Region is the region SeaweedFS's table buckets live in; clients sign S3 and catalog requests for it.
const Region = "us-east-1"

// Binary finds weed: $SEAWEEDFS, else PATH.
func Binary() (string, error) {
	if p := os.Getenv("SEAWEEDFS"); p != "" {
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return "", fmt.Errorf("weed not found at $SEAWEEDFS=%s: %s", p, BuildHint)
		}
		return p, nil
	}
	if p, err := exec.LookPath("weed"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("weed (SeaweedFS) not found in $SEAWEEDFS or PATH: %s", BuildHint)
}

// Require returns the binary's path, skipping the test when it is missing — or failing it when $CI is set.
func Require(t testing.TB) string {
	t.Helper()
	bin, err := Binary()
	if err == nil {
		return bin
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("seaweedtest: %v", err)
	}
	t.Skipf("seaweedtest: %v", err)
	return ""
}

// Server is one running `weed mini`.
type Server struct {
	// S3Endpoint is the S3 gateway, http://127.0.0.1:PORT (path-style addressing).
	S3Endpoint string
	// CatalogURI is the Iceberg REST catalog's base URL, http://127.0.0.1:PORT (clients append /v1).
	CatalogURI string
	AccessKey  string
	SecretKey  string
	// Dir holds the server's data and its log (weed.log); removed by Stop.
	Dir string

	ports   []int
	cmd     *exec.Cmd
	log     *os.File
	exited  chan struct{}
	waitErr error
	stop    sync.Once
	seq     int
	seqMu   sync.Mutex
}

// Start runs `weed mini` on free loopback ports with its data in a new temporary directory and returns once
// the S3 gateway and the Iceberg catalog answer signed requests. Stop it with Stop.
func Start(ctx context.Context) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	// A port found free can be taken before weed binds it; weed then refuses to start (it never moves a
	// port given on its command line), and another set of ports will do.
	for range 3 {
		s, err := start(ctx, bin)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !strings.Contains(err.Error(), "is not available") && !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, lastErr
}

// freePorts returns n distinct ports free on 127.0.0.1, holding them all until it returns so that none is
// handed out twice.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func start(ctx context.Context, bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", "seaweedtest-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(11)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{
		S3Endpoint: "http://127.0.0.1:" + strconv.Itoa(ports[0]),
		CatalogURI: "http://127.0.0.1:" + strconv.Itoa(ports[1]),
		AccessKey:  "AK" + strings.ToUpper(randomHex(9)),
		SecretKey:  "SK" + randomHex(18),
		Dir:        dir,
		ports:      ports,
		exited:     make(chan struct{}),
	}
	if s.log, err = os.Create(filepath.Join(dir, "weed.log")); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := func(i int) string { return strconv.Itoa(ports[i]) }
	// Every port is given explicitly: weed mini otherwise takes fixed defaults (8333, 8181, 9333, …), so two
	// test binaries would collide, and it silently moves a default port that is taken, so the test could not
	// know where its server listens. Global flags go before the subcommand.
	args := []string{"-logtostderr", "mini",
		"-dir=" + filepath.Join(dir, "data"),
		"-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-s3.port=" + p(0), "-s3.port.iceberg=" + p(1), "-s3.port.grpc=" + p(2),
		"-master.port=" + p(3), "-master.port.grpc=" + p(4),
		"-volume.port=" + p(5), "-volume.port.grpc=" + p(6),
		"-filer.port=" + p(7), "-filer.port.grpc=" + p(8),
		"-admin.port=" + p(9), "-admin.port.grpc=" + p(10),
		"-admin.port.legacy=0", "-s3.port.lance=0", "-webdav=false",
		// Nothing may leave the machine.
		"-master.telemetry=false",
		// Tests write a few MB; the default sizes volumes from the free disk space.
		"-master.volumeSizeLimitMB=64",
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Dir = dir
	// Without -s3.config, weed makes an admin identity from these two variables. HOME points into the
	// temporary directory so that no ~/.seaweedfs configuration of the machine is read.
	s.cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + dir,
		"TMPDIR=" + dir,
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
	}
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	// If the test binary dies without stopping the server, the server dies too instead of lingering.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		s.log.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// waitReady waits until the catalog answers a signed request: by then the master, volume server, filer, S3
// gateway and catalog are all up and the credentials are loaded.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var last error
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		_, last = s.do(rctx, http.MethodGet, s.CatalogURI+"/v1/config", "execute-api", nil)
		rcancel()
		if last == nil {
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			_, last = s.do(rctx, http.MethodGet, s.S3Endpoint+"/buckets", "s3tables", nil)
			rcancel()
			if last == nil {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("weed mini exited before it was ready (%v):\n%s", s.waitErr, s.LogTail(60))
		case <-ctx.Done():
			return fmt.Errorf("weed mini not ready after 90s: last error %v\n%s", last, s.LogTail(60))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// do sends a request signed with the server's credentials for service and returns the response body; a
// status other than 2xx is an error carrying the body.
func (s *Server) do(ctx context.Context, method, url, service string, body []byte) ([]byte, error) {
	return signedRequest(ctx, aws.Credentials{AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey}, method, url, service, body)
}

func signedRequest(ctx context.Context, creds aws.Credentials, method, url, service string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", hash)
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hash, service, Region, time.Now()); err != nil {
		return nil, fmt.Errorf("sign %s %s: %w", method, url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read response: %w", method, url, err)
	}
	if resp.StatusCode/100 != 2 {
		return b, fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// CreateTableBucket creates an S3 table bucket (a warehouse of the Iceberg catalog) through the S3 Tables
// API; its warehouse location is s3://NAME.
func (s *Server) CreateTableBucket(ctx context.Context, name string) error {
	body, err := json.Marshal(map[string]string{"name": name})
	if err != nil {
		return err
	}
	if _, err := s.do(ctx, http.MethodPut, s.S3Endpoint+"/buckets", "s3tables", body); err != nil {
		return fmt.Errorf("create table bucket %s: %w", name, err)
	}
	return nil
}

// NewTableBucket creates a table bucket for one test and returns its warehouse location, s3://NAME. Names
// are unique per server, so tests sharing a server never see each other's tables.
func (s *Server) NewTableBucket(t testing.TB) string {
	t.Helper()
	s.seqMu.Lock()
	s.seq++
	n := s.seq
	s.seqMu.Unlock()
	name := fmt.Sprintf("t%d-%s", n, sanitize(t.Name(), 40))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.CreateTableBucket(ctx, name); err != nil {
		t.Fatalf("seaweedtest: %v\n%s", err, s.LogTail(30))
	}
	return "s3://" + name
}

// sanitize makes a table bucket name part: lowercase letters, digits and single hyphens.
func sanitize(name string, max int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			if s := b.String(); s != "" && !strings.HasSuffix(s, "-") {
				b.WriteByte('-')
			}
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) > max {
		out = strings.Trim(out[len(out)-max:], "-")
	}
	if out == "" {
		out = "x"
	}
	return out
}

// Log returns everything the server printed so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "weed.log"))
	return string(b)
}

// LogTail returns the last n lines the server printed.
func (s *Server) LogTail(n int) string { return proc.FileTail(filepath.Join(s.Dir, "weed.log"), n) }

// Running reports whether the process is still alive.
func (s *Server) Running() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Stop kills the server, waits for it to exit and removes its directory and the sockets it left in /tmp.
func (s *Server) Stop() {
	s.stop.Do(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
		s.log.Close()
		os.RemoveAll(s.Dir)
		// weed mini puts its gRPC Unix sockets in /tmp whatever TMPDIR says, named by port.
		for _, p := range s.ports {
			matches, _ := filepath.Glob(fmt.Sprintf("/tmp/seaweedfs-*-%d.sock", p))
			for _, m := range matches {
				os.Remove(m)
			}
		}
	})
}

// New starts a server for one test, killed when the test ends; its log is part of the output of a failed
// test. Without the binary the test is skipped (failed under $CI).
func New(t testing.TB) *Server {
	t.Helper()
	Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx)
	if err != nil {
		t.Fatalf("seaweedtest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seaweedtest: weed mini log (last 80 lines):\n%s", s.LogTail(80))
		}
		s.Stop()
	})
	return s
}

// Shared starts one server lazily for a whole test package. Declare it in the test package, call Get from
// tests and Stop from TestMain after m.Run.
type Shared struct {
	mu  sync.Mutex
	srv *Server
	err error
}

// Get returns the package's server, starting it on first use. When the test fails, the server's recent log
// is added to its output.
func (sh *Shared) Get(t testing.TB) *Server {
	t.Helper()
	Require(t)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.srv == nil && sh.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sh.srv, sh.err = Start(ctx)
	}
	if sh.err != nil {
		t.Fatalf("seaweedtest: %v", sh.err)
	}
	srv := sh.srv
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seaweedtest: weed mini log (last 80 lines):\n%s", srv.LogTail(80))
		}
	})
	if !srv.Running() {
		t.Fatalf("seaweedtest: the shared weed mini has exited (%v):\n%s", srv.waitErr, srv.LogTail(60))
	}
	return srv
}

// Stop kills the server, if one was started.
func (sh *Shared) Stop() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.srv != nil {
		sh.srv.Stop()
	}
}

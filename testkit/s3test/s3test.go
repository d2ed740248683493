// Package s3test runs a real S3-compatible server (versitygw, posix backend)
// on 127.0.0.1 for tests: one process per test or per package, a fresh bucket
// per test. StartIn and NewIn run it inside a network namespace instead (a
// testkit/netns host), listening on the namespace's address. It is the
// testkit's one S3 harness, for the engine's WAL and commit log, the registry,
// the benchmarks and the end-to-end tests; seaweedtest is the Iceberg REST
// catalog (with its own S3 gateway) the iceberg plugin's catalog tests need.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/skippr-dev/skippr/testkit/internal/proc"
)

// InstallHint is how to get the binary when it is missing.
const InstallHint = "install with `go install github.com/versity/versitygw/cmd/versitygw@v1.8.0`"

// Region is the region the server is started with and clients sign for.
const Region = "us-east-1"

// Binary finds versitygw: $VERSITYGW, else PATH, else /root/go/bin/versitygw.
func Binary() (string, error) {
	if p := os.Getenv("VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("versitygw not found at $VERSITYGW=%s: %v: %s", p, err, InstallHint)
		}
		return p, nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	const fallback = "/root/go/bin/versitygw"
	if _, err := os.Stat(fallback); err == nil {
		return fallback, nil
	}
	return "", fmt.Errorf("versitygw not found: %s", InstallHint)
}

// Server is one running versitygw process.
type Server struct {
	Endpoint  string // http://127.0.0.1:PORT, or the namespace's address (StartIn)
	AccessKey string
	SecretKey string
	Dir       string // the posix backend's root

	cmd     *exec.Cmd
	out     *lockedBuffer
	exited  chan struct{}
	waitErr error
	stop    sync.Once
	netns   Netns
}

// Netns is a network namespace to run the server in; testkit/netns.Host is one.
type Netns interface {
	// Addr is the namespace's IP address.
	Addr() string
	// Wrap makes a command that is ready to start start inside the namespace.
	Wrap(cmd *exec.Cmd) error
	// DialContext dials from inside the namespace.
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Start runs versitygw on a free loopback port with its data in dir and
// returns once it answers S3 requests. Stop it with Stop.
func Start(ctx context.Context, dir string) (*Server, error) {
	return StartIn(ctx, dir, nil)
}

// StartIn is Start inside a network namespace (ns nil: on loopback): the server
// listens on the namespace's address, which only the namespace's segment
// reaches; Client dials from inside the namespace, so the test binary still
// reaches it.
func StartIn(ctx context.Context, dir string, ns Netns) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	// A port found free can be taken before versitygw binds it; try again then.
	for range 3 {
		s, err := start(ctx, bin, dir, ns)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, lastErr
}

func start(ctx context.Context, bin, dir string, ns Netns) (*Server, error) {
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	host := "127.0.0.1"
	if ns != nil {
		host = ns.Addr()
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	s := &Server{
		Endpoint:  "http://" + addr,
		AccessKey: "AK" + randomHex(8),
		SecretKey: "SK" + randomHex(16),
		Dir:       dir,
		out:       &lockedBuffer{},
		exited:    make(chan struct{}),
		netns:     ns,
	}
	// Global flags go before the backend subcommand.
	s.cmd = exec.Command(bin,
		"--port", addr,
		"--access", s.AccessKey, "--secret", s.SecretKey,
		"--region", Region, "--quiet",
		"posix", dir)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	// The server must not outlive a test binary that crashes before Cleanup.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if ns != nil {
		if err := ns.Wrap(s.cmd); err != nil {
			return nil, fmt.Errorf("start %s in namespace %s: %w", bin, host, err)
		}
	}
	if err := s.cmd.Start(); err != nil {
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

func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := s.Client()
	for {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		_, err := c.ListBuckets(rctx, &s3.ListBucketsInput{})
		rcancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("versitygw exited before it was ready (%v): %s", s.waitErr, strings.TrimSpace(s.out.String()))
		case <-ctx.Done():
			return fmt.Errorf("versitygw at %s not ready after 30s: last error %v; output: %s", s.Endpoint, err, strings.TrimSpace(s.out.String()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop kills the server and waits for it to exit.
func (s *Server) Stop() {
	s.stop.Do(func() {
		s.cmd.Process.Kill()
		<-s.exited
	})
}

// Signal sends sig to the server: SIGSTOP freezes it — it still accepts connections but answers nothing, as
// across a cut link — and SIGCONT resumes it.
func (s *Server) Signal(sig os.Signal) error {
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal versitygw %d: %w", s.cmd.Process.Pid, err)
	}
	return nil
}

// Output is what the server printed so far (for failure messages).
func (s *Server) Output() string { return s.out.String() }

// Client returns an S3 client for the server (path-style, static keys). For a
// server in a namespace it dials from inside that namespace.
func (s *Server) Client() *s3.Client {
	if s.netns != nil {
		return s.ClientVia(s.netns.DialContext)
	}
	return s.ClientVia(nil)
}

// ClientVia is Client with its connections made by dial (e.g. another
// namespace's DialContext); nil dials from the test binary's namespace.
func (s *Server) ClientVia(dial func(ctx context.Context, network, address string) (net.Conn, error)) *s3.Client {
	o := s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	}
	if dial != nil {
		o.HTTPClient = awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) { tr.DialContext = dial })
	}
	return s3.New(o)
}

// New starts a server for one test; it is killed at t.Cleanup.
func New(t testing.TB) *Server {
	t.Helper()
	s, err := Start(context.Background(), t.TempDir())
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// NewIn is New inside a network namespace (see StartIn).
func NewIn(t testing.TB, ns Netns) *Server {
	t.Helper()
	s, err := StartIn(context.Background(), t.TempDir(), ns)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Bucket is a fresh, empty bucket on a Server.
type Bucket struct {
	*Server
	Name   string
	Client *s3.Client
}

// NewBucket creates a bucket named after the test, unique across runs
// (versitygw's data persists in its directory).
func (s *Server) NewBucket(t testing.TB) *Bucket {
	t.Helper()
	name := bucketName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.CreateBucket(ctx, name); err != nil {
		t.Fatal(err)
	}
	return &Bucket{Server: s, Name: name, Client: s.Client()}
}

// CreateBucket creates a bucket (benchmarks use it outside tests).
func (s *Server) CreateBucket(ctx context.Context, name string) error {
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return fmt.Errorf("create bucket %s on %s: %w", name, s.Endpoint, err)
	}
	return nil
}

// bucketName makes a valid bucket name (3-63 of [a-z0-9-], alphanumeric at
// both ends) from a test name plus a random suffix.
func bucketName(test string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(test) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			if s := b.String(); s != "" && !strings.HasSuffix(s, "-") {
				b.WriteByte('-')
			}
		}
	}
	base := strings.Trim(b.String(), "-")
	if len(base) > 45 {
		base = strings.Trim(base[:45], "-")
	}
	if base == "" {
		base = "t"
	}
	return base + "-" + randomHex(8)
}

// Shared starts one server lazily for a whole test package. Declare it in the
// test package, call Get from tests and Stop from TestMain after m.Run.
type Shared struct {
	once sync.Once
	srv  *Server
	dir  string
	err  error
}

// Get returns the package's server, starting it on first use.
func (sh *Shared) Get(t testing.TB) *Server {
	t.Helper()
	sh.once.Do(func() {
		sh.dir, sh.err = os.MkdirTemp("", "s3test-")
		if sh.err == nil {
			sh.srv, sh.err = Start(context.Background(), filepath.Join(sh.dir))
		}
	})
	if sh.err != nil {
		t.Fatalf("%v", sh.err)
	}
	return sh.srv
}

// Stop kills the server (if started) and removes its data.
func (sh *Shared) Stop() {
	if sh.srv != nil {
		sh.srv.Stop()
	}
	if sh.dir != "" {
		os.RemoveAll(sh.dir)
	}
}

// IsStatus reports whether err is an HTTP response error with that status.
func IsStatus(err error, status int) bool {
	var re interface{ HTTPStatusCode() int }
	return errors.As(err, &re) && re.HTTPStatusCode() == status
}

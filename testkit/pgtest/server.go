// Package pgtest runs throwaway PostgreSQL servers for tests on 127.0.0.1: one shared server per test binary
// (started on first use, stopped by Main), and a fresh database per test.
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestX(t *testing.T) {
//		db := pgtest.NewDB(t) // dropped when the test ends
//		db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY)`)
//	}
//
// The servers are configured for logical replication (wal_level=logical, 20 WAL senders and slots) and for
// speed, not durability (fsync=off). PostgreSQL refuses to run as root, so when the tests run as root the
// server runs as the "postgres" OS user in a temporary directory it owns. The superuser "postgres" connects
// without a password; roles made by CreateRole must use their password (scram-sha-256).
//
// The binaries are found in $PGTEST_BIN, else the newest /usr/lib/postgresql/*/bin, else PATH. Without them
// the test fails, naming the Debian package to install.
package pgtest

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/testkit/internal/proc"
)

// AptPackage is the Debian package that provides the server binaries.
const AptPackage = "postgresql"

// Options change a server's configuration.
type Options struct {
	// Settings are postgresql.conf parameters added to (or replacing) the defaults, e.g. {"wal_level": "replica"}.
	Settings map[string]string
	// Netns, when set, runs the server inside a network namespace (a testkit/netns.Host), listening on the
	// namespace's address instead of 127.0.0.1 and accepting the same logins from its subnet as from
	// 127.0.0.1. ConnString then names that address, which only other namespaces of the segment reach; the
	// test binary's own helpers (Exec, NewDB, DB.Connect…) use the server's Unix socket (LocalConnString).
	Netns Netns
}

// Netns is a network namespace to run the server in; testkit/netns.Host is one.
type Netns interface {
	// Addr is the namespace's IP address.
	Addr() string
	// Wrap makes a command that is ready to start (with its Credential and Pdeathsig) start inside the namespace.
	Wrap(cmd *exec.Cmd) error
}

// Server is a running PostgreSQL server.
type Server struct {
	Host string // 127.0.0.1, or the namespace's address (Options.Netns)
	Port int
	// Dir holds the data directory ("data"), the Unix socket and the server log ("server.log").
	Dir string

	proc    *proc.Process
	dbSeq   atomic.Int64
	roleSeq atomic.Int64
	netns   Netns
	bin     string
	cred    *syscall.Credential
	opts    Options
}

// binDir finds the directory holding initdb and postgres.
func binDir() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("PGTEST_BIN"); d != "" {
		if has(d) {
			return d, nil
		}
		return "", fmt.Errorf("PGTEST_BIN=%s does not hold initdb and postgres", d)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Newest major version first.
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("PostgreSQL server binaries (initdb, postgres) not found in $PGTEST_BIN, /usr/lib/postgresql/*/bin or PATH: install the Debian package %q (apt-get install -y %s)", AptPackage, AptPackage)
}

// env is the servers' whole environment.
var env = []string{"LC_ALL=C.UTF-8", "PATH=/usr/bin:/bin"}

// templates caches one initdb result per process: copying it is faster than running initdb again.
var templates struct {
	mu  sync.Mutex
	dir string
}

// RemoveTemplate removes the initdb result this process cached. Main does it for tests; a program that calls
// Start outside tests (the benchmarks) calls it when it is done with its servers.
func RemoveTemplate() {
	templates.mu.Lock()
	defer templates.mu.Unlock()
	if templates.dir != "" {
		os.RemoveAll(templates.dir)
		templates.dir = ""
	}
}

func initdb(bin string, cred *syscall.Credential, data string) error {
	templates.mu.Lock()
	defer templates.mu.Unlock()
	if templates.dir == "" {
		dir, err := os.MkdirTemp("", "pgtest-template-")
		if err != nil {
			return err
		}
		if err := proc.ChownAll(dir, cred); err != nil {
			return fmt.Errorf("chown %s to the postgres user: %w", dir, err)
		}
		tmpl := filepath.Join(dir, "data")
		cmd := proc.Command(cred, env, filepath.Join(bin, "initdb"), "-D", tmpl, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return fmt.Errorf("initdb: %w\n%s", err, out)
		}
		// Our own rules: the superuser connects freely, other roles need their password, so tests can check
		// what a wrong password does.
		hba := "local all all trust\n" +
			"host all postgres 127.0.0.1/32 trust\n" +
			"host replication postgres 127.0.0.1/32 trust\n" +
			"host all all 127.0.0.1/32 scram-sha-256\n" +
			"host replication all 127.0.0.1/32 scram-sha-256\n"
		if err := os.WriteFile(filepath.Join(tmpl, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
			return err
		}
		if err := proc.ChownAll(dir, cred); err != nil {
			return err
		}
		templates.dir = dir
	}
	// cp -a keeps owner and modes.
	if out, err := exec.Command("cp", "-a", filepath.Join(templates.dir, "data"), data).CombinedOutput(); err != nil {
		return fmt.Errorf("copy template data directory: %w\n%s", err, out)
	}
	return nil
}

// Start initialises and starts a new server. The caller stops it with Stop.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := proc.RunAs("postgres", AptPackage)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	if err := proc.ChownAll(dir, cred); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("chown %s to the postgres user: %w", dir, err)
	}
	if err := initdb(bin, cred, filepath.Join(dir, "data")); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s, err := proc.Retry(func() (*Server, error) { return start(ctx, bin, cred, dir, opts) },
		"could not bind", "could not create any TCP/IP sockets")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func start(ctx context.Context, bin string, cred *syscall.Credential, dir string, opts Options) (*Server, error) {
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	return startOn(ctx, bin, cred, dir, port, opts)
}

// startOn starts the server of dir's data directory on port.
func startOn(ctx context.Context, bin string, cred *syscall.Credential, dir string, port int, opts Options) (*Server, error) {
	host := "127.0.0.1"
	if opts.Netns != nil {
		host = opts.Netns.Addr()
		if err := allowSamenet(filepath.Join(dir, "data", "pg_hba.conf")); err != nil {
			return nil, err
		}
	}
	conf := map[string]string{
		"listen_addresses":        host,
		"port":                    strconv.Itoa(port),
		"unix_socket_directories": dir,
		"wal_level":               "logical",
		"max_wal_senders":         "20",
		"max_replication_slots":   "20",
		"max_connections":         "100",
		"fsync":                   "off",
		"full_page_writes":        "off",
		"shared_buffers":          "64MB",
		"logging_collector":       "off",
	}
	for k, v := range opts.Settings {
		conf[k] = v
	}
	args := []string{"-D", filepath.Join(dir, "data")}
	keys := make([]string, 0, len(conf))
	for k := range conf {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+conf[k])
	}
	logPath := filepath.Join(dir, "server.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := proc.Command(cred, env, filepath.Join(bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if opts.Netns != nil {
		if err := opts.Netns.Wrap(cmd); err != nil {
			return nil, fmt.Errorf("start postgres in namespace %s: %w", host, err)
		}
	}
	// SIGQUIT: if the test binary dies without stopping us, the server shuts down immediately.
	p, err := proc.Start(cmd, "postgres", logPath, syscall.SIGQUIT)
	if err != nil {
		return nil, err
	}
	s := &Server{Host: host, Port: port, Dir: dir, proc: p, netns: opts.Netns, bin: bin, cred: cred, opts: opts}
	ready := func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, s.LocalConnString("postgres"))
		if err == nil {
			c.Close(ctx)
		}
		return err
	}
	if err := p.WaitReady(ctx, 60*time.Second, 50*time.Millisecond, ready); err != nil {
		return nil, err
	}
	return s, nil
}

// Log returns the server log so far.
func (s *Server) Log() string { return s.proc.Log() }

// Restart shuts the server down (fast shutdown) and starts it again on the same data directory and port with
// settings over the ones it was started with — what an operator's configuration change and restart does. When
// the server does not come up, the error holds the end of its log, and the server stays down until a later
// Restart succeeds. The server log is started afresh.
func (s *Server) Restart(ctx context.Context, settings map[string]string) error {
	if err := s.proc.Stop(syscall.SIGINT, 20*time.Second); err != nil {
		return fmt.Errorf("stop postgres: %w", err)
	}
	opts := s.opts
	opts.Settings = maps.Clone(s.opts.Settings)
	if opts.Settings == nil {
		opts.Settings = map[string]string{}
	}
	maps.Copy(opts.Settings, settings)
	n, err := startOn(ctx, s.bin, s.cred, s.Dir, s.Port, opts)
	if err != nil {
		return fmt.Errorf("restart postgres: %w", err) // with the end of its log
	}
	s.proc, s.opts = n.proc, opts
	return nil
}

// Stop shuts the server down (fast shutdown, then kill after 20 s) and removes its directory.
func (s *Server) Stop() error {
	err := s.proc.Stop(syscall.SIGINT, 20*time.Second)
	if rmErr := os.RemoveAll(s.Dir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}

func quoteDSN(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

func (s *Server) connString(db, user, password string) string {
	cs := fmt.Sprintf("host=%s port=%d dbname=%s user=%s sslmode=disable", s.Host, s.Port, quoteDSN(db), quoteDSN(user))
	if password != "" {
		cs += " password=" + quoteDSN(password)
	}
	return cs
}

// ConnString is a keyword/value connection string for the superuser to database db.
func (s *Server) ConnString(db string) string { return s.connString(db, "postgres", "") }

// LocalConnString is the superuser's connection string for the test binary itself: ConnString, or for a
// server in a namespace (which the test binary's network cannot reach) its Unix socket.
func (s *Server) LocalConnString(db string) string {
	if s.netns == nil {
		return s.ConnString(db)
	}
	return fmt.Sprintf("host=%s port=%d dbname=%s user=postgres sslmode=disable", quoteDSN(s.Dir), s.Port, quoteDSN(db))
}

// allowSamenet lets the namespace's subnet log in as 127.0.0.1 may: hosts of the segment are the clients of a
// server in a namespace.
func allowSamenet(hba string) error {
	f, err := os.OpenFile(hba, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("allow the namespace's subnet in pg_hba.conf: %w", err)
	}
	_, err = f.WriteString("host all postgres samenet trust\n" +
		"host replication postgres samenet trust\n" +
		"host all all samenet scram-sha-256\n" +
		"host replication all samenet scram-sha-256\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("allow the namespace's subnet in pg_hba.conf: %w", err)
	}
	return nil
}

// admin runs a statement as the superuser in database "postgres".
func (s *Server) admin(ctx context.Context, sql string, args ...any) error {
	c, err := pgx.Connect(ctx, s.LocalConnString("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, sql, args...)
	return err
}

// Exec runs a statement as the superuser in database "postgres" (roles, server settings).
func (s *Server) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.admin(ctx, sql, args...); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// Role is a login role with a password, created by CreateRole.
type Role struct {
	Name     string
	Password string
}

// CreateRole creates a login role with a unique name and a password. attrs are extra role attributes
// ("REPLICATION", "SUPERUSER"...). Roles live as long as the server.
func (s *Server) CreateRole(t testing.TB, attrs ...string) Role {
	t.Helper()
	n := s.roleSeq.Add(1)
	r := Role{Name: fmt.Sprintf("role_%d_%s", n, proc.Sanitize(t.Name(), 40)), Password: fmt.Sprintf("pw-%d-%d", n, time.Now().UnixNano())}
	s.Exec(t, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s' %s", pgx.Identifier{r.Name}.Sanitize(), r.Password, strings.Join(attrs, " ")))
	return r
}

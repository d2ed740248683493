// Package mysqltest runs throwaway MariaDB servers for tests on 127.0.0.1: one shared server per test binary
// (started on first use, stopped by Main), and a fresh database per test.
//
//	func TestMain(m *testing.M) { mysqltest.Main(m) }
//
//	func TestX(t *testing.T) {
//		db := mysqltest.NewDB(t) // dropped when the test ends
//		db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY)`)
//	}
//
// The servers are configured as a change-data-capture source must find them: a binary log in row format with
// full row images and full row metadata, GTIDs in strict mode, server_id 1. They are set up for speed, not
// durability (no fsync of the binlog or the redo log). MariaDB refuses to run as root, so when the tests run
// as root the server runs as the "mysql" OS user in a temporary directory it owns. The user "root" connects
// without a password over TCP from 127.0.0.1; users made by CreateUser must use their password.
//
// The binaries (mariadb-install-db, mariadbd) are found in $MYSQLTEST_BIN, else PATH and /usr/sbin. Without
// them the test fails, naming the Debian package to install.
package mysqltest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/skippr-dev/skippr/testkit/internal/proc"
)

// AptPackage is the Debian package that provides the server binaries.
const AptPackage = "mariadb-server"

// Options change a server's configuration.
type Options struct {
	// Settings are server options added to (or replacing) the defaults, e.g. {"binlog_format": "STATEMENT"}.
	// An empty value removes an option.
	Settings map[string]string
}

// Server is a running MariaDB server.
type Server struct {
	Host string // always 127.0.0.1
	Port int
	// Dir holds the data directory ("data"), the binary logs ("binlog.*"), the socket and the server log
	// ("server.log").
	Dir string

	proc    *proc.Process
	dbSeq   atomic.Int64
	userSeq atomic.Int64
}

// binary finds a server program in $MYSQLTEST_BIN, PATH or /usr/sbin (Debian puts mariadbd there, outside a
// normal user's PATH).
func binary(name string) (string, error) {
	if d := os.Getenv("MYSQLTEST_BIN"); d != "" {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("MYSQLTEST_BIN=%s does not hold %s", d, name)
		}
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/usr/bin"} {
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			return filepath.Join(d, name), nil
		}
	}
	return "", fmt.Errorf("MariaDB server program %s not found in $MYSQLTEST_BIN, PATH or /usr/sbin: install the Debian package %q (apt-get install -y --no-install-recommends %s)", name, AptPackage, AptPackage)
}

// env is the servers' whole environment: UTC, so DATETIME/TIMESTAMP tests do not depend on the machine.
var env = []string{"LC_ALL=C.UTF-8", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "TZ=UTC"}

// Start initialises and starts a new server. The caller stops it with Stop.
func Start(ctx context.Context, opts Options) (*Server, error) {
	install, err := binary("mariadb-install-db")
	if err != nil {
		return nil, err
	}
	mariadbd, err := binary("mariadbd")
	if err != nil {
		return nil, err
	}
	cred, err := proc.RunAs("mysql", AptPackage)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "mysqltest-")
	if err != nil {
		return nil, err
	}
	// The server's user must reach the directory (MkdirTemp makes it 0700).
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	s, err := proc.Retry(func() (*Server, error) {
		s, err := start(ctx, install, mariadbd, cred, dir, opts)
		if err != nil {
			os.RemoveAll(filepath.Join(dir, "data"))
		}
		return s, err
	}, "Address already in use", installFailed)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// installFailed starts the error of a failed mariadb-install-db. It is retried like a port taken: once in CI,
// with several servers starting at once on a loaded machine, it failed for one package's shared server and every
// test of that package with it, and its log was gone; the error now carries the log.
const installFailed = "mariadb-install-db"

func (s *Server) socket() string { return filepath.Join(s.Dir, "mysqld.sock") }

func start(ctx context.Context, install, mariadbd string, cred *syscall.Credential, dir string, opts Options) (*Server, error) {
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Host: "127.0.0.1", Port: port, Dir: dir}
	conf := map[string]string{
		"datadir": filepath.Join(dir, "data"),
		// Its own tmpdir: CI lost a temporary table's file in the shared /tmp mid-query
		// ("Error on delete of '/tmp/#sql-temptable-…'", errno 2), failing a test that did nothing wrong.
		"tmpdir":                         filepath.Join(dir, "tmp"),
		"socket":                         s.socket(),
		"pid-file":                       filepath.Join(dir, "mysqld.pid"),
		"log-error":                      filepath.Join(dir, "server.log"),
		"bind-address":                   "127.0.0.1",
		"port":                           strconv.Itoa(port),
		"skip-name-resolve":              "1",
		"server_id":                      "1",
		"log_bin":                        filepath.Join(dir, "binlog"),
		"binlog_format":                  "ROW",
		"binlog_row_image":               "FULL",
		"binlog_row_metadata":            "FULL",
		"gtid_strict_mode":               "1",
		"binlog_expire_logs_seconds":     "604800",
		"character_set_server":           "utf8mb4",
		"collation_server":               "utf8mb4_general_ci",
		"default_time_zone":              "+00:00",
		"max_connections":                "200",
		"innodb_buffer_pool_size":        "64M",
		"innodb_log_file_size":           "64M",
		"innodb_flush_log_at_trx_commit": "0",
		"sync_binlog":                    "0",
		"performance_schema":             "OFF",
	}
	for k, v := range opts.Settings {
		if v == "" {
			delete(conf, k)
			continue
		}
		conf[k] = v
	}
	keys := make([]string, 0, len(conf))
	for k := range conf {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var cnf strings.Builder
	cnf.WriteString("[mariadbd]\n")
	for _, k := range keys {
		fmt.Fprintf(&cnf, "%s=%s\n", k, conf[k])
	}
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return nil, err
	}
	cnfPath := filepath.Join(dir, "my.cnf")
	if err := os.WriteFile(cnfPath, []byte(cnf.String()), 0o644); err != nil {
		return nil, err
	}
	if err := proc.ChownAll(dir, cred); err != nil {
		return nil, fmt.Errorf("chown %s to the mysql user: %w", dir, err)
	}
	// --defaults-file must come first; root gets no password (normal authentication) and the test database is
	// not made.
	inst := proc.Command(cred, env, install, "--defaults-file="+cnfPath, "--auth-root-authentication-method=normal", "--skip-test-db")
	if out, err := inst.CombinedOutput(); err != nil {
		// Its own output only points at the server log, which the retry below (or the failed test) deletes.
		return nil, fmt.Errorf("%s: %w\n%s\nserver log:\n%s", installFailed, err, out, proc.FileTail(filepath.Join(dir, "server.log"), 40))
	}
	p, err := proc.Start(proc.Command(cred, env, mariadbd, "--defaults-file="+cnfPath), "mariadbd", filepath.Join(dir, "server.log"), syscall.SIGKILL)
	if err != nil {
		return nil, err
	}
	s.proc = p
	if err := p.WaitReady(ctx, 90*time.Second, 100*time.Millisecond, s.bootstrap); err != nil {
		return nil, err
	}
	return s, nil
}

// bootstrap lets root connect over TCP without a password (mariadb-install-db makes only root@localhost,
// which a TCP connection from 127.0.0.1 does not match under skip-name-resolve).
func (s *Server) bootstrap(ctx context.Context) error {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", s.socket()
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'")
	if err == nil {
		_, err = db.ExecContext(ctx, "GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")
	}
	return err
}

// Log returns the server log so far.
func (s *Server) Log() string { return s.proc.Log() }

// Stop shuts the server down (SIGTERM, then kill after 30 s) and removes its directory.
func (s *Server) Stop() error {
	err := s.proc.Stop(syscall.SIGTERM, 30*time.Second)
	if rmErr := os.RemoveAll(s.Dir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}

// DSN is a go-sql-driver/mysql data source name for user to database db ("" for none).
func (s *Server) DSN(db, user, password string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = user, password, "tcp", net.JoinHostPort(s.Host, strconv.Itoa(s.Port)), db
	cfg.MultiStatements = true
	cfg.InterpolateParams = true
	return cfg.FormatDSN()
}

// Exec runs statements as root without a default database (users, server settings).
func (s *Server) Exec(t testing.TB, query string, args ...any) {
	t.Helper()
	if err := execDSN(s.DSN("", "root", ""), query, args...); err != nil {
		t.Fatalf("mysqltest: %s: %v", query, err)
	}
}

func execDSN(dsn, query string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, query, args...)
	return err
}

// User is a login user with a password, made by CreateUser.
type User struct {
	Name     string
	Password string
}

// CreateUser makes a user with a unique name and a password, connecting from 127.0.0.1, and grants it each
// of grants ("SELECT ON db.*", "REPLICATION SLAVE ON *.*"). Users live as long as the server.
func (s *Server) CreateUser(t testing.TB, grants ...string) User {
	t.Helper()
	n := s.userSeq.Add(1)
	u := User{Name: fmt.Sprintf("u%d_%s", n, proc.Sanitize(t.Name(), 20)), Password: fmt.Sprintf("pw-%d-%d", n, time.Now().UnixNano())}
	s.Exec(t, fmt.Sprintf("CREATE USER '%s'@'127.0.0.1' IDENTIFIED BY '%s'", u.Name, u.Password))
	for _, g := range grants {
		s.Exec(t, fmt.Sprintf("GRANT %s TO '%s'@'127.0.0.1'", g, u.Name))
	}
	return u
}

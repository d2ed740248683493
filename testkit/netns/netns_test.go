package netns_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/testkit/netns"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// echoEnv makes the test binary an echo server on the address it holds (a program to run inside hosts).
const echoEnv = "NETNS_TEST_ECHO"

func TestMain(m *testing.M) {
	if addr := os.Getenv(echoEnv); addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("listening on", l.Addr())
		echo(l)
		return
	}
	pgtest.Main(m)
}

// echo serves line echo on l until it is closed.
func echo(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// roundTrip sends a fresh token and waits for it to come back within d (echoes of earlier tokens are skipped).
func roundTrip(c net.Conn, r *bufio.Reader, d time.Duration) error {
	token := strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := c.SetDeadline(time.Now().Add(d)); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(c, token); err != nil {
		return err
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if strings.TrimSpace(line) == token {
			return nil
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func rootLinks(t *testing.T) []string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	slices.Sort(names)
	return names
}

// TestLinkCut: hosts a (server) and b (client) talk TCP; each fault stops them within a second (an established
// connection and a new dial both), a third host c reaches a exactly when the fault should spare it, and undoing
// the fault restores the old connection and new dials.
func TestLinkCut(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cut, heal func(a, b *netns.Host) error
		cReachesA bool
	}{
		{"server link down", func(a, b *netns.Host) error { return a.LinkDown() }, func(a, b *netns.Host) error { return a.LinkUp() }, false},
		{"client link down", func(a, b *netns.Host) error { return b.LinkDown() }, func(a, b *netns.Host) error { return b.LinkUp() }, true},
		{"partition", func(a, b *netns.Host) error { return a.Partition(b) }, func(a, b *netns.Host) error { return b.Heal(a) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := netns.New(t, "nstcut")
			a, b, c := n.Host(t, "a"), n.Host(t, "b"), n.Host(t, "c")
			l, err := a.Listen("tcp", a.HostPort(0))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go echo(l)
			addr := l.Addr().String()
			conn, err := b.DialContext(context.Background(), "tcp", addr)
			if err != nil {
				t.Fatalf("dial %s from b: %v", addr, err)
			}
			defer conn.Close()
			r := bufio.NewReader(conn)
			if err := roundTrip(conn, r, 10*time.Second); err != nil {
				t.Fatalf("round trip before the fault: %v", err)
			}
			dial := func(h *netns.Host, d time.Duration) error {
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				nc, err := h.DialContext(ctx, "tcp", addr)
				if err == nil {
					nc.Close()
				}
				return err
			}

			if err := tc.cut(a, b); err != nil {
				t.Fatal(err)
			}
			if err := roundTrip(conn, r, time.Second); !isTimeout(err) {
				t.Fatalf("round trip during the fault: got %v, want a timeout within 1s", err)
			}
			if err := dial(b, time.Second); err == nil {
				t.Fatalf("a new dial from b during the fault succeeded")
			}
			if err := dial(c, 5*time.Second); (err == nil) != tc.cReachesA {
				t.Fatalf("dial from c during the fault: %v, want success %v", err, tc.cReachesA)
			}

			if err := tc.heal(a, b); err != nil {
				t.Fatal(err)
			}
			// The stalled connection resumes with its next retransmission, whose back-off has grown during the fault.
			if err := roundTrip(conn, r, 20*time.Second); err != nil {
				t.Fatalf("round trip on the old connection after the fault: %v", err)
			}
			if err := dial(b, 10*time.Second); err != nil {
				t.Fatalf("new dial from b after the fault: %v", err)
			}
		})
	}
}

// TestRootCannotReach: a host's listener is not reachable from the root namespace, and the root namespace gets no
// interface from the segment.
func TestRootCannotReach(t *testing.T) {
	before := rootLinks(t)
	n := netns.New(t, "nstroot")
	a := n.Host(t, "a")
	l, err := a.Listen("tcp", a.HostPort(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go echo(l)
	d := net.Dialer{Timeout: time.Second}
	if c, err := d.Dial("tcp", l.Addr().String()); err == nil {
		c.Close()
		t.Fatalf("the root namespace reached %s", l.Addr())
	}
	if after := rootLinks(t); !slices.Equal(before, after) {
		t.Fatalf("root namespace interfaces changed: before %v, with a segment %v", before, after)
	}
}

// TestCommand: a program started with Command runs inside the host (it sees the host's eth0 address), its
// process is the program itself (so signals reach it), and with a Credential it runs as that user.
func TestCommand(t *testing.T) {
	n := netns.New(t, "nstcmd")
	h := n.Host(t, "a")
	pg, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("the postgres OS user (from the postgresql package) is needed: %v", err)
	}
	pgUID, _ := strconv.Atoi(pg.Uid)
	pgGID, _ := strconv.Atoi(pg.Gid)
	for _, tc := range []struct {
		name string
		cred *syscall.Credential
		uid  int
	}{
		{"root", nil, 0},
		{"postgres", &syscall.Credential{Uid: uint32(pgUID), Gid: uint32(pgGID)}, pgUID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var cmd *exec.Cmd
			script := `echo $$; id -u; cat /proc/net/fib_trie | grep -c "` + h.Addr() + `"; exec sleep 600`
			if tc.cred == nil {
				cmd = h.Command(ctx, "sh", "-c", script)
			} else {
				cmd = exec.CommandContext(ctx, "sh", "-c", script)
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: tc.cred, Pdeathsig: syscall.SIGKILL}
				if err := h.Wrap(cmd); err != nil {
					t.Fatal(err)
				}
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(out)
			var lines []string
			for len(lines) < 3 && sc.Scan() {
				lines = append(lines, sc.Text())
			}
			if len(lines) < 3 {
				t.Fatalf("output %q: %v", lines, sc.Err())
			}
			if lines[0] != strconv.Itoa(cmd.Process.Pid) {
				t.Errorf("the program's pid is %s, the started process's %d: signals would miss it", lines[0], cmd.Process.Pid)
			}
			if lines[1] != strconv.Itoa(tc.uid) {
				t.Errorf("runs as uid %s, want %d", lines[1], tc.uid)
			}
			if lines[2] == "0" {
				t.Errorf("the program does not see %s: it runs outside the host's namespace", h.Addr())
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("wait after SIGKILL: %v", err)
			}
		})
	}
}

// processGone reports whether pid has exited (a zombie counts as gone: it holds no namespace).
// waitInNamespace waits until process pid runs program (by its /proc comm) in the named network namespace.
func waitInNamespace(t *testing.T, pid int, namespace, program string) {
	t.Helper()
	var want syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+namespace, &want); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var st syscall.Stat_t
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino &&
			strings.TrimSpace(string(comm)) == program {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d does not run %s in namespace %s after a minute (comm %q)", pid, program, namespace, comm)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func namespacesWith(t *testing.T, prefix string) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			names = append(names, f[0])
		}
	}
	return names
}

// TestCleanup: when a test ends, its namespaces, links and the processes left running in its hosts are gone,
// and the root namespace's interfaces are as before.
func TestCleanup(t *testing.T) {
	before := rootLinks(t)
	var names []string
	var pid int
	t.Run("segment", func(t *testing.T) {
		n := netns.New(t, "nstclean")
		a := n.Host(t, "a")
		n.Host(t, "b")
		cmd := a.Command(context.Background(), "sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go cmd.Wait()
		pid = cmd.Process.Pid
		names = n.Namespaces()
		if len(names) != 3 {
			t.Fatalf("namespaces %v, want the switch and two hosts", names)
		}
		if got := namespacesWith(t, names[0][:strings.LastIndexByte(names[0], '-')]); len(got) != 3 {
			t.Fatalf("ip netns list shows %v, want 3 namespaces", got)
		}
	})
	for _, name := range names {
		if got := namespacesWith(t, name); len(got) > 0 {
			t.Errorf("namespace %s is still there after the test", name)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d started in a host still runs after the test", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if after := rootLinks(t); !slices.Equal(before, after) {
		t.Fatalf("root namespace interfaces changed: before %v, after %v", before, after)
	}
}

const killedRunEnv = "NETNS_TEST_KILLED_RUN"

// TestKilledRunSwept: a test binary SIGKILLed with a segment up (and a process running in a host, detached from
// it) leaves its namespaces; the next New with the same prefix removes them and kills the process.
func TestKilledRunSwept(t *testing.T) {
	if os.Getenv(killedRunEnv) != "" {
		// The child: make a segment, start a process that outlives us, report, and die without cleanups.
		n := netns.New(t, "nstkill")
		a := n.Host(t, "a")
		cmd := a.Command(context.Background(), "sleep", "600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // no Pdeathsig: it must outlive us
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// The started process is `ip netns exec`, which enters the namespace and then execs sleep: report it
		// only once it runs sleep inside the host, or a loaded machine lets the sweep look before it got there
		// (CI: "process … still runs after the sweep").
		waitInNamespace(t, cmd.Process.Pid, a.Namespace, "sleep")
		fmt.Printf("LEFTOVER %d %s\n", cmd.Process.Pid, strings.Join(n.Namespaces(), " "))
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	if os.Geteuid() != 0 {
		t.Skip("netns: network namespaces need root; CI runs as root")
	}
	child := exec.Command(os.Args[0], "-test.run=^TestKilledRunSwept$", "-test.v")
	child.Env = append(os.Environ(), killedRunEnv+"=1")
	out, _ := child.CombinedOutput()
	var pid int
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "LEFTOVER" {
			pid, _ = strconv.Atoi(f[1])
			names = f[2:]
		}
	}
	if pid == 0 || len(names) != 2 {
		t.Fatalf("the child did not report its leftovers:\n%s", out)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	for _, name := range names {
		if len(namespacesWith(t, name)) == 0 {
			t.Fatalf("the killed child left no namespace %s: the test proves nothing", name)
		}
	}
	if processGone(pid) {
		t.Fatalf("the process the killed child left in its host is not running: the test proves nothing")
	}

	netns.New(t, "nstkill")
	for _, name := range names {
		if got := namespacesWith(t, name); len(got) > 0 {
			t.Errorf("namespace %s left by a killed run survived the next New", name)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d left in a killed run's host still runs after the sweep", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPostgresInHost: a pgtest server started in host A is reachable from host B on A's address (as the
// postgres superuser and as a role with its password), not from the root namespace, and the test binary's own
// helpers still work through the Unix socket.
func TestPostgresInHost(t *testing.T) {
	n := netns.New(t, "nstpg")
	a, b := n.Host(t, "a"), n.Host(t, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := pgtest.Start(ctx, pgtest.Options{Netns: a})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	if srv.Host != a.Addr() {
		t.Fatalf("server host %s, want host a's address %s", srv.Host, a.Addr())
	}
	db := srv.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	db.Exec(t, `INSERT INTO t VALUES (1), (2)`)
	role := srv.CreateRole(t)
	db.Exec(t, fmt.Sprintf(`GRANT SELECT ON t TO %s`, role.Name))

	for _, tc := range []struct {
		name string
		conn string
	}{
		{"superuser", db.ConnString()},
		{"role with password", db.ConnStringAs(role)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := pgx.ParseConfig(tc.conn)
			if err != nil {
				t.Fatal(err)
			}
			cfg.DialFunc = b.DialContext
			c, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatalf("connect from host b: %v", err)
			}
			defer c.Close(ctx)
			var server, client string
			var rows int
			if err := c.QueryRow(ctx, `SELECT host(inet_server_addr()), host(inet_client_addr()), (SELECT count(*) FROM t)`).Scan(&server, &client, &rows); err != nil {
				t.Fatal(err)
			}
			if server != a.Addr() || client != b.Addr() || rows != 2 {
				t.Fatalf("server %s client %s rows %d, want %s %s 2", server, client, rows, a.Addr(), b.Addr())
			}
		})
	}

	cfg, err := pgx.ParseConfig(db.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnectTimeout = time.Second
	if c, err := pgx.ConnectConfig(ctx, cfg); err == nil {
		c.Close(ctx)
		t.Fatalf("the root namespace reached the server in host a at %s", srv.Host)
	}
}

// TestProcessFaults: a program (this test binary as an echo server) runs inside host a with its environment;
// host b talks to it; SIGSTOP freezes it (b's round trips stall) and SIGCONT resumes it; SIGKILL ends it (b's
// connection is closed) and a new one on the same address serves b again.
func TestProcessFaults(t *testing.T) {
	n := netns.New(t, "nstproc")
	a, b := n.Host(t, "a"), n.Host(t, "b")
	addr := a.HostPort(7000)
	start := func() *netns.Process {
		p := a.Start(t, []string{echoEnv + "=" + addr}, os.Args[0])
		if err := p.WaitOutput("listening on "+addr, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		return p
	}
	connect := func() (net.Conn, *bufio.Reader) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := b.DialContext(ctx, "tcp", addr)
		if err != nil {
			t.Fatalf("dial %s from b: %v", addr, err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	p := start()
	c, r := connect()
	if err := roundTrip(c, r, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c, r, time.Second); !isTimeout(err) {
		t.Fatalf("round trip with the server stopped: %v, want a timeout", err)
	}
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c, r, 10*time.Second); err != nil {
		t.Fatalf("round trip after SIGCONT: %v", err)
	}

	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := p.Wait(time.Second); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("exit after SIGKILL: %v", err)
	}
	if err := roundTrip(c, r, 5*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("round trip to a killed server: %v, want the connection closed", err)
	}
	start()
	c, r = connect()
	if err := roundTrip(c, r, 10*time.Second); err != nil {
		t.Fatalf("round trip to the restarted server: %v", err)
	}
}

// TestParallelSegments: segments made at the same time by parallel tests, with the same host names, get
// distinct namespaces, and each works on its own.
func TestParallelSegments(t *testing.T) {
	seen := make(chan []string, 4)
	t.Run("group", func(t *testing.T) {
		for i := range 4 {
			t.Run(strconv.Itoa(i), func(t *testing.T) {
				t.Parallel()
				n := netns.New(t, "nstpar")
				a, b := n.Host(t, "a"), n.Host(t, "b")
				l, err := a.Listen("tcp", a.HostPort(0))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				go echo(l)
				c, err := b.DialContext(context.Background(), "tcp", l.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if err := roundTrip(c, bufio.NewReader(c), 10*time.Second); err != nil {
					t.Fatal(err)
				}
				seen <- n.Namespaces()
			})
		}
	})
	close(seen)
	all := map[string]bool{}
	for names := range seen {
		if len(names) != 3 {
			t.Errorf("segment namespaces %v, want 3", names)
		}
		for _, name := range names {
			if all[name] {
				t.Errorf("namespace %s made by two segments", name)
			}
			all[name] = true
		}
	}
	if len(all) != 12 {
		t.Errorf("%d namespaces over 4 segments, want 12", len(all))
	}
}

// TestEtcdInHost: an etcd member started with Host.Start in host infra serves host b on infra's address (the
// fleet tests' layout), and not the root namespace.
func TestEtcdInHost(t *testing.T) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("etcd is needed (apt-get install -y etcd-server): %v", err)
	}
	n := netns.New(t, "nstetcd")
	infra, b := n.Host(t, "infra"), n.Host(t, "b")
	client, peer := "http://"+infra.HostPort(2379), "http://"+infra.HostPort(2380)
	p := infra.Start(t, nil, bin, "--name", "m1", "--data-dir", t.TempDir(),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "m1="+peer)
	health := func(dial func(ctx context.Context, network, address string) (net.Conn, error)) error {
		hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: dial}}
		resp, err := hc.Get(client + "/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
			return fmt.Errorf("%s: %s", resp.Status, body)
		}
		return nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := health(b.DialContext)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd in host infra not healthy from host b within 30s: %v\n%s", err, p.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := health((&net.Dialer{}).DialContext); err == nil {
		t.Fatalf("the root namespace reached etcd in host infra at %s", client)
	}
}

const failedRunEnv = "NETNS_TEST_FAILED_RUN"

// TestFailedTestCleansUp: a test that fails (t.Fatal) with a segment up and a detached process running in a
// host still removes its namespaces and kills the process (no sweep involved: this test makes no segment).
func TestFailedTestCleansUp(t *testing.T) {
	if os.Getenv(failedRunEnv) != "" {
		n := netns.New(t, "nstfail")
		a := n.Host(t, "a")
		cmd := a.Command(context.Background(), "sleep", "600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // no Pdeathsig: only the cleanup may end it
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// The started process is `ip netns exec`, which enters the namespace and then execs sleep: report it
		// only once it runs sleep inside the host, or a loaded machine lets the sweep look before it got there
		// (CI: "process … still runs after the sweep").
		waitInNamespace(t, cmd.Process.Pid, a.Namespace, "sleep")
		fmt.Printf("LEFTOVER %d %s\n", cmd.Process.Pid, strings.Join(n.Namespaces(), " "))
		t.Fatal("deliberate failure")
	}
	if os.Geteuid() != 0 {
		t.Skip("netns: network namespaces need root; CI runs as root")
	}
	// Should the child's cleanup not run at all, its namespaces go with it here (its process is gone by then).
	t.Cleanup(func() { _, _ = netns.Sweep("nstfail") })
	child := exec.Command(os.Args[0], "-test.run=^TestFailedTestCleansUp$", "-test.v")
	child.Env = append(os.Environ(), failedRunEnv+"=1")
	out, err := child.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "deliberate failure") {
		t.Fatalf("the child test did not fail as planned (%v):\n%s", err, out)
	}
	var pid int
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "LEFTOVER" {
			pid, _ = strconv.Atoi(f[1])
			names = f[2:]
		}
	}
	if pid == 0 || len(names) != 2 {
		t.Fatalf("the child did not report its segment:\n%s", out)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	for _, name := range names {
		if got := namespacesWith(t, name); len(got) > 0 {
			t.Errorf("namespace %s of a failed test survived it", name)
		}
	}
	if !processGone(pid) {
		t.Errorf("process %d started in a failed test's host still runs", pid)
	}
}

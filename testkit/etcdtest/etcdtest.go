// Package etcdtest runs a real etcd cluster for tests: three members, each its own process, on 127.0.0.1, with
// its data in a temp dir. Members can be stopped, killed and started again (rejoining with their data), so a
// test can take one member away (the cluster keeps quorum) or two (it loses quorum) and bring them back.
//
//	c := etcdtest.New(t, 3)            // killed when the test ends
//	cli := clientv3.New(clientv3.Config{Endpoints: c.Endpoints()})
//	c.Kill(0); c.Start(0)
//
// The binary is $ETCD, else `etcd` on PATH, else /usr/bin/etcd. Debian's etcd 3.4 (installed here and in CI)
// serves everything skippr's v3.7 client uses: KV, Txn, Lease and Watch are the same v3 API since 3.0, and the
// client's concurrency package (sessions, elections) is built on those alone. A v3.7 server (built from
// go.etcd.io/etcd/server/v3) can be used through $ETCD with the same flags. Without a binary the test is
// skipped, or fails when $CI is set, so that CI never passes by skipping.
package etcdtest

import (
	"bytes"
	"context"
	"encoding/json"
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
)

// Binary finds etcd: $ETCD, else PATH, else /usr/bin/etcd.
func Binary() (string, error) {
	if p := os.Getenv("ETCD"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("etcd not found at $ETCD=%s: %v", p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd", nil
	}
	return "", fmt.Errorf("etcd not found: install it (`apt-get install -y etcd-server`) or set $ETCD")
}

// Cluster is a set of etcd members on 127.0.0.1.
type Cluster struct {
	bin     string
	dir     string
	token   string
	members []*Member
}

// Member is one etcd process.
type Member struct {
	Name      string
	ClientURL string // http://127.0.0.1:PORT
	PeerURL   string
	dir       string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	out     *lockedBuffer
	started bool // started once: later starts rejoin the existing cluster
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

// freePorts returns k distinct free ports on 127.0.0.1. Every listener stays open until all k are chosen: one
// closed before the next was asked for could be handed out again, and a cluster whose initial members share a
// peer URL does not start ("has duplicate url", seen in CI).
func freePorts(k int) ([]int, error) {
	ports := make([]int, 0, k)
	for range k {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// New starts an n-member cluster for one test and waits until it has a leader; every member is killed at
// t.Cleanup.
func New(t testing.TB, n int) *Cluster {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	c, err := Start(context.Background(), bin, t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// Start starts an n-member cluster with its data under dir and returns once every member answers /health.
func Start(ctx context.Context, bin, dir string, n int) (*Cluster, error) {
	c := &Cluster{bin: bin, dir: dir, token: fmt.Sprintf("etcdtest-%d", time.Now().UnixNano())}
	var initial []string
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	for i := range n {
		cp, pp := ports[2*i], ports[2*i+1]
		m := &Member{
			Name:      "m" + strconv.Itoa(i),
			ClientURL: "http://127.0.0.1:" + strconv.Itoa(cp),
			PeerURL:   "http://127.0.0.1:" + strconv.Itoa(pp),
			dir:       filepath.Join(dir, "m"+strconv.Itoa(i)),
		}
		c.members = append(c.members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	cluster := strings.Join(initial, ",")
	for i := range c.members {
		if err := c.start(i, cluster); err != nil {
			c.Close()
			return nil, err
		}
	}
	for i := range c.members {
		if err := c.WaitHealthy(ctx, i, 60*time.Second); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

func (c *Cluster) initialCluster() string {
	var s []string
	for _, m := range c.members {
		s = append(s, m.Name+"="+m.PeerURL)
	}
	return strings.Join(s, ",")
}

func (c *Cluster) start(i int, cluster string) error {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return fmt.Errorf("etcd member %s is already running", m.Name)
	}
	state := "new"
	if m.started {
		state = "existing"
	}
	m.out = &lockedBuffer{}
	cmd := exec.Command(c.bin,
		"--name", m.Name,
		"--data-dir", m.dir,
		"--listen-client-urls", m.ClientURL,
		"--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL,
		"--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", cluster,
		"--initial-cluster-state", state,
		"--initial-cluster-token", c.token,
		// Tests run on a loaded machine: a slow fsync must not look like a dead leader.
		"--heartbeat-interval", "100",
		"--election-timeout", "1500",
		"--logger", "zap", "--log-level", "warn",
	)
	cmd.Stdout, cmd.Stderr = m.out, m.out
	// The member must not outlive a test binary that crashes before Cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start etcd member %s: %w", m.Name, err)
	}
	m.cmd, m.started = cmd, true
	exited := make(chan struct{})
	m.exited = exited
	go func() {
		cmd.Wait()
		close(exited)
	}()
	return nil
}

// Endpoints are the client URLs of every member, running or not.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.ClientURL)
	}
	return out
}

// Member returns member i.
func (c *Cluster) Member(i int) *Member { return c.members[i] }

// Start starts member i again after Stop or Kill; it rejoins with its data.
func (c *Cluster) Start(i int) error { return c.start(i, c.initialCluster()) }

// Kill sends SIGKILL to member i and waits for it to exit.
func (c *Cluster) Kill(i int) { c.signal(i, syscall.SIGKILL) }

// Stop sends SIGTERM to member i and waits for it to exit.
func (c *Cluster) Stop(i int) { c.signal(i, syscall.SIGTERM) }

func (c *Cluster) signal(i int, sig syscall.Signal) {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Signal(sig)
	select {
	case <-m.exited:
	case <-time.After(30 * time.Second):
		m.cmd.Process.Kill()
		<-m.exited
	}
	m.cmd = nil
}

// Running reports whether member i's process is running.
func (c *Cluster) Running(i int) bool {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// Output is what member i printed since it was last started (for failure messages).
func (c *Cluster) Output(i int) string {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.out == nil {
		return ""
	}
	return m.out.String()
}

// WaitHealthy waits until member i answers /health with health true (it is part of a cluster with a leader).
func (c *Cluster) WaitHealthy(ctx context.Context, i int, timeout time.Duration) error {
	m := c.members[i]
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.ClientURL+"/health", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			var b bytes.Buffer
			b.ReadFrom(resp.Body)
			resp.Body.Close()
			last = b.String()
			if resp.StatusCode == http.StatusOK && strings.Contains(last, `"health":"true"`) {
				return nil
			}
		} else {
			last = err.Error()
		}
		m.mu.Lock()
		exited := m.exited
		m.mu.Unlock()
		select {
		case <-exited:
			return fmt.Errorf("etcd member %s exited before it was healthy: %s", m.Name, strings.TrimSpace(c.Output(i)))
		case <-ctx.Done():
			return fmt.Errorf("etcd member %s at %s not healthy after %s: last answer %s; output: %s", m.Name, m.ClientURL, timeout, last, strings.TrimSpace(c.Output(i)))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Close kills every member.
func (c *Cluster) Close() {
	for i := range c.members {
		c.Kill(i)
	}
}

// Leader returns the index of the member that leads the cluster now, asking each running member's
// maintenance status through etcd's HTTP gateway (member ids are decimal strings there).
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	var last error
	for i, m := range c.members {
		if !c.Running(i) {
			continue
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.ClientURL+"/v3/maintenance/status", strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err
			continue
		}
		var st struct {
			Header struct {
				MemberID string `json:"member_id"`
			} `json:"header"`
			Leader string `json:"leader"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil || st.Leader == "" {
			last = fmt.Errorf("member %s status: %v (leader %q)", m.Name, err, st.Leader)
			continue
		}
		if st.Header.MemberID == st.Leader {
			return i, nil
		}
	}
	return -1, fmt.Errorf("no running member says it leads: %v", last)
}

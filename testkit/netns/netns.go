// Package netns makes test hosts out of Linux network namespaces: a private layer-2 segment with a handful of
// hosts on it, each with its own address, so a test can run servers "on other machines", cut a host's cable and
// plug it back in, all on one box and without touching the machine's own network.
//
// # Topology
//
//	namespace <base>-sw (the switch)        namespace <base>-w1
//	┌──────────────────────────────┐        ┌──────────────────────┐
//	│ br0: bridge, no address      │  veth  │ lo   127.0.0.1       │
//	│   ├── p-w1 ──────────────────┼────────┼─ eth0 10.213.X.2/24  │
//	│   └── p-w2 ───────┐          │        └──────────────────────┘
//	└───────────────────┼──────────┘        namespace <base>-w2
//	                    │   veth            ┌──────────────────────┐
//	                    └───────────────────┼─ eth0 10.213.X.3/24  │
//	                                        │ lo   127.0.0.1       │
//	                                        └──────────────────────┘
//
// Each segment gets a /24 in 10.213.0.0/16 and each host the next address in it. The hosts have no default
// route: they reach each other and nothing else, and nothing outside reaches them (not even the root namespace,
// which is where the test binary runs). A test talks to a host's servers from inside a host: Host.DialContext
// and Host.Listen open sockets in the host's namespace, Host.Do runs any Go code there, Host.Command starts a
// program there.
//
// The bridge lives in a namespace of its own rather than in the root namespace so that the test adds no
// interface, address or route to the machine itself: nothing a test does can collide with the machine's network
// or with another test's segment, and a test killed before its cleanup leaves nothing in the root namespace
// (only named namespaces, which the next New sweeps). Since every segment is isolated in its own namespaces,
// two segments with the same subnet cannot see each other; the subnet is still picked at random so that logs
// of parallel tests are easy to tell apart.
//
// Host.LinkDown sets the host's port on the bridge down: the host keeps its address and its interface, its
// packets are dropped, and its connections stall (they do not fail at once), as when a cable is pulled at the
// switch. Host.LinkUp plugs it back; established TCP connections resume with their next retransmission.
// Host.Partition cuts two hosts off from each other only (each pins the other's IP to a MAC address nobody
// has), and Host.Heal undoes it.
//
// Host.Start runs a program (a worker, a server) inside a host with its output kept; Process.Signal sends it
// SIGKILL, SIGSTOP or SIGCONT. testkit/pgtest (Options.Netns) and testkit/s3test (StartIn) run their
// servers inside a host, listening on its address.
//
// # Cleanup
//
// New and Host register t.Cleanup functions that kill every process still inside the namespaces (SIGKILL),
// delete the veth pairs and the bridge and remove the namespaces, whether the test passed or failed. A test
// binary killed before its cleanups leaves named namespaces behind; their names carry the binary's process id
// (<prefix>-<pid>-<random>-<host>), and New sweeps namespaces with its prefix whose process is gone, killing
// the processes still inside them first (a leftover whose process id is in use again stays until that process
// ends). Processes started with Host.Command get SIGKILL when the thread that started them exits (Pdeathsig), so
// they rarely outlive the test binary either.
//
// # Requirements
//
// Root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2's `ip` (namespaces are created with `ip netns add` and
// programs started with `ip netns exec`, so that `ip netns list` and `ip netns pids` show them); util-linux's
// `setpriv` to run a program as another user. New skips the test when it does not run as root or `ip` is
// missing; CI runs as root.
package netns

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
)

// runDir is where `ip netns add` mounts named namespaces.
const runDir = "/run/netns"

// Net is one private layer-2 segment: a bridge in its own namespace, and the hosts plugged into it.
type Net struct {
	// Prefix starts every namespace name of the segment (see New).
	Prefix string
	// Subnet is the segment's /24; hosts get .2, .3, ...
	Subnet netip.Prefix

	base   string // <prefix>-<pid>-<random>
	ip     string // path of the ip binary
	sw     *nsHandle
	bridge netlink.Link

	mu     sync.Mutex
	next   netip.Addr
	hosts  map[string]*Host
	closed bool
}

var (
	prefixRe = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)
	hostRe   = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)
)

// New makes a segment whose namespaces are named <prefix>-<pid>-<random>-…; prefix is 1-12 lower-case letters
// and digits, starting with a letter. It first sweeps namespaces with that prefix left behind by test binaries
// that are gone. Everything is removed when the test ends. New skips the test when it does not run as root or
// iproute2's `ip` is missing.
func New(t testing.TB, prefix string) *Net {
	t.Helper()
	ipPath := requirements(t)
	if !prefixRe.MatchString(prefix) {
		t.Fatalf("netns: prefix %q: use 1-12 lower-case letters and digits starting with a letter (it starts every namespace name)", prefix)
	}
	if swept, err := Sweep(prefix); err != nil {
		t.Fatalf("netns: sweep leftovers of killed runs: %v", err)
	} else if len(swept) > 0 {
		t.Logf("netns: removed namespaces left by killed test runs: %s", strings.Join(swept, " "))
	}
	rnd := make([]byte, 3)
	_, _ = rand.Read(rnd)
	n := &Net{
		Prefix: prefix,
		Subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 213, rnd[0]%254 + 1, 0}), 24),
		base:   fmt.Sprintf("%s-%d-%s", prefix, os.Getpid(), hex.EncodeToString(rnd)),
		ip:     ipPath,
		hosts:  map[string]*Host{},
	}
	n.next = n.Subnet.Addr().Next().Next() // .2: .1 is left for a gateway no one needs yet
	t.Cleanup(func() {
		if err := n.close(); err != nil {
			t.Errorf("netns: cleanup of segment %s: %v", n.base, err)
		}
	})
	sw, err := n.addNamespace(n.base + "-sw")
	if err != nil {
		t.Fatalf("netns: %v", err)
	}
	n.sw = sw
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := sw.nl.LinkAdd(br); err != nil {
		t.Fatalf("netns: add bridge in %s: %v", sw.name, err)
	}
	if n.bridge, err = sw.nl.LinkByName("br0"); err != nil {
		t.Fatalf("netns: find bridge in %s: %v", sw.name, err)
	}
	if err := sw.nl.LinkSetUp(n.bridge); err != nil {
		t.Fatalf("netns: bridge up in %s: %v", sw.name, err)
	}
	return n
}

// requirements skips the test without root or ip, and returns ip's path.
func requirements(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("netns: network namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN); CI runs as root")
	}
	p, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("netns: iproute2's `ip` is not installed (apt-get install -y iproute2)")
	}
	return p
}

// Namespaces lists the names of the segment's namespaces that exist now: the switch first, then the hosts.
func (n *Net) Namespaces() []string {
	names, _ := listNamespaces()
	var out []string
	for _, name := range names {
		if strings.HasPrefix(name, n.base+"-") {
			out = append(out, name)
		}
	}
	return out
}

func (n *Net) close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	hosts := make([]*Host, 0, len(n.hosts))
	for _, h := range n.hosts {
		hosts = append(hosts, h)
	}
	n.mu.Unlock()
	var errs []error
	for _, h := range hosts {
		errs = append(errs, h.close())
	}
	if n.sw != nil {
		if n.bridge != nil {
			if err := n.sw.nl.LinkDel(n.bridge); err != nil {
				errs = append(errs, fmt.Errorf("delete bridge: %w", err))
			}
		}
		errs = append(errs, n.sw.remove(n.ip))
	}
	return errors.Join(errs...)
}

// nsHandle is a named namespace we made: its name, an open handle, and a netlink socket inside it.
type nsHandle struct {
	name string
	fd   vnetns.NsHandle
	nl   *netlink.Handle
}

// addNamespace creates a named namespace with `ip netns add` (so /run/netns is set up the way `ip netns exec`
// expects) and opens it.
func (n *Net) addNamespace(name string) (*nsHandle, error) {
	if out, err := exec.Command(n.ip, "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	h := &nsHandle{name: name, fd: vnetns.None()}
	fd, err := vnetns.GetFromName(name)
	if err != nil {
		_ = h.remove(n.ip)
		return nil, fmt.Errorf("open namespace %s: %w", name, err)
	}
	h.fd = fd
	if h.nl, err = netlink.NewHandleAt(fd); err != nil {
		_ = h.remove(n.ip)
		return nil, fmt.Errorf("netlink socket in namespace %s: %w", name, err)
	}
	return h, nil
}

// remove kills what still runs in the namespace and deletes it.
func (h *nsHandle) remove(ip string) error {
	var errs []error
	if _, err := killIn(filepath.Join(runDir, h.name)); err != nil {
		errs = append(errs, err)
	}
	if h.nl != nil {
		h.nl.Close()
	}
	if h.fd.IsOpen() {
		h.fd.Close()
	}
	if out, err := exec.Command(ip, "netns", "delete", h.name).CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("ip netns delete %s: %w: %s", h.name, err, strings.TrimSpace(string(out))))
	}
	return errors.Join(errs...)
}

// killIn SIGKILLs every process whose network namespace is the one mounted at path, and waits (up to 10 s) until
// none is left, so that deleting the namespace frees its interfaces at once. It returns the pids it killed.
func killIn(path string) ([]int, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	var killed []int
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := pidsIn(st.Dev, st.Ino)
		if len(pids) == 0 {
			return killed, nil
		}
		if time.Now().After(deadline) {
			return killed, fmt.Errorf("processes %v still in namespace %s 10s after SIGKILL", pids, filepath.Base(path))
		}
		for _, pid := range pids {
			if pid == os.Getpid() {
				continue // threads of ours inside it are Do calls; they leave on their own
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil && !contains(killed, pid) {
				killed = append(killed, pid)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// pidsIn lists the processes (not zombies: they hold no namespace) in the network namespace with that inode.
func pidsIn(dev, ino uint64) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st) != nil {
			continue
		}
		if st.Dev == dev && st.Ino == ino {
			pids = append(pids, pid)
		}
	}
	return pids
}

func listNamespaces() ([]string, error) {
	entries, err := os.ReadDir(runDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", runDir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

// Sweep removes the namespaces named <prefix>-<pid>-… whose process pid no longer runs (test binaries killed
// before their cleanups), after killing the processes still inside them. It returns the names it removed. New
// calls it; it is exported for a TestMain that wants a clean slate before any test.
func Sweep(prefix string) ([]string, error) {
	ip, err := exec.LookPath("ip")
	if err != nil {
		return nil, fmt.Errorf("iproute2's `ip` is not installed: %w", err)
	}
	names, err := listNamespaces()
	if err != nil {
		return nil, err
	}
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `-([0-9]+)-[0-9a-f]+-`)
	var swept []string
	var errs []error
	for _, name := range names {
		m := re.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if pid == os.Getpid() || alive(pid) {
			continue
		}
		h := &nsHandle{name: name, fd: vnetns.None()}
		if err := h.remove(ip); err != nil {
			errs = append(errs, err)
			continue
		}
		swept = append(swept, name)
	}
	return swept, errors.Join(errs...)
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Host is a network namespace plugged into a segment: lo up, eth0 with IP/24 on the segment's bridge.
type Host struct {
	// Name is the host's short name, as given to Net.Host ("w1").
	Name string
	// Namespace is the namespace's name (for `ip netns exec`, `ip -n`).
	Namespace string
	// IP is the host's address on the segment.
	IP netip.Addr

	net  *Net
	ns   *nsHandle
	port netlink.Link // the host's port on the bridge, in the switch namespace

	mu     sync.Mutex
	closed bool
}

// Host adds a host named name (1-12 lower-case letters and digits, starting with a letter) to the segment. It
// is removed when t ends, after killing whatever still runs in it.
func (n *Net) Host(t testing.TB, name string) *Host {
	t.Helper()
	h, err := n.host(name)
	if err != nil {
		t.Fatalf("netns: host %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := h.close(); err != nil {
			t.Errorf("netns: cleanup of host %s: %v", h.Namespace, err)
		}
	})
	return h
}

func (n *Net) host(name string) (_ *Host, err error) {
	if !hostRe.MatchString(name) || name == "sw" {
		return nil, fmt.Errorf("name %q: use 1-12 lower-case letters and digits starting with a letter, not \"sw\" (the switch's namespace)", name)
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, errors.New("the segment is already removed")
	}
	if _, dup := n.hosts[name]; dup {
		n.mu.Unlock()
		return nil, errors.New("the segment already has a host of that name")
	}
	if !n.Subnet.Contains(n.next) || n.next.As4()[3] == 255 {
		n.mu.Unlock()
		return nil, fmt.Errorf("no address left in %s", n.Subnet)
	}
	h := &Host{Name: name, Namespace: n.base + "-" + name, IP: n.next, net: n}
	n.next = n.next.Next()
	n.hosts[name] = h
	n.mu.Unlock()
	defer func() {
		if err != nil {
			err = errors.Join(err, h.close())
		}
	}()

	if h.ns, err = n.addNamespace(h.Namespace); err != nil {
		return nil, err
	}
	for _, step := range []struct {
		what string
		do   func() error
	}{
		{"veth pair", func() error {
			return n.sw.nl.LinkAdd(&netlink.Veth{
				LinkAttrs:     netlink.LinkAttrs{Name: "p-" + name, MasterIndex: n.bridge.Attrs().Index},
				PeerName:      "eth0",
				PeerNamespace: netlink.NsFd(int(h.ns.fd)),
			})
		}},
		{"switch port up", func() (err error) {
			if h.port, err = n.sw.nl.LinkByName("p-" + name); err != nil {
				return err
			}
			return n.sw.nl.LinkSetUp(h.port)
		}},
		{"lo up", func() error {
			lo, err := h.ns.nl.LinkByName("lo")
			if err != nil {
				return err
			}
			return h.ns.nl.LinkSetUp(lo)
		}},
		{"eth0 address and up", func() error {
			eth, err := h.ns.nl.LinkByName("eth0")
			if err != nil {
				return err
			}
			addr := &netlink.Addr{IPNet: &net.IPNet{IP: h.IP.AsSlice(), Mask: net.CIDRMask(24, 32)}}
			if err := h.ns.nl.AddrAdd(eth, addr); err != nil {
				return err
			}
			return h.ns.nl.LinkSetUp(eth)
		}},
	} {
		if err := step.do(); err != nil {
			return nil, fmt.Errorf("%s: %w", step.what, err)
		}
	}
	return h, nil
}

func (h *Host) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	h.net.mu.Lock()
	delete(h.net.hosts, h.Name)
	h.net.mu.Unlock()
	var errs []error
	if h.port != nil {
		// Deleting one end deletes the pair.
		if err := h.net.sw.nl.LinkDel(h.port); err != nil {
			errs = append(errs, fmt.Errorf("delete veth p-%s: %w", h.Name, err))
		}
	}
	if h.ns != nil {
		errs = append(errs, h.ns.remove(h.net.ip))
	}
	return errors.Join(errs...)
}

// Addr is the host's IP as a string (the address servers in the host listen on).
func (h *Host) Addr() string { return h.IP.String() }

// HostPort joins the host's IP and port, e.g. "10.213.7.2:5432".
func (h *Host) HostPort(port int) string { return net.JoinHostPort(h.IP.String(), strconv.Itoa(port)) }

// Command is exec.CommandContext for a program that runs inside the host. Set its Env, Dir, Stdout... as
// usual; it gets SIGKILL when the thread that starts it exits (Pdeathsig), so it dies with the test binary.
// Its process is the program itself (`ip netns exec` execs it), so cmd.Process.Signal reaches the program. To
// run it as another user, prepare the command yourself and use Wrap.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := h.Wrap(cmd); err != nil && cmd.Err == nil {
		cmd.Err = err
	}
	return cmd
}

// Wrap changes a command that is ready to start (program, arguments, and SysProcAttr with its Credential and
// Pdeathsig) so that it starts inside the host: it becomes `ip netns exec <ns> [setpriv …] program args…`,
// each step exec'ing the next, so the started process is the program. A Credential becomes setpriv's user,
// group and groups (ip must run as root to enter the namespace), and Pdeathsig is set again after the user
// change, which clears it. Call Wrap last, just before Start.
func (h *Host) Wrap(cmd *exec.Cmd) error {
	if cmd.Process != nil {
		return errors.New("netns: Wrap of a command already started")
	}
	if cmd.Err != nil {
		return cmd.Err
	}
	prog := cmd.Path
	if !strings.Contains(prog, "/") {
		p, err := exec.LookPath(prog)
		if err != nil {
			return fmt.Errorf("netns: %w", err)
		}
		prog = p
	}
	args := []string{"ip", "netns", "exec", h.Namespace}
	if a := cmd.SysProcAttr; a != nil && a.Credential != nil {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			return fmt.Errorf("netns: running a program as another user in a namespace needs util-linux's setpriv: %w", err)
		}
		c := a.Credential
		args = append(args, setpriv, "--reuid="+strconv.Itoa(int(c.Uid)), "--regid="+strconv.Itoa(int(c.Gid)))
		switch {
		case c.NoSetGroups:
			args = append(args, "--keep-groups")
		case len(c.Groups) == 0:
			args = append(args, "--clear-groups")
		default:
			gs := make([]string, len(c.Groups))
			for i, g := range c.Groups {
				gs[i] = strconv.Itoa(int(g))
			}
			args = append(args, "--groups="+strings.Join(gs, ","))
		}
		if a.Pdeathsig != 0 {
			args = append(args, "--pdeathsig="+unix.SignalName(a.Pdeathsig))
		}
		args = append(args, "--")
		a.Credential = nil
	}
	cmd.Path = h.net.ip
	cmd.Args = append(append(args, prog), cmd.Args[1:]...)
	return nil
}

// Do runs f on an OS thread inside the host's namespace: sockets f opens belong to the host (and stay usable
// from any goroutine afterwards). Goroutines f starts run outside it.
func (h *Host) Do(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := vnetns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("netns: current namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := vnetns.Set(h.ns.fd); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("netns: enter %s: %w", h.Namespace, err)
			return
		}
		ferr := f()
		if err := vnetns.Set(orig); err != nil {
			// The thread stays locked, so Go ends it with this goroutine rather than reuse it in the wrong
			// namespace.
			done <- errors.Join(ferr, fmt.Errorf("netns: leave %s: %w", h.Namespace, err))
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

// DialContext dials from inside the host (a net.Dialer's DialContext; fits http.Transport and pgconn.Config).
// Give it an IP address: a name that resolves to both IPv4 and IPv6 can make the dialer race a second socket
// from another goroutine, outside the host.
func (h *Host) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := h.Do(func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// Listen listens inside the host, e.g. h.Listen("tcp", h.HostPort(0)).
func (h *Host) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := h.Do(func() (err error) {
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// LinkDown cuts the host's cable at the switch: its port on the bridge goes down, so the host's packets are
// dropped both ways while it keeps its address (its connections stall rather than fail).
func (h *Host) LinkDown() error {
	if err := h.net.sw.nl.LinkSetDown(h.port); err != nil {
		return fmt.Errorf("netns: port of %s down: %w", h.Name, err)
	}
	return nil
}

// LinkUp plugs the host's cable back in.
func (h *Host) LinkUp() error {
	if err := h.net.sw.nl.LinkSetUp(h.port); err != nil {
		return fmt.Errorf("netns: port of %s up: %w", h.Name, err)
	}
	return nil
}

// unreachableMAC is a locally administered address no interface of a segment has: frames sent to it are
// flooded by the bridge and dropped by every host.
var unreachableMAC = net.HardwareAddr{0x02, 0x00, 0x5e, 0xde, 0xad, 0x01}

// Partition cuts h off from other only (both ways), leaving both on speaking terms with every other host: each
// gets a permanent neighbour entry mapping the other's IP to an address nobody has, so their packets to each
// other are silently dropped and their connections stall, as with LinkDown. Heal undoes it.
func (h *Host) Partition(other *Host) error {
	return errors.Join(h.pointAt(other, unreachableMAC), other.pointAt(h, unreachableMAC))
}

// Heal undoes Partition: the two hosts resolve each other by ARP again.
func (h *Host) Heal(other *Host) error {
	return errors.Join(h.pointAt(other, nil), other.pointAt(h, nil))
}

// pointAt pins the neighbour entry for other's IP to mac, or deletes it (mac nil).
func (h *Host) pointAt(other *Host, mac net.HardwareAddr) error {
	eth, err := h.ns.nl.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("netns: eth0 of %s: %w", h.Name, err)
	}
	n := &netlink.Neigh{LinkIndex: eth.Attrs().Index, Family: netlink.FAMILY_V4, IP: other.IP.AsSlice()}
	if mac == nil {
		if err := h.ns.nl.NeighDel(n); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("netns: heal %s towards %s: %w", h.Name, other.Name, err)
		}
		return nil
	}
	n.State, n.HardwareAddr = netlink.NUD_PERMANENT, mac
	if err := h.ns.nl.NeighSet(n); err != nil {
		return fmt.Errorf("netns: cut %s off from %s: %w", h.Name, other.Name, err)
	}
	return nil
}

package fleet

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/skippr-dev/skippr/testkit/etcdtest"
	"github.com/skippr-dev/skippr/testkit/netns"
)

// clientIn is an etcd client whose connections are opened inside host h (its cable can be cut).
func clientIn(t *testing.T, h *netns.Host, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			_, hostPort, ok := strings.Cut(addr, "://")
			if !ok {
				hostPort = addr
			}
			return h.DialContext(ctx, "tcp", hostPort)
		})}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestLeaseLostStopsPipelinesAtExpiry cuts a worker's cable (testkit/netns) while it holds pipelines, and
// measures from where etcd expired its lease (an observer on another host sees its member key deleted) to
// where the worker had stopped every pipeline (its runs returned and Holds says no for each): at most a
// second, as docs/fleet.md promises. Before the worker kept its own lease clock it noticed the loss up to a
// second after the TTL, and then waited for etcd calls (holder record, resign, withdraw) that a cut cable
// stalls for 5 s each before it reported its pipelines stopped.
func TestLeaseLostStopsPipelinesAtExpiry(t *testing.T) {
	bin, err := etcdtest.Binary()
	if err != nil {
		t.Skip(err)
	}
	n := netns.New(t, "sklease")
	infra, cut, obs := n.Host(t, "infra"), n.Host(t, "w1"), n.Host(t, "obs")
	client, peer := "http://"+infra.HostPort(2379), "http://"+infra.HostPort(2380)
	infra.Start(t, nil, bin, "--name", "m0", "--data-dir", t.TempDir(),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "m0="+peer,
		"--heartbeat-interval", "100", "--election-timeout", "1500", "--logger", "zap", "--log-level", "warn")
	watcher := clientIn(t, obs, client)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const prefix = "/lease"
	var rev int64
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := watcher.Get(gctx, prefix+"/")
		gcancel()
		if err == nil {
			rev = resp.Header.Revision
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd in host infra not answering after a minute: %v", err)
		}
	}
	// The observer's view of the lease's end: etcd deletes the member key when it expires the lease.
	expired := make(chan time.Time, 1)
	go func() {
		for wr := range watcher.Watch(ctx, workersKey(prefix)+"a", clientv3.WithRev(rev+1)) {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					expired <- time.Now()
					return
				}
			}
		}
	}()

	var mu sync.Mutex
	running, lastStop := 0, time.Time{}
	run := RunFunc(func(ctx context.Context, p string, epoch uint64) error {
		mu.Lock()
		running++
		mu.Unlock()
		<-ctx.Done()
		mu.Lock()
		running--
		lastStop = time.Now()
		mu.Unlock()
		return ctx.Err()
	})
	ps := pipelines(4)
	w := &Worker{Client: clientIn(t, cut, client), Prefix: prefix, Name: "a", TTL: 3 * time.Second, Pipelines: ps, Runner: run,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})), RetryAfter: 200 * time.Millisecond}
	wctx, wcancel := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() { defer close(served); w.Serve(wctx) }()
	t.Cleanup(func() { cut.LinkUp(); wcancel(); <-served })
	holdsAny := func() bool {
		for _, p := range ps {
			if w.Holds(p.Name) {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		r := running
		mu.Unlock()
		held := 0
		for _, p := range ps {
			if w.Holds(p.Name) {
				held++
			}
		}
		if r == len(ps) && held == len(ps) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker a runs %d and holds %d of %d pipelines after a minute", r, held, len(ps))
		}
	}
	// Let a keep-alive or two pass, so the cut lands at a random point of the keep-alive cycle.
	time.Sleep(1500 * time.Millisecond)
	t0 := time.Now()
	if err := cut.LinkDown(); err != nil {
		t.Fatal(err)
	}
	var stopped time.Time
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		r := running
		mu.Unlock()
		if r == 0 && !holdsAny() {
			stopped = time.Now()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after its cable was cut, worker a still runs %d pipelines (holds any: %v)", r, holdsAny())
		}
	}
	var expiry time.Time
	select {
	case expiry = <-expired:
	case <-time.After(time.Minute):
		t.Fatal("etcd did not expire the cut-off worker's lease within a minute")
	}
	mu.Lock()
	runsEnded := lastStop
	mu.Unlock()
	t.Logf("cable cut at 0; etcd expired the lease at %s; the runs had returned at %s and Holds said no for all at %s (TTL %s)",
		expiry.Sub(t0).Round(time.Millisecond), runsEnded.Sub(t0).Round(time.Millisecond), stopped.Sub(t0).Round(time.Millisecond), w.TTL)
	// Within a second of the expiry, as promised; the clock aims for before it (lossMargin), which leaves this
	// assertion the margin's worth of slack for a loaded machine.
	if late := stopped.Sub(expiry); late > time.Second {
		t.Fatalf("worker a had stopped its pipelines %s after etcd expired its lease; want at most 1s", late.Round(time.Millisecond))
	}
	if early := expiry.Sub(stopped); early > w.TTL {
		t.Fatalf("worker a stopped its pipelines %s before etcd expired its lease: more than a TTL", early)
	}
}

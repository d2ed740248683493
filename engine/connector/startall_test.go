package connector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/pluginhost"
	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
)

// rendezvous is a real plugin host whose starts wait, up to a deadline, until every plugin of want has begun
// starting: a start that meets them all ran beside them; one that waits out the deadline ran alone. It also
// records how many starts of one plugin ran at once.
type rendezvous struct {
	host     *pluginhost.Host
	want     int
	deadline time.Duration

	mu       sync.Mutex
	seen     map[string]bool
	all      chan struct{} // closed once every plugin has begun
	inFlight map[string]int
	maxSame  int
	alone    []string // connections whose start met no other plugin's
}

func (r *rendezvous) Start(ctx context.Context, c pluginhost.Connection) (*client.Client, pluginhost.Binary, error) {
	r.mu.Lock()
	r.seen[c.Plugin] = true
	if len(r.seen) == r.want {
		select {
		case <-r.all:
		default:
			close(r.all)
		}
	}
	r.inFlight[c.Plugin]++
	r.maxSame = max(r.maxSame, r.inFlight[c.Plugin])
	r.mu.Unlock()
	select {
	case <-r.all:
	case <-time.After(r.deadline):
		r.mu.Lock()
		r.alone = append(r.alone, c.Name)
		r.mu.Unlock()
	}
	defer func() {
		r.mu.Lock()
		r.inFlight[c.Plugin]--
		r.mu.Unlock()
	}()
	return r.host.Start(ctx, c)
}

// TestStartAllInParallel starts a pipeline's plugins the way `skippr sync` does (real binaries): datagen and
// testdest start at once, so a pipeline waits for its slowest plugin, not for the sum; two connections of one
// plugin start one after the other (a first start may install it). Started one by one, the first start would
// wait out the rendezvous alone.
func TestStartAllInParallel(t *testing.T) {
	gen, dest := testplugins.Build(t, "datagen"), testplugins.Build(t, "testdest")
	dir := t.TempDir()
	cfg, err := config.Parse(filepath.Join(dir, "skippr.yml"), []byte(fmt.Sprintf(`connections:
  gen: { plugin: datagen, path: %[1]s }
  gen2: { plugin: datagen, path: %[1]s }
  out: { plugin: testdest, path: %[2]s, settings: { dir: %[3]s } }
`, gen, dest, dir)), os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		conns []string
	}{
		{"source and destination", []string{"gen", "out"}},
		{"two of one plugin and another", []string{"gen", "gen2", "out"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &rendezvous{host: &pluginhost.Host{}, want: 2, deadline: 10 * time.Second,
				seen: map[string]bool{}, all: make(chan struct{}), inFlight: map[string]int{}}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var conns []*config.Connection
			for _, n := range tc.conns {
				cn, _ := cfg.Connection(n)
				conns = append(conns, cn)
			}
			ps, err := StartAll(ctx, r, conns)
			if err != nil {
				t.Fatal(err)
			}
			defer KillAll(ps)
			if len(r.alone) > 0 {
				t.Errorf("starts of %v met no other plugin's start within %v: the plugins started one after the other", r.alone, r.deadline)
			}
			if r.maxSame != 1 {
				t.Errorf("%d starts of one plugin ran at once, want 1", r.maxSame)
			}
			for i, p := range ps {
				if p == nil || p.Conn != conns[i] || p.Took.Exec <= 0 {
					t.Errorf("plugin %d: %+v, want connection %s started and its exec timed", i, p, tc.conns[i])
				}
			}
		})
	}
}

// stopMidStart is a real plugin host for a hard stop in the middle of StartAll: the plugin of connection "gen"
// starts and then stops answering (SIGSTOP, as a plugin busy or stuck would), and the hard stop (ctx's cancel)
// comes as the next connection's start begins.
type stopMidStart struct {
	host   *pluginhost.Host
	cancel context.CancelFunc
	// early freezes gen as soon as its process is up, while StartAll still asks for its spec; otherwise gen is
	// frozen once its whole start is done.
	early   bool
	pid     int           // gen's process
	up      chan struct{} // closed once gen's process is up (pid set)
	stopped time.Time
}

func (s *stopMidStart) Start(ctx context.Context, c pluginhost.Connection) (*client.Client, pluginhost.Binary, error) {
	if c.Name == "gen" {
		cl, b, err := s.host.Start(ctx, c)
		if err == nil {
			if s.pid = cl.Pid(); s.early {
				syscall.Kill(s.pid, syscall.SIGSTOP)
			}
			close(s.up)
		}
		return cl, b, err
	}
	<-s.up
	if !s.early {
		syscall.Kill(s.pid, syscall.SIGSTOP)
	}
	s.stopped = time.Now()
	s.cancel()
	return s.host.Start(ctx, c)
}

// A hard stop while a pipeline's plugins start ends the ones already up at once (KillNow), as a hard stop of a
// running pipeline does: a graceful exit waits up to 2 s for each plugin, and forever for one that no longer
// answers (go-plugin's shutdown call to it has no deadline).
func TestStartAllHardStop(t *testing.T) {
	gen, dest := testplugins.Build(t, "datagen"), testplugins.Build(t, "testdest")
	dir := t.TempDir()
	cfg, err := config.Parse(filepath.Join(dir, "skippr.yml"), []byte(fmt.Sprintf(`connections:
  gen: { plugin: datagen, path: %[1]s }
  gen2: { plugin: datagen, path: %[1]s }
  out: { plugin: testdest, path: %[2]s, settings: { dir: %[3]s } }
`, gen, dest, dir)), os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		conns []string
		early bool
	}{
		// gen and out start side by side; the stop comes while StartAll asks gen for its spec.
		{"stop during a plugin's spec call", []string{"gen", "out"}, true},
		// Connections of one plugin start one after the other: gen is wholly started when gen2's start begins.
		{"stop after a plugin started", []string{"gen", "gen2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conns []*config.Connection
			for _, n := range tc.conns {
				cn, _ := cfg.Connection(n)
				conns = append(conns, cn)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := &stopMidStart{host: &pluginhost.Host{}, cancel: cancel, early: tc.early, up: make(chan struct{})}
			done := make(chan error, 1)
			go func() {
				ps, err := StartAll(ctx, s, conns)
				if err == nil {
					KillAll(ps)
				}
				done <- err
			}()
			select {
			case <-s.up:
			case err := <-done:
				t.Fatalf("StartAll returned before gen started: %v", err)
			case <-time.After(time.Minute):
				t.Fatal("gen did not start within a minute")
			}
			defer syscall.Kill(s.pid, syscall.SIGKILL) // unblocks StartAll should the test fail
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("StartAll did not return within a minute of the hard stop")
			}
			took := time.Since(s.stopped)
			t.Logf("StartAll returned %s after the hard stop: %v", took.Round(time.Millisecond), err)
			if err == nil {
				t.Fatal("StartAll succeeded after a hard stop")
			}
			// Milliseconds when it works; a graceful kill of the frozen plugin never returns. 10 s tells the two
			// apart on any machine, however loaded (the fleet's 1 s bound is engine/run's TestHardStop's).
			if took > 10*time.Second {
				t.Fatalf("StartAll returned %s after the hard stop: it waited for a graceful exit", took.Round(time.Millisecond))
			}
			if err := syscall.Kill(s.pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Fatalf("plugin %d still exists after StartAll returned (kill 0: %v)", s.pid, err)
			}
		})
	}
}

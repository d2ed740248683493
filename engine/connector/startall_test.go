package connector

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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

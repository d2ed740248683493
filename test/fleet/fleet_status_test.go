package fleet

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/etcdtest"
)

// TestFleetStatusWithoutQuorum: `skippr fleet status` with 2 of 3 etcd members killed answers at once with the
// last state it knows, marked stale (exit 1, a STALE line saying since when), where it used to print nothing
// and fail after 15 s. No worker runs here, so the surviving member has no record of the fleet and the state
// comes from this host's cache of the status read before the loss (engine/fleet tests the member's copy).
func TestFleetStatusWithoutQuorum(t *testing.T) {
	e := harness.NewEnvWith(t, "datagen", "testdest")
	c := etcdtest.New(t, 3)
	var hosts []string
	for _, ep := range c.Endpoints() {
		hosts = append(hosts, strings.TrimPrefix(ep, "http://"))
	}
	fleetURL := "etcd://" + strings.Join(hosts, ",") + "/quorum"
	e.WriteConfig(harness.PipelineConfig(`{ rows: 10 }`, filepath.Join(e.Dir, "out"), "", "file://"+filepath.Join(e.Dir, "wal"), "    fleet: { pin: solo }\n"))
	if r := e.Run("fleet", "status", "--fleet", fleetURL); r.Code != 1 || strings.Contains(r.Stdout, "STALE") {
		t.Fatalf("status with the quorum: exit %d (want 1: no holder), not stale:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	c.Kill(1)
	c.Kill(2)
	t0 := time.Now()
	r := e.Run("fleet", "status", "--fleet", fleetURL)
	took := time.Since(t0)
	t.Logf("status without the quorum: exit %d after %s\n%s%s", r.Code, took.Round(time.Millisecond), r.Stdout, r.Stderr)
	// 2 s is the budget of the reads; the rest is a process start on a loaded machine.
	if took > 5*time.Second {
		t.Fatalf("status without the quorum took %s", took)
	}
	if r.Code != 1 || !strings.HasPrefix(r.Stdout, "STALE: etcd unreachable since ") || !strings.Contains(r.Stderr, "stale: etcd unreachable since") ||
		!strings.Contains(r.Stdout, "orders") {
		t.Fatalf("status without the quorum: exit %d, want 1 with the STALE line and the pipeline:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}

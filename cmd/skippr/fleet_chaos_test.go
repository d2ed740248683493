package main_test

import (
	"bufio"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFleetChaos SIGKILLs random workers (with their plugins) of a 3-worker fleet running 12 pipelines, starts
// each again, and measures every takeover; then compares every destination, an Iceberg table whose warehouse
// is on the same S3 server as the WALs, with the source row by row.
// SKIPPR_FLEET_CHAOS_FAULTS sets the number of kills (default 4; `make chaos` runs 24). Before the faults it
// measures the etcd requests of the fleet at steady state.
func TestFleetChaos(t *testing.T) {
	faults := 4
	if v := os.Getenv("SKIPPR_FLEET_CHAOS_FAULTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("SKIPPR_FLEET_CHAOS_FAULTS=%q: %v", v, err)
		}
		faults = n
	}
	// A paced source that is still streaming when the last fault lands (≈ 15 s per fault).
	rows := 150 * (60 + 15*faults)
	gen := `{ seed: 33, rows: ` + strconv.Itoa(rows) + `, rows_per_second: 150, batch_size: 50, update_ratio: 0.2, delete_ratio: 0.05 }`
	f := newLakeFleetEnv(t, gen)
	workers := []string{"w1", "w2", "w3"}
	for _, w := range workers {
		f.start(w)
	}
	f.waitHeld("12 pipelines over 3 workers", 3*time.Minute, workers...)

	// Steady state: etcd messages received by all members over a window, per pipeline per second.
	before := f.etcdMessages()
	const window = 20 * time.Second
	time.Sleep(window)
	per := float64(f.etcdMessages()-before) / float64(fleetPipelines) / window.Seconds()
	t.Logf("steady state: %.2f etcd requests per pipeline per second (%d pipelines, 3 workers, lease TTL %s)", per, fleetPipelines, f.ttl)

	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 19))
	t.Logf("fleet chaos seed %d", seed)
	var takeovers []time.Duration
	for i := range faults {
		victim := workers[rng.IntN(len(workers))]
		time.Sleep(time.Duration(500+rng.IntN(3000)) * time.Millisecond)
		f.signal(victim, syscall.SIGKILL)
		var rest []string
		for _, w := range workers {
			if w != victim {
				rest = append(rest, w)
			}
		}
		_, took := f.waitHeld("after killing "+victim, 2*time.Minute, rest...)
		takeovers = append(takeovers, took)
		t.Logf("fault %d: SIGKILL %s, its pipelines held again after %s", i+1, victim, took)
		f.start(victim)
		f.waitHeld(victim+" back", 2*time.Minute, workers...)
	}
	slices.Sort(takeovers)
	pct := func(p float64) time.Duration { return takeovers[min(len(takeovers)-1, int(p*float64(len(takeovers))))] }
	t.Logf("takeover after SIGKILL over %d faults (lease TTL %s): p50 %s, p99 %s, max %s",
		len(takeovers), f.ttl, pct(0.50).Round(10*time.Millisecond), pct(0.99).Round(10*time.Millisecond), takeovers[len(takeovers)-1].Round(10*time.Millisecond))
	f.waitConverged(want(t, unpaced(gen)), 10*time.Minute)
}

// etcdMessages sums the gRPC messages every etcd member has received (unary requests and stream messages:
// lease keep-alives, watch requests).
func (f *fleetEnv) etcdMessages() int64 {
	f.t.Helper()
	var sum int64
	for _, ep := range f.etcd.Endpoints() {
		resp, err := http.Get(ep + "/metrics")
		if err != nil {
			f.t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "grpc_server_msg_received_total{") {
				continue
			}
			// The members' own traffic to each other is not gRPC, so this is the clients' alone.
			fields := strings.Fields(line)
			v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
			if err == nil {
				sum += int64(v)
			}
		}
		resp.Body.Close()
	}
	return sum
}

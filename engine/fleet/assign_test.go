package fleet

import (
	"fmt"
	"maps"
	"strings"
	"testing"
)

func pipelines(n int) []Pipeline {
	var ps []Pipeline
	for i := range n {
		ps = append(ps, Pipeline{Name: fmt.Sprintf("p%02d", i)})
	}
	return ps
}

func loads(a map[string]string) map[string]int {
	l := map[string]int{}
	for _, w := range a {
		l[w]++
	}
	return l
}

func TestAssignBalances(t *testing.T) {
	for _, c := range []struct {
		pipes, workers, max int
	}{
		{12, 3, 4}, {12, 5, 3}, {1, 3, 1}, {7, 7, 1}, {3, 5, 1}, {100, 7, 15},
	} {
		t.Run(fmt.Sprintf("%d over %d", c.pipes, c.workers), func(t *testing.T) {
			var ws []string
			for i := range c.workers {
				ws = append(ws, fmt.Sprintf("w%d", i))
			}
			a := Assign(pipelines(c.pipes), ws)
			if len(a) != c.pipes {
				t.Fatalf("%d of %d pipelines assigned", len(a), c.pipes)
			}
			for w, n := range loads(a) {
				if n > c.max {
					t.Fatalf("worker %s has %d pipelines, more than ⌈P/N⌉ = %d: %v", w, n, c.max, a)
				}
			}
		})
	}
}

func TestAssignIsDeterministic(t *testing.T) {
	a := Assign(pipelines(12), []string{"w0", "w1", "w2"})
	ps := pipelines(12)
	for i, j := 0, len(ps)-1; i < j; i, j = i+1, j-1 {
		ps[i], ps[j] = ps[j], ps[i]
	}
	b := Assign(ps, []string{"w2", "w0", "w1", "w0"})
	if !maps.Equal(a, b) {
		t.Fatalf("the order of the inputs changed the assignment:\n%v\n%v", a, b)
	}
}

func TestAssignMovesLittle(t *testing.T) {
	before := Assign(pipelines(12), []string{"w0", "w1", "w2"})
	after := Assign(pipelines(12), []string{"w0", "w1", "w2", "w3"})
	moved := 0
	for p, w := range after {
		if before[p] != w {
			moved++
		}
	}
	if got := loads(after)["w3"]; got != 3 {
		t.Fatalf("the new worker took %d pipelines, want its share 3: %v", got, after)
	}
	// The new worker's share must move; a few more may shuffle between the others, never most of them.
	if moved > 6 {
		t.Fatalf("%d of 12 pipelines moved when one worker joined", moved)
	}
	gone := Assign(pipelines(12), []string{"w0", "w2"})
	stayed := 0
	for p, w := range before {
		if w != "w1" && gone[p] != w {
			stayed++
			t.Logf("pipeline %s moved from %s to %s when w1 left", p, w, gone[p])
		}
	}
	// w1's 4 pipelines must move; of the survivors' 8, a capacity-bound rendezvous may shuffle a pair.
	if stayed > 2 {
		t.Fatalf("%d of the survivors' 8 pipelines moved when w1 left", stayed)
	}
}

func TestAssignPins(t *testing.T) {
	ps := append(pipelines(4), Pipeline{Name: "local", Pin: "w1"}, Pipeline{Name: "elsewhere", Pin: "w9"})
	a := Assign(ps, []string{"w0", "w1"})
	if a["local"] != "w1" {
		t.Fatalf("pinned pipeline on %q, want w1", a["local"])
	}
	if w, ok := a["elsewhere"]; ok {
		t.Fatalf("pipeline pinned to a worker that is not alive runs on %s", w)
	}
	if len(a) != 5 {
		t.Fatalf("assigned %d, want 5: %v", len(a), a)
	}
	if got := Assign(ps, nil); len(got) != 0 {
		t.Fatalf("no workers, yet assigned %v", got)
	}
}

func TestCheckPlacement(t *testing.T) {
	if err := CheckPlacement("orders", "s3://b/orders", ""); err != nil {
		t.Fatal(err)
	}
	if err := CheckPlacement("orders", "file:///var/wal/orders", "w1"); err != nil {
		t.Fatalf("a pinned local WAL: %v", err)
	}
	err := CheckPlacement("orders", "file:///var/wal/orders", "")
	if err == nil || !strings.Contains(err.Error(), "could not read") || !strings.Contains(err.Error(), "fleet: {pin: WORKER}") {
		t.Fatalf("local WAL: %v", err)
	}
}

package fleet

import (
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
)

// Pipeline is what the assignment knows of a pipeline.
type Pipeline struct {
	Name string
	// Pin is the only worker that may run it; "" lets any worker run it.
	Pin string
}

// Assign maps each pipeline to a worker, or leaves it out when no worker may run it (none alive, or its pinned
// worker is not). Every worker computes it from the same inputs, so all agree without talking: the result
// depends only on the sets given, not their order. Unpinned pipelines go to at most ⌈P/N⌉ per worker (P counts
// every pipeline, N the workers); each takes, among the workers with room, the one ranked highest by a hash of
// (pipeline, worker) — rendezvous hashing — so a worker joining or leaving moves few pipelines besides its own
// share.
func Assign(pipelines []Pipeline, workers []string) map[string]string {
	out := make(map[string]string, len(pipelines))
	if len(workers) == 0 {
		return out
	}
	ws := slices.Clone(workers)
	sort.Strings(ws)
	ws = slices.Compact(ws)
	ps := slices.Clone(pipelines)
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	limit := (len(ps) + len(ws) - 1) / len(ws)
	load := make(map[string]int, len(ws))
	for _, p := range ps {
		if p.Pin != "" {
			if slices.Contains(ws, p.Pin) {
				out[p.Name] = p.Pin
				load[p.Pin]++
			}
		}
	}
	// Greedy over every (pipeline, worker) pair, best score first: a pipeline keeps its best-ranked worker
	// unless that worker filled up with pipelines that rank it higher still. Removing a worker removes only
	// its own pairs, so the others keep nearly all of theirs.
	type pair struct {
		p, w string
		s    uint64
	}
	var pairs []pair
	for _, p := range ps {
		if p.Pin != "" {
			continue
		}
		for _, w := range ws {
			pairs = append(pairs, pair{p.Name, w, score(p.Name, w)})
		}
	}
	sort.Slice(pairs, func(i, j int) bool {
		a, b := pairs[i], pairs[j]
		if a.s != b.s {
			return a.s > b.s
		}
		if a.p != b.p {
			return a.p < b.p
		}
		return a.w < b.w
	})
	for _, pr := range pairs {
		if _, done := out[pr.p]; done || load[pr.w] >= limit {
			continue
		}
		out[pr.p] = pr.w
		load[pr.w]++
	}
	// Pins can fill workers past the limit and leave pipelines over: those go to the least loaded worker.
	for _, p := range ps {
		if _, done := out[p.Name]; done || p.Pin != "" {
			continue
		}
		best := ws[0]
		for _, w := range ws {
			if load[w] < load[best] {
				best = w
			}
		}
		out[p.Name] = best
		load[best]++
	}
	return out
}

func score(pipeline, worker string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(pipeline))
	h.Write([]byte{0})
	h.Write([]byte(worker))
	return h.Sum64()
}

// CheckPlacement refuses a pipeline that fleet mode cannot move: one whose WAL is on local disk, unless it is
// pinned to one worker.
func CheckPlacement(pipeline, walURL, pin string) error {
	if pin != "" || !strings.HasPrefix(walURL, "file:") {
		return nil
	}
	return fmt.Errorf("pipeline %s: its WAL is on local disk (%s), which the next worker to hold the pipeline could not read; "+
		"put the WAL on S3 (wal: {url: s3://bucket/prefix}) or pin the pipeline to one worker (fleet: {pin: WORKER})", pipeline, walURL)
}

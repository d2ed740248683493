package dest

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// The runs find the same replaced and surviving rows as the in-memory index's take/put, chunk by chunk: a key
// touched by a later chunk loses the row an earlier chunk wrote, whatever the number of runs (limits that make a
// run per record, and more runs than maxRuns, so they are compacted on the way) and with entries of an index
// that went to disk part-way (chunk 0).
func TestKeyRunsMatchInMemoryIndex(t *testing.T) {
	cases := []struct {
		name   string
		limit  int64
		chunks int
		keys   int
		before int // keys in the in-memory index when it went to disk
	}{
		{name: "one run", limit: 1 << 30, chunks: 20, keys: 200},
		{name: "a run per record, compacted", limit: 1, chunks: 30, keys: 50},
		{name: "a few runs per chunk", limit: 2000, chunks: 40, keys: 3000},
		{name: "index in memory first", limit: 1500, chunks: 100, keys: 1000, before: 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.keys)))
			model := map[string]uint64{} // the in-memory index
			var wantDead []uint64
			var gotDead []uint64
			kr := newKeyRuns(t.TempDir(), tc.limit, testLogger(t), func(loc uint64) { gotDead = append(gotDead, loc) })
			next := uint64(0)
			loc := func() uint64 { next++; return next<<posBits | next%7 }
			key := func(i int) []byte {
				if i%2 == 0 {
					return appendIntKey(nil, int64(i)-int64(tc.keys/2))
				}
				return []byte(fmt.Sprintf("k%d", i))
			}
			for i := range tc.before {
				k, l := key(rng.IntN(tc.keys)), loc()
				if old, ok := model[string(k)]; ok {
					wantDead = append(wantDead, old)
				}
				model[string(k)] = l
				_ = i
			}
			if tc.before > 0 {
				// What the index had handed over so far is not the runs' to find.
				gotDead = append(gotDead, wantDead...)
				for k, l := range model {
					if err := kr.add([]byte(k), 0, l); err != nil {
						t.Fatal(err)
					}
				}
			}
			for range tc.chunks {
				touched := map[string]bool{}
				for range 1 + rng.IntN(tc.keys/5+1) {
					touched[string(key(rng.IntN(tc.keys)))] = rng.IntN(3) > 0 // true: the chunk writes a row for it
				}
				for _, k := range slices.Sorted(maps.Keys(touched)) {
					if old, ok := model[k]; ok {
						wantDead = append(wantDead, old)
						delete(model, k)
					}
					if err := kr.add([]byte(k), kr.chunk, noLoc); err != nil {
						t.Fatal(err)
					}
				}
				for _, k := range slices.Sorted(maps.Keys(touched)) {
					if !touched[k] {
						continue
					}
					l := loc()
					model[k] = l
					if err := kr.add([]byte(k), kr.chunk, l); err != nil {
						t.Fatal(err)
					}
				}
				kr.chunk++
			}
			if tc.limit == 1 && kr.seq <= maxRuns {
				t.Fatalf("only %d runs were written: the case does not reach compaction", kr.seq)
			}
			dir := kr.dir
			live := map[string]uint64{}
			if err := kr.resolve(func(k []byte, l uint64) error {
				if _, dup := live[string(k)]; dup {
					return fmt.Errorf("key %x survives twice", k)
				}
				live[string(k)] = l
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			slices.Sort(wantDead)
			slices.Sort(gotDead)
			if !slices.Equal(wantDead, gotDead) {
				t.Fatalf("dead rows: %d found, want %d", len(gotDead), len(wantDead))
			}
			if !maps.Equal(model, live) {
				t.Fatalf("surviving rows: %d found, want %d", len(live), len(model))
			}
			if dir != "" {
				if _, err := os.Stat(dir); !os.IsNotExist(err) {
					t.Fatalf("spill directory %s is left after resolve: %v", dir, err)
				}
			}
		})
	}
}

func TestPosSet(t *testing.T) {
	p := newPosSet(130)
	for _, pos := range []int64{129, 0, 64, 63, 0, 129} {
		p.add(pos)
	}
	if got, want := p.positions(), []int64{0, 63, 64, 129}; !slices.Equal(got, want) || p.n != 4 {
		t.Fatalf("positions %v (n %d), want %v", got, p.n, want)
	}
}

// dirEntries names what dir holds.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// A key index directory left in spill_dir by a killed process (its pid is gone) is removed when the next index
// goes to disk; a live process's stays, and the index's own goes at its resolve.
func TestKeyRunsSweepDeadProcesses(t *testing.T) {
	spill := t.TempDir()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(spill, indexSpillPrefix+strconv.Itoa(cmd.Process.Pid)+"-1")
	live := filepath.Join(spill, indexSpillPrefix+"1-1") // pid 1 is always alive
	for _, d := range []string{dead, live} {
		if err := os.MkdirAll(filepath.Join(d, "run-1"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	kr := newKeyRuns(spill, 1, testLogger(t), func(uint64) {})
	if err := kr.add(appendIntKey(nil, 7), 1, 3); err != nil {
		t.Fatal(err)
	}
	if err := kr.flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("the dead process's directory is still there: %v", err)
	}
	if err := kr.resolve(nil); err != nil {
		t.Fatal(err)
	}
	if left := dirEntries(t, spill); !slices.Equal(left, []string{filepath.Base(live)}) {
		t.Fatalf("spill_dir holds %q, want only the live process's directory", left)
	}
}

// A spill_dir the index cannot write to fails the apply as a config fault whose fix names the setting.
func TestKeyRunsSpillDirUnusable(t *testing.T) {
	kr := newKeyRuns(filepath.Join(t.TempDir(), "missing"), 1, testLogger(t), func(uint64) {})
	if err := kr.add(appendIntKey(nil, 7), 1, 3); err != nil {
		t.Fatal(err)
	}
	err := kr.flush()
	if !errors.Is(err, fault.ErrConfig) || !strings.Contains(fault.FixOf(err), "spill_dir") {
		t.Fatalf("flush into a missing spill_dir: %v (fix %q)", err, fault.FixOf(err))
	}
}

// The key indexes of all the tables an apply spills share one half of the budget: two tables whose indexes each
// fit their own half but not together send one to disk, and both tables hold exactly the folded changes.
func TestSpilledTablesShareIndexBudget(t *testing.T) {
	e := newEnv(t, nil)
	e.d.hooks.bufferBudget = 1      // every batch is a chunk of its own
	e.d.hooks.indexLimit = 40 << 10 // half: 20 KiB, above one table's 300 keys (≈ 13 KiB), below two
	e.d.hooks.spillDir = t.TempDir()
	os := ordersSchema()
	orders := func(stream string, op change.Op, from, to int) serve.Item {
		var rs []row
		for i := from; i < to; i++ {
			if op == opD {
				rs = append(rs, r(op, fmt.Sprintf("%s-%d", stream, i), nil))
				continue
			}
			rs = append(rs, r(op, fmt.Sprintf("%s-%d", stream, i), i*(int(op)+1)))
		}
		return serve.Item{Stream: stream, Record: batch(t, os, rs...)}
	}
	e.apply(1, schemaItem("a", os), schemaItem("b", os),
		orders("a", opI, 0, 300), orders("b", opI, 0, 300),
		orders("a", opU, 50, 150), orders("b", opU, 100, 200),
		orders("a", opD, 140, 160), orders("b", opI, 300, 320), orders("b", opU, 0, 10))
	if n := e.d.indexSpills.Load(); n == 0 {
		t.Fatal("no key index went to disk: the tables' indexes together passed their share")
	}
	e.check("a", "a", "order_id")
	e.check("b", "b", "order_id")
	if left := dirEntries(t, e.d.hooks.spillDir); len(left) > 0 {
		t.Fatalf("spill_dir holds %q after the apply, want nothing", left)
	}
}

package dest

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// parquetFiles lists the Parquet files under a table's location on the local disk.
func parquetFiles(t *testing.T, location string) []string {
	return filesBySuffix(t, location, ".parquet")
}

func filesBySuffix(t *testing.T, location, suffix string) []string {
	t.Helper()
	var out []string
	root := strings.TrimPrefix(location, "file://")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, suffix) {
			out = append(out, "file://"+p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// Two writers (two destinations, as two processes would be, on one SQLite catalog) commit to one table at the
// same moment: the loser rebuilds its commit on the winner's and both land; the loser's first files are gone.
func TestConcurrentWritersOnOneTable(t *testing.T) {
	dir := t.TempDir()
	twoWritersOnOneTable(t, newEnvAt(t, dir, nil), newEnvAt(t, dir, nil), filesBySuffix)
}

// twoWritersOnOneTable has a and b, two destinations on one catalog, commit to one table at the same moment:
// A writes its files and waits at its commit until B has committed. A's commit must then be rebuilt on B's
// exactly once, both must land with their fences, and stored (the files under a location with a suffix)
// must hold exactly the live data and delete files and the referenced manifests: the lost attempt's are gone.
func twoWritersOnOneTable(t *testing.T, a, b *env, stored func(t *testing.T, location, suffix string) []string) {
	t.Helper()
	a.pipeline, b.pipeline = "w1", "w2"
	sc := eventsSchema()
	var first []row
	for id := 1; id <= 6; id++ {
		first = append(first, r(opI, id, nil, "eu", id))
	}
	a.apply(1, append([]serve.Item{schemaItem("events", sc)}, items("events", batch(t, sc, first...))...)...)

	aWaiting, releaseA := holdFirstCommit(a)
	aItems := items("events", batch(t, sc, r(opU, 1, nil, "us", 10), r(opD, 2, nil, nil, nil), r(opI, 7, nil, "eu", 7)))
	var wg sync.WaitGroup
	wg.Add(1)
	var aRes serve.ApplyResult
	var aErr error
	go func() {
		defer wg.Done()
		aRes, aErr = a.d.Apply(ctxT(t), serve.ApplyRequest{Settings: a.raw, Pipeline: a.pipeline, Sequence: 2, Items: aItems})
	}()
	select {
	case <-aWaiting:
	case <-time.After(60 * time.Second):
		releaseA()
		wg.Wait()
		t.Fatalf("writer A never reached its commit: %v", aErr)
	}
	bItems := items("events", batch(t, sc, r(opU, 3, nil, "us", 30), r(opI, 8, nil, "us", 8)))
	res, err := b.d.Apply(ctxT(t), serve.ApplyRequest{Settings: b.raw, Pipeline: b.pipeline, Sequence: 1, Items: bItems})
	releaseA()
	wg.Wait()
	if err != nil || res.Skipped {
		t.Fatalf("writer B: %+v %v", res, err)
	}
	if aErr != nil || aRes.Skipped {
		t.Fatalf("writer A: %+v %v", aRes, aErr)
	}
	if got := a.d.retries.Load(); got != 1 {
		t.Fatalf("writer A rebuilt its commit %d times, want 1", got)
	}
	// B committed first, then A; the keys do not overlap.
	a.fold(bItems...)
	a.fold(aItems...)
	a.check("events", "events", "id")

	tbl := a.table("events")
	props := tbl.Properties()
	if props[seqKey("w1")] != "2" || props[seqKey("w2")] != "1" {
		t.Fatalf("fences w1=%q w2=%q, want 2 and 1", props[seqKey("w1")], props[seqKey("w2")])
	}
	data, deletes := tableFiles(t, tbl)
	live := slices.Compact(slices.Sorted(slices.Values(append(data, deletes...))))
	if got := stored(t, tbl.Location(), ".parquet"); !slices.Equal(got, live) {
		t.Fatalf("Parquet files stored are not exactly the live files (the lost attempt's files must be removed):\nstored %q\nlive   %q", got, live)
	}
	avro := referencedManifests(t, tbl)
	if got := stored(t, tbl.Location(), ".avro"); !slices.Equal(got, avro) {
		t.Fatalf("manifests stored are not exactly the referenced ones:\nstored     %q\nreferenced %q", got, avro)
	}
}

// Writers racing freely: every commit lands, none is lost.
func TestConcurrentWritersRace(t *testing.T) {
	dir := t.TempDir()
	raceWriters(t, []*env{newEnvAt(t, dir, nil), newEnvAt(t, dir, nil), newEnvAt(t, dir, nil)}, 4)
}

// holdFirstCommit makes e's next apply stop at its first commit attempt, after writing its files, until
// release is called; at is closed when it gets there. Tests use it to let another writer commit first.
func holdFirstCommit(e *env) (at <-chan struct{}, release func()) {
	arrived, done := make(chan struct{}), make(chan struct{})
	e.d.hooks.beforeCommit = func(_ string, attempt int) error {
		if attempt == 1 {
			close(arrived)
			<-done
		}
		return nil
	}
	return arrived, sync.OnceFunc(func() { close(done) })
}

// raceWriters has each env, a pipeline of its own on one table, apply sequences 1..applies at the same time
// as the others, then checks that every row landed in its last version and each pipeline's fence is at its
// last sequence.
func raceWriters(t *testing.T, envs []*env, applies int) {
	t.Helper()
	sc := eventsSchema()
	envs[0].apply(1, schemaItem("events", sc))
	var wg sync.WaitGroup
	for w, e := range envs {
		e.pipeline = fmt.Sprintf("r%d", w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= applies; i++ {
				id := 1000*(w+1) + i
				_, err := e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: uint64(i),
					Items: items("events", batch(t, sc, r(opI, id, nil, "eu", id), r(opU, id, nil, "us", -id)))})
				if err != nil {
					t.Errorf("writer %d apply %d: %v", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	got := envs[0].rows("events", "id")
	if len(got) != len(envs)*applies {
		t.Fatalf("table holds %d rows, want %d", len(got), len(envs)*applies)
	}
	for _, v := range got {
		if v["region"] != "us" {
			t.Fatalf("row %v kept its first version", v)
		}
	}
	var retries int64
	for _, e := range envs {
		retries += e.d.retries.Load()
		if a := e.lastApplied(); a.Sequence != uint64(applies) {
			t.Fatalf("pipeline %s last applied %d, want %d", e.pipeline, a.Sequence, applies)
		}
	}
	t.Logf("%d commits rebuilt after losing a race", retries)
}

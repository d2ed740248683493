package dest

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// spillBatch is one batch of a spill test apply: its schema (nil: the case's) and rows.
type spillBatch struct {
	schema   *arrow.Schema
	rows     []row
	truncate bool // a truncate of the stream instead of a batch
}

func rows(rs ...row) spillBatch { return spillBatch{rows: rs} }

// deleteFileKinds counts a table's live delete files by content.
func deleteFileKinds(t *testing.T, e *env, name string) (pos, eq int) {
	t.Helper()
	tasks, err := e.table(name).Scan().PlanFiles(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, task := range tasks {
		for _, df := range slices.Concat(task.DeleteFiles, task.DeletionVectorFiles, task.EqualityDeleteFiles) {
			if seen[df.FilePath()] {
				continue
			}
			seen[df.FilePath()] = true
			if df.ContentType() == iceberg.EntryContentPosDeletes {
				pos++
			} else {
				eq++
			}
		}
	}
	return pos, eq
}

// An apply larger than the buffer is written out in chunks, each before the next arrives (here: every batch
// is a chunk). The table must hold exactly what the same applies hold without spilling: a later chunk's
// change to a key an earlier chunk wrote becomes a position delete of that row; keys of earlier snapshots get
// equality deletes as always.
func TestSpillMatchesWholeApply(t *testing.T) {
	us, os, ev := usersSchema(), ordersSchema(), eventsSchema()
	usersV2 := change.Schema(append(change.DataFields(us), arrow.Field{Name: "email", Type: arrow.BinaryTypes.String, Nullable: true}), []string{"id"})
	u2 := func(op change.Op, id int, name, email string) row {
		w := user(op, id, name)
		if op == opD {
			return r(op, append(w.vals, nil)...)
		}
		return r(op, append(w.vals, email)...)
	}
	cases := []struct {
		name     string
		stream   string
		schema   *arrow.Schema
		key      string
		settings map[string]any
		applies  [][]spillBatch
		// wantPos: the spilled table holds position deletes (a later chunk replaced a spilled row).
		wantPos bool
		// wantDataFiles, if set, is how many data files the spilled table holds.
		wantDataFiles int
		// truncates: older snapshots keep the files a truncate dropped, so the disk holds more than the live files.
		truncates bool
	}{
		{name: "updates and deletes of spilled keys", stream: "users", schema: us, key: "id", wantPos: true, applies: [][]spillBatch{{
			rows(user(opI, 1, "a"), user(opI, 2, "b"), user(opI, 3, "c"), user(opI, 4, "d"), user(opI, 5, "e")),
			rows(user(opU, 1, "a2"), user(opD, 2, ""), user(opU, 3, "c2")),
			rows(user(opU, 3, "c3"), user(opI, 6, "f")),
			rows(user(opD, 6, ""), user(opU, 5, "e2"), user(opU, 5, "e3")),
		}}},
		{name: "keys of earlier snapshots and re-inserts after delete", stream: "users", schema: us, key: "id", wantPos: true, applies: [][]spillBatch{
			{rows(user(opR, 1, "a"), user(opR, 2, "b"), user(opR, 3, "c"), user(opR, 4, "d"))},
			{
				rows(user(opU, 1, "a2"), user(opD, 2, "")),
				rows(user(opU, 1, "a3"), user(opI, 2, "b-again"), user(opD, 3, "")),
				rows(user(opD, 1, ""), user(opI, 3, "c-again")),
				rows(user(opI, 1, "a-again"), user(opU, 4, "d2")),
			},
			{rows(user(opU, 2, "b3")), rows(user(opD, 1, ""))},
		}},
		// Every row of the first chunks is replaced: their files are dropped rather than deleted by position.
		{name: "re-insert after delete within the apply", stream: "users", schema: us, key: "id", wantDataFiles: 1, applies: [][]spillBatch{{
			rows(user(opI, 1, "a")), rows(user(opD, 1, "")), rows(user(opI, 1, "a2")), rows(user(opU, 1, "a3")),
		}}},
		{name: "string key", stream: "orders", schema: os, key: "order_id", wantPos: true, applies: [][]spillBatch{
			{rows(r(opI, "o1", 1), r(opI, "o2", 2)), rows(r(opU, "o1", 10)), rows(r(opD, "o2", nil), r(opI, "o3", 3)), rows(r(opU, "o3", 30))},
			{rows(r(opU, "o1", 100), r(opI, "o2", 2)), rows(r(opU, "o2", 20))},
		}},
		{name: "partitioned on a non-key column, rows moving between partitions", stream: "events", schema: ev, key: "id", wantPos: true,
			settings: map[string]any{"partitions": map[string]any{"events": []string{"region"}}}, applies: [][]spillBatch{
				{rows(r(opI, 1, nil, "eu", 1), r(opI, 2, nil, "us", 2), r(opI, 3, nil, "eu", 3), r(opI, 5, nil, "eu", 5), r(opI, 6, nil, "us", 6)), rows(r(opU, 1, nil, "us", 10), r(opU, 2, nil, "eu", 20)), rows(r(opD, 3, nil, nil, nil), r(opU, 1, nil, "ap", 100))},
				{rows(r(opU, 2, nil, "us", 200)), rows(r(opU, 2, nil, "ap", 2000), r(opI, 4, nil, "eu", 4))},
			}},
		{name: "format version 3 (deletion vectors)", stream: "users", schema: us, key: "id", wantPos: true,
			settings: map[string]any{"format_version": 3}, applies: [][]spillBatch{
				{rows(user(opI, 1, "a"), user(opI, 2, "b"), user(opI, 3, "c")), rows(user(opU, 1, "a2"), user(opD, 2, "")), rows(user(opU, 1, "a3"))},
			}},
		{name: "upsert inserts", stream: "users", schema: us, key: "id", wantPos: true,
			settings: map[string]any{"upsert_inserts": true}, applies: [][]spillBatch{
				{rows(user(opR, 1, "a"), user(opR, 2, "b"))},
				{rows(user(opR, 1, "a2"), user(opR, 3, "c"), user(opR, 4, "d")), rows(user(opR, 1, "a3"), user(opI, 2, "b2")), rows(user(opI, 3, "c2"))},
			}},
		{name: "schema change between chunks", stream: "users", schema: us, key: "id", wantPos: true, applies: [][]spillBatch{
			{rows(user(opI, 1, "a"), user(opI, 2, "b")),
				{schema: usersV2, rows: []row{u2(opU, 1, "a2", "a@x"), u2(opI, 3, "c", "c@x")}},
				{schema: usersV2, rows: []row{u2(opU, 3, "c2", "c2@x"), u2(opD, 2, "", "")}}},
		}},
		// The truncate comes after chunks were written out: their files are dropped, the rows after it stay.
		{name: "truncate after spilled chunks", stream: "users", schema: us, key: "id", truncates: true, applies: [][]spillBatch{
			{rows(user(opI, 1, "a"), user(opI, 2, "b"), user(opI, 3, "c"))},
			{rows(user(opU, 1, "a2"), user(opI, 4, "d")), rows(user(opD, 2, "")), {truncate: true},
				rows(user(opI, 1, "z"), user(opI, 5, "e")), rows(user(opU, 5, "e2"))},
			{rows(user(opU, 1, "z2")), {truncate: true}, rows(user(opI, 6, "f"))},
		}},
		{name: "no key: appends only", stream: "logs", key: "",
			schema:  change.Schema([]arrow.Field{{Name: "msg", Type: arrow.BinaryTypes.String, Nullable: true}}, nil),
			applies: [][]spillBatch{{rows(r(opI, "x")), rows(r(opI, "y")), rows(r(opI, "x"))}}},
	}
	for _, tc := range cases {
		// The key index in memory, and on disk from the first chunk on (keyruns.go): the same rows either way.
		for _, onDisk := range []bool{false, true} {
			name := tc.name + ", key index in memory"
			if onDisk {
				name = tc.name + ", key index on disk"
			}
			t.Run(name, func(t *testing.T) {
				whole := map[string]any{"memory_limit": "off"}
				for k, v := range tc.settings {
					whole[k] = v
				}
				spilled := newEnv(t, tc.settings)
				spilled.d.hooks.bufferBudget = 1 // every batch is a chunk of its own
				spilled.d.hooks.spillDir = t.TempDir()
				if !onDisk {
					spilled.d.hooks.indexLimit = -1
				}
				plain := newEnv(t, whole)
				for i, ap := range tc.applies {
					var its []serve.Item
					if i == 0 {
						its = append(its, schemaItem(tc.stream, tc.schema))
					}
					for _, b := range ap {
						if b.truncate {
							its = append(its, serve.Item{Stream: tc.stream, Truncate: true})
							continue
						}
						sc := tc.schema
						if b.schema != nil {
							sc = b.schema
							its = append(its, schemaItem(tc.stream, sc))
						}
						its = append(its, serve.Item{Stream: tc.stream, Record: batch(t, sc, b.rows...)})
					}
					for _, e := range []*env{spilled, plain} {
						if res := e.apply(uint64(i+1), its...); res.Skipped {
							t.Fatalf("apply %d skipped", i+1)
						}
					}
				}
				if n := spilled.d.spills.Load(); n == 0 {
					t.Fatal("nothing was spilled: the test does not test spilling")
				}
				if n := spilled.d.indexSpills.Load(); (n > 0) != (onDisk && tc.key != "") {
					t.Fatalf("the key index went to disk %d times, want some: %v", n, onDisk && tc.key != "")
				}
				if left := dirEntries(t, spilled.d.hooks.spillDir); len(left) > 0 {
					t.Fatalf("spill_dir holds %q after the applies, want nothing", left)
				}
				if n := plain.d.spills.Load(); n != 0 {
					t.Fatalf("memory_limit off spilled %d times", n)
				}
				var key []string
				if tc.key != "" {
					key = []string{tc.key}
					spilled.check(tc.stream, tc.stream, key...)
					plain.check(tc.stream, tc.stream, key...)
				} else {
					// Without a key rows are told apart by content; both tables must hold the same multiset.
					if a, b := scanStrings(t, spilled, tc.stream), scanStrings(t, plain, tc.stream); !reflect.DeepEqual(a, b) || len(a) != 3 {
						t.Fatalf("spilled %v, whole %v", a, b)
					}
				}
				if pos, _ := deleteFileKinds(t, spilled, tc.stream); (pos > 0) != tc.wantPos {
					t.Fatalf("%d position delete files, want some: %v", pos, tc.wantPos)
				}
				if data, _ := tableFiles(t, spilled.table(tc.stream)); tc.wantDataFiles > 0 && len(data) != tc.wantDataFiles {
					t.Fatalf("%d data files, want %d", len(data), tc.wantDataFiles)
				}
				if pos, _ := deleteFileKinds(t, plain, tc.stream); pos != 0 {
					t.Fatalf("the whole apply wrote %d position delete files", pos)
				}
				// One commit per apply, spilled or not.
				if a, b := len(spilled.table(tc.stream).Metadata().Snapshots()), len(plain.table(tc.stream).Metadata().Snapshots()); a != b {
					t.Fatalf("spilled table has %d snapshots, whole %d", a, b)
				}
				if a := spilled.lastApplied(); a.Sequence != uint64(len(tc.applies)) {
					t.Fatalf("last applied %d, want %d", a.Sequence, len(tc.applies))
				}
				live := liveFiles(t, spilled, tc.stream)
				if tc.truncates {
					return
				}
				if on := parquetFiles(t, spilled.table(tc.stream).Location()); !slices.Equal(on, filter(live, ".parquet")) {
					t.Fatalf("files on disk are not exactly the live files:\non disk %q\nlive    %q", on, live)
				}
			})
		}
	}
}

func filter(names []string, suffix string) []string {
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, suffix) {
			out = append(out, n)
		}
	}
	return out
}

// liveFiles lists every file the table's current snapshot references: data, delete and deletion-vector files
// (PlanFiles would leave out deletes that match no file, such as equality deletes written beside the rows they
// must not touch).
func liveFiles(t *testing.T, e *env, name string) []string {
	t.Helper()
	tbl := e.table(name)
	fsys, err := tbl.FS(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if snap := tbl.CurrentSnapshot(); snap != nil {
		ms, err := snap.Manifests(fsys)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			entries, err := m.FetchEntries(fsys, true)
			if err != nil {
				t.Fatal(err)
			}
			for _, en := range entries {
				out = append(out, en.DataFile().FilePath())
			}
		}
	}
	return slices.Compact(slices.Sorted(slices.Values(out)))
}

// scanStrings returns a one-column table's values, sorted (e.rows keys rows, which a keyless table lacks).
func scanStrings(t *testing.T, e *env, name string) []string {
	t.Helper()
	at, err := e.table(name).Scan().ToArrowTable(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	var out []string
	for _, c := range at.Column(0).Data().Chunks() {
		for i := range c.Len() {
			out = append(out, c.ValueStr(i))
		}
	}
	slices.Sort(out)
	return out
}

// A spilled apply that fails before its commit leaves none of its files behind, not even the ones written out
// long before, and the same sequence number applies exactly once afterwards.
func TestSpilledApplyFailingBeforeCommit(t *testing.T) {
	e := newEnv(t, nil)
	e.d.hooks.bufferBudget = 1
	us := usersSchema()
	e.apply(1, schemaItem("users", us), serve.Item{Stream: "users", Record: batch(t, us, user(opI, 1, "a"), user(opI, 2, "b"))})
	before := parquetFiles(t, e.table("users").Location())
	two := []serve.Item{
		{Stream: "users", Record: batch(t, us, user(opU, 1, "a2"), user(opI, 3, "c"))},
		{Stream: "users", Record: batch(t, us, user(opU, 3, "c2"), user(opD, 2, ""))},
		{Stream: "orders", Record: batch(t, ordersSchema(), r(opI, "o1", 1))},
		{Stream: "users", Record: batch(t, us, user(opU, 3, "c3"))},
	}
	spills := e.d.spills.Load()
	e.d.hooks.beforeCommit = func(tbl string, _ int) error {
		if tbl == "users" {
			return errCrash
		}
		return nil
	}
	_, err := e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: 2, Items: two})
	if !errors.Is(err, errCrash) {
		t.Fatalf("apply 2: %v, want the simulated crash", err)
	}
	if e.d.spills.Load()-spills < 3 {
		t.Fatalf("apply 2 spilled %d chunks; the test needs several", e.d.spills.Load()-spills)
	}
	if after := parquetFiles(t, e.table("users").Location()); !slices.Equal(after, before) {
		t.Fatalf("the failed apply left files behind:\nbefore %q\nafter  %q", before, after)
	}
	if a := e.lastApplied(); a.Sequence != 1 || a.Streams["users"] != 1 {
		t.Fatalf("after the failure last applied %+v, want 1", a)
	}
	e.d.hooks.beforeCommit = nil
	if res := e.apply(2, two...); res.Skipped {
		t.Fatal("replay of 2 skipped")
	}
	e.check("users", "users", "id")
	e.check("orders", "orders", "order_id")
	if res := e.apply(2, two...); !res.Skipped {
		t.Fatal("apply 2 again not skipped")
	}
	if on, live := parquetFiles(t, e.table("users").Location()), liveFiles(t, e, "users"); !slices.Equal(on, live) {
		t.Fatalf("files on disk %q, live %q", on, live)
	}
}

// A spilled apply that loses its commit race rebuilds the commit on the winner's table state with the files it
// already wrote: both land, and only the lost attempt's manifests are removed.
func TestSpilledApplyLosingCommitRace(t *testing.T) {
	dir := t.TempDir()
	a := newEnvAt(t, dir, nil)
	b := newEnvAt(t, dir, nil)
	a.pipeline, b.pipeline = "w1", "w2"
	a.d.hooks.bufferBudget = 1
	sc := eventsSchema()
	a.apply(1, schemaItem("events", sc), serve.Item{Stream: "events", Record: batch(t, sc, r(opI, 1, nil, "eu", 1), r(opI, 2, nil, "eu", 2))})

	aWaiting, releaseA := holdFirstCommit(a)
	aItems := items("events",
		batch(t, sc, r(opU, 1, nil, "us", 10), r(opI, 3, nil, "eu", 3)),
		batch(t, sc, r(opU, 3, nil, "us", 30), r(opD, 2, nil, nil, nil)),
		batch(t, sc, r(opU, 3, nil, "ap", 300)))
	var (
		wg   sync.WaitGroup
		aErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, aErr = a.d.Apply(ctxT(t), serve.ApplyRequest{Settings: a.raw, Pipeline: a.pipeline, Sequence: 2, Items: aItems})
	}()
	select {
	case <-aWaiting:
	case <-time.After(60 * time.Second):
		t.Fatal("writer A never reached its commit")
	}
	bItems := items("events", batch(t, sc, r(opI, 8, nil, "us", 8)))
	if _, err := b.d.Apply(ctxT(t), serve.ApplyRequest{Settings: b.raw, Pipeline: b.pipeline, Sequence: 1, Items: bItems}); err != nil {
		t.Fatalf("writer B: %v", err)
	}
	releaseA()
	wg.Wait()
	if aErr != nil {
		t.Fatalf("writer A: %v", aErr)
	}
	if got := a.d.retries.Load(); got != 1 {
		t.Fatalf("writer A rebuilt its commit %d times, want 1", got)
	}
	a.fold(bItems...)
	a.fold(aItems...)
	a.check("events", "events", "id")
	if pos, _ := deleteFileKinds(t, a, "events"); pos == 0 {
		t.Fatal("no position deletes: the test does not exercise replaced spilled rows")
	}
	tbl := a.table("events")
	if on, live := parquetFiles(t, tbl.Location()), liveFiles(t, a, "events"); !slices.Equal(on, live) {
		t.Fatalf("files on disk are not exactly the live files:\non disk %q\nlive    %q", on, live)
	}
	if on := len(filesBySuffix(t, tbl.Location(), ".avro")); on != countManifests(t, a, "events") {
		t.Fatalf("%d manifest files on disk, %d referenced: the lost attempt's manifests stayed", on, countManifests(t, a, "events"))
	}
}

func countManifests(t *testing.T, e *env, name string) int {
	return len(referencedManifests(t, e.table(name)))
}

// The tables of one apply commit in parallel, each in its own commit; the marker follows only when all did.
func TestParallelTables(t *testing.T) {
	const tables = 4
	sc := usersSchema()
	applyItems := func(seq int) []serve.Item {
		var its []serve.Item
		for i := range tables {
			stream := fmt.Sprintf("t%d", i)
			if seq == 1 {
				its = append(its, schemaItem(stream, sc))
			}
			its = append(its, serve.Item{Stream: stream, Record: batch(t, sc, user(opI, seq*10+i, "n"), user(opU, 1, fmt.Sprintf("s%d", seq)))})
		}
		return its
	}
	e := newEnv(t, nil)
	e.apply(1, applyItems(1)...)

	// Two tables must reach their commits at the same time: a barrier that only concurrent commits pass.
	if runtime.GOMAXPROCS(0) >= 2 {
		var (
			mu      sync.Mutex
			waiting int
			release = make(chan struct{})
		)
		e.d.hooks.beforeCommit = func(string, int) error {
			mu.Lock()
			waiting++
			if waiting == 2 {
				close(release)
			}
			mu.Unlock()
			select {
			case <-release:
				return nil
			case <-time.After(20 * time.Second):
				return errors.New("no other table reached its commit meanwhile: the tables are not committed in parallel")
			}
		}
	}
	e.apply(2, applyItems(2)...)
	for i := range tables {
		e.check(fmt.Sprintf("t%d", i), fmt.Sprintf("t%d", i), "id")
	}
	a := e.lastApplied()
	if a.Sequence != 2 || len(a.Streams) != tables {
		t.Fatalf("last applied %+v, want 2 for %d tables", a, tables)
	}
	for s, n := range a.Streams {
		if n != 2 {
			t.Fatalf("table %s fence %d, want 2", s, n)
		}
	}

	// One table failing: the others commit, the sequence number is not recorded, the replay finishes it.
	e.d.hooks.beforeCommit = func(tbl string, _ int) error {
		if tbl == "t2" {
			return errCrash
		}
		return nil
	}
	three := applyItems(3)
	if _, err := e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: 3, Items: three}); !errors.Is(err, errCrash) || !strings.Contains(err.Error(), "table t2") {
		t.Fatalf("apply 3: %v, want the failure of table t2", err)
	}
	a = e.lastApplied()
	if a.Sequence != 2 || a.Streams["t2"] != 2 || a.Streams["t0"] != 3 {
		t.Fatalf("after the failure last applied %+v, want sequence 2, t2 at 2, the others at 3", a)
	}
	e.d.hooks.beforeCommit = nil
	t0 := snapshotID(e, "t0")
	if res := e.apply(3, three...); res.Skipped {
		t.Fatal("replay of 3 skipped")
	}
	if snapshotID(e, "t0") != t0 {
		t.Fatal("t0 was committed twice")
	}
	for i := range tables {
		e.check(fmt.Sprintf("t%d", i), fmt.Sprintf("t%d", i), "id")
	}
	if a := e.lastApplied(); a.Sequence != 3 {
		t.Fatalf("last applied %d, want 3", a.Sequence)
	}
}

// A table that spills while others stay buffered: the spilled one and the buffered ones commit alike.
func TestSpillOfOneTableAmongOthers(t *testing.T) {
	e := newEnv(t, nil)
	us := usersSchema()
	big := make([]row, 0, 2000)
	for id := range 2000 {
		big = append(big, user(opI, id, strings.Repeat("n", 50)))
	}
	small := batch(t, ordersSchema(), r(opI, "o1", 1))
	bigRec := batch(t, us, big...)
	upd := batch(t, us, user(opU, 7, "seven"), user(opD, 8, ""))
	// The budget holds the small table's batch and not the big one's.
	e.d.hooks.bufferBudget = int64(bigRecSize(bigRec)) / 2
	e.apply(1, serve.Item{Stream: "orders", Record: small}, serve.Item{Stream: "users", Record: bigRec}, serve.Item{Stream: "users", Record: upd})
	if e.d.spills.Load() == 0 {
		t.Fatal("nothing spilled")
	}
	e.check("users", "users", "id")
	e.check("orders", "orders", "order_id")
	if pos, _ := deleteFileKinds(t, e, "orders"); pos != 0 {
		t.Fatalf("the small table got %d position delete files", pos)
	}
	if pos, _ := deleteFileKinds(t, e, "users"); pos == 0 {
		t.Fatal("the update of a spilled key wrote no position delete")
	}
}

func bigRecSize(rec arrow.RecordBatch) int {
	n := 0
	for _, c := range rec.Columns() {
		for _, b := range c.Data().Buffers() {
			if b != nil {
				n += b.Len()
			}
		}
	}
	return n
}

// The engine's stream breaking in the middle of an apply (after chunks were written out) fails the apply and
// removes what it wrote; nothing is committed.
func TestStreamBreakingAfterSpill(t *testing.T) {
	e := newEnv(t, nil)
	e.d.hooks.bufferBudget = 1
	us := usersSchema()
	e.apply(1, schemaItem("users", us), serve.Item{Stream: "users", Record: batch(t, us, user(opI, 1, "a"))})
	before := parquetFiles(t, e.table("users").Location())
	snap := snapshotID(e, "users")
	broken := errors.New("engine went away")
	its := func(yield func(serve.Item, error) bool) {
		for i := range 3 {
			if !yield(serve.Item{Stream: "users", Record: batch(t, us, user(opU, 1, fmt.Sprint("v", i)), user(opI, 10+i, "n"))}, nil) {
				return
			}
		}
		yield(serve.Item{}, broken)
	}
	spills := e.d.spills.Load()
	_, err := e.d.ApplyStream(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: 2}, its)
	if !errors.Is(err, broken) {
		t.Fatalf("apply 2: %v, want the stream's error", err)
	}
	if e.d.spills.Load()-spills < 2 {
		t.Fatal("nothing was spilled before the stream broke: the test does not test cleaning spilled files")
	}
	if after := parquetFiles(t, e.table("users").Location()); !slices.Equal(after, before) {
		t.Fatalf("the broken apply left files:\nbefore %q\nafter  %q", before, after)
	}
	if snapshotID(e, "users") != snap || e.lastApplied().Sequence != 1 {
		t.Fatal("the broken apply committed something")
	}
	e.check("users", "users", "id")
}

package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
)

func TestMain(m *testing.M) { testplugins.Main(m, versity.Stop) }

func start(t *testing.T, name string) *client.Client {
	t.Helper()
	bin := testplugins.Build(t, name)
	c, err := client.Start(context.Background(), client.Config{Path: bin, SHA256: testplugins.SHA256(t, bin)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Kill)
	return c
}

func openLog(t *testing.T, dir string) *wal.Log {
	t.Helper()
	l, err := wal.Open(context.Background(), "file://"+dir, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func expected(t *testing.T, src *client.Client, settings []byte) map[string]map[string]map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want, err := filedest.ReadSource(ctx, src, settings)
	if err != nil {
		t.Fatal(err)
	}
	return want
}

// plug is a started plugin with a connection's settings, as the runner takes it (the adapter engine/run uses).
func plug(c *client.Client, settings []byte) *connector.Plugin { return connector.Attach(c, settings) }

// config is a pipeline from the datagen source src (with srcSettings) to dst, a destination plug made.
func config(name string, src *client.Client, srcSettings []byte, dst pipeline.Destination, log pipeline.Log) pipeline.Config {
	return pipeline.Config{
		Name:         name,
		Source:       pipeline.Endpoint[pipeline.Source]{Name: "gen", Plugin: plug(src, srcSettings)},
		Destinations: []pipeline.Endpoint[pipeline.Destination]{{Name: "sink", Plugin: dst}},
		Log:          log,
		ExactlyOnce:  true,
		MaxDelay:     20 * time.Millisecond,
		Once:         true,
	}
}

func assertExactlyOnce(t *testing.T, outDir, pipelineName string, want map[string]map[string]map[string]any) {
	t.Helper()
	st, err := filedest.Load(outDir)
	if err != nil {
		t.Fatal(err)
	}
	seqs := st.Sequences[pipelineName]
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("applied sequence numbers not contiguous and unique: %v", seqs)
		}
	}
	if !reflect.DeepEqual(st.Tables, want) {
		for stream, rows := range want {
			got := st.Tables[stream]
			t.Errorf("stream %s: destination has %d rows, source produced %d", stream, len(got), len(rows))
			n := 0
			for k, v := range rows {
				if !reflect.DeepEqual(got[k], v) && n < 3 {
					t.Errorf("key %s: got %v, want %v", k, got[k], v)
					n++
				}
			}
		}
		t.FailNow()
	}
}

func TestDatagenToFileDestExactlyOnce(t *testing.T) {
	src, dst := start(t, "datagen"), start(t, "testdest")
	srcSettings := []byte(`{"seed": 11, "rows": 20000, "batch_size": 700, "nested": true, "update_ratio": 0.2, "delete_ratio": 0.05}`)
	out := t.TempDir()
	dstSettings := []byte(fmt.Sprintf(`{"dir": %q}`, out))
	log := openLog(t, t.TempDir())
	cfg := config("orders", src, srcSettings, plug(dst, dstSettings), log)
	cfg.MaxBatchBytes = 64 << 10 // many entries
	var last pipeline.Status
	cfg.OnStatus = func(s pipeline.Status) { last = s }
	if err := pipeline.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	want := expected(t, src, srcSettings)
	assertExactlyOnce(t, out, "orders", want)
	// Entries grow while a commit runs (group commit), so how many there are depends on the machine's speed:
	// 4 in a loaded CI run. More than one is what the contiguity and reclaim checks need.
	if last.WAL.LastCommitted < 2 || last.Destinations[0].LastApplied != last.WAL.LastCommitted {
		t.Fatalf("status: %+v", last)
	}
	if last.WAL.Entries != 0 || last.WAL.ReclaimedThrough != last.WAL.LastCommitted {
		t.Fatalf("applied entries not reclaimed: %+v", last.WAL)
	}
	// Rows by stream add up to the rows committed, one count for every stream the destination holds.
	var streamRows int64
	for s, n := range last.StreamRows {
		if _, ok := want[s]; !ok || n < int64(len(want[s])) {
			t.Errorf("status: stream %s: %d rows committed, the destination holds %d", s, n, len(want[s]))
		}
		streamRows += n
	}
	if len(last.StreamRows) != len(want) || streamRows != last.RowsCommitted || streamRows == 0 {
		t.Errorf("status: rows by stream %v (sum %d), rows committed %d, %d streams expected", last.StreamRows, streamRows, last.RowsCommitted, len(want))
	}
	head, err := log.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if string(head.LastCheckpoint) != "20000" {
		t.Fatalf("WAL head checkpoint %q, want 20000", head.LastCheckpoint)
	}
	// A second run finds nothing new and duplicates nothing.
	if err := pipeline.Run(context.Background(), config("orders", src, srcSettings, plug(dst, dstSettings), log)); err != nil {
		t.Fatal(err)
	}
	assertExactlyOnce(t, out, "orders", want)
}

func TestRefusesExactlyOnceWithoutCapability(t *testing.T) {
	src, dst := start(t, "datagen"), start(t, "testdest")
	dstSettings := []byte(fmt.Sprintf(`{"dir": %q, "at_least_once": true}`, t.TempDir()))
	cfg := config("p", src, []byte(`{"rows": 10}`), plug(dst, dstSettings), openLog(t, t.TempDir()))
	err := pipeline.Run(context.Background(), cfg)
	if !errors.Is(err, pipeline.ErrGuarantee) || !strings.Contains(err.Error(), "destination sink cannot honour it") {
		t.Fatalf("err = %v, want ErrGuarantee naming the destination", err)
	}
	cfg.ExactlyOnce = false
	if err := pipeline.Run(context.Background(), cfg); err != nil {
		t.Fatalf("at-least-once run: %v", err)
	}
}

func TestLostLogIsDetected(t *testing.T) {
	src, dst := start(t, "datagen"), start(t, "testdest")
	srcSettings := []byte(`{"rows": 1000, "batch_size": 100}`)
	dstSettings := []byte(fmt.Sprintf(`{"dir": %q}`, t.TempDir()))
	if err := pipeline.Run(context.Background(), config("p", src, srcSettings, plug(dst, dstSettings), openLog(t, t.TempDir()))); err != nil {
		t.Fatal(err)
	}
	// A fresh, empty log for a destination that already holds entries would restart at sequence 1 and have
	// every new entry skipped as already applied.
	err := pipeline.Run(context.Background(), config("p", src, srcSettings, plug(dst, dstSettings), openLog(t, t.TempDir())))
	if !errors.Is(err, pipeline.ErrLogBehind) {
		t.Fatalf("err = %v, want ErrLogBehind", err)
	}
}

// TestCorruptSegmentStopsApply: a corrupt segment stops apply with an error naming its entry, and nothing from
// it or after it reaches the destination. A coalesced range holding it is aborted whole: ending the range's
// items early would have committed the range without that entry.
func TestCorruptSegmentStopsApply(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings string
		corrupt  int      // index of the entry to corrupt
		want     []uint64 // applied before the stop
	}{
		{"one entry per apply", `"no_coalesce": true`, 1, []uint64{1}},
		{"inside a range", `"no_coalesce": false`, 2, nil},
		{"first of a range", `"no_coalesce": false`, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The directory before the plugins: cleanups run last-first, so the destination (which may still be
			// writing the aborted range) is killed before its directory is removed.
			out := t.TempDir()
			src, dst := start(t, "datagen"), start(t, "testdest")
			// Paced, so that batches arrive after the previous commit is done: unpaced, all but the first may
			// land in one entry while the first commits.
			srcSettings := []byte(`{"rows": 3000, "batch_size": 100, "rows_per_second": 6000}`)
			dstSettings := []byte(fmt.Sprintf(`{"dir": %q, %s}`, out, tc.settings))
			walDir := t.TempDir()
			log := openLog(t, walDir)
			cfg := config("p", src, srcSettings, plug(dst, dstSettings), log)
			cfg.ApplyPaused = true
			cfg.MaxBatchBytes = 1 // an entry at every checkpoint when no commit is running
			if err := pipeline.Run(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
			entries, err := log.Entries(context.Background(), 0)
			if err != nil || len(entries) < 4 {
				t.Fatalf("entries = %d, %v; want several", len(entries), err)
			}
			bad := entries[tc.corrupt]
			var seg string
			filepath.WalkDir(walDir, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() && strings.Contains(p, bad.Segment) {
					seg = p
				}
				return nil
			})
			if seg == "" {
				t.Fatalf("segment %s not found under %s", bad.Segment, walDir)
			}
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x55
			if err := os.WriteFile(seg, b, 0o644); err != nil {
				t.Fatal(err)
			}
			cfg.ApplyPaused = false
			err = pipeline.Run(context.Background(), cfg)
			var ee *pipeline.EntryError
			if !errors.Is(err, wal.ErrCorrupt) || !errors.As(err, &ee) || ee.Seq != bad.Seq || ee.Segment != bad.Segment || !strings.Contains(err.Error(), fmt.Sprint(bad.Seq)) {
				t.Fatalf("err = %v, want ErrCorrupt naming entry %d (segment %s)", err, bad.Seq, bad.Segment)
			}
			st, err := filedest.Load(out)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Sequences["p"]; !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("applied %v; want %v", got, tc.want)
			}
		})
	}
}

// slowDestination is the real testdest plugin with a pause before each apply: a destination that cannot keep up.
type slowDestination struct {
	pipeline.Destination
	delay time.Duration
}

func (s slowDestination) ApplyRange(ctx context.Context, p string, first, seq uint64, items iter.Seq[pipeline.ApplyItem]) (pipeline.ApplyResult, error) {
	time.Sleep(s.delay)
	return s.Destination.ApplyRange(ctx, p, first, seq, items)
}

func TestBackpressureBoundsTheLog(t *testing.T) {
	src, dst := start(t, "datagen"), start(t, "testdest")
	srcSettings := []byte(`{"seed": 4, "rows": 20000, "batch_size": 200}`)
	out := t.TempDir()
	cfg := config("p", src, srcSettings, slowDestination{plug(dst, []byte(fmt.Sprintf(`{"dir": %q}`, out))), 30 * time.Millisecond}, openLog(t, t.TempDir()))
	cfg.MaxBatchBytes = 16 << 10
	cfg.MaxUnappliedBytes = 64 << 10
	cfg.StatusEvery = time.Nanosecond
	var (
		mu              sync.Mutex
		sawBackpressure bool
		maxUnapplied    int64
		maxEntry        int64
	)
	cfg.OnStatus = func(s pipeline.Status) {
		mu.Lock()
		defer mu.Unlock()
		sawBackpressure = sawBackpressure || s.Backpressure
		maxUnapplied = max(maxUnapplied, s.WAL.UnappliedBytes)
		if s.WAL.Entries > 0 {
			maxEntry = max(maxEntry, s.WAL.Bytes/int64(s.WAL.Entries))
		}
	}
	if err := pipeline.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	assertExactlyOnce(t, out, "p", expected(t, src, srcSettings))
	if !sawBackpressure {
		t.Fatal("a destination 30 ms per apply behind a 64 KiB bound never caused backpressure")
	}
	// The reader stops before the entry that crosses the bound is followed by another.
	if limit := cfg.MaxUnappliedBytes + 4*maxEntry; maxUnapplied > limit {
		t.Fatalf("unapplied bytes reached %d, bound %d (+ slack %d)", maxUnapplied, cfg.MaxUnappliedBytes, limit)
	}
}

func TestTwoDestinationsEachGetEverything(t *testing.T) {
	src, d1, d2 := start(t, "datagen"), start(t, "testdest"), start(t, "testdest")
	srcSettings := []byte(`{"seed": 8, "rows": 8000, "batch_size": 500, "update_ratio": 0.3, "delete_ratio": 0.1}`)
	out1, out2 := t.TempDir(), t.TempDir()
	cfg := config("p", src, srcSettings, plug(d1, []byte(fmt.Sprintf(`{"dir": %q}`, out1))), openLog(t, t.TempDir()))
	cfg.Destinations = append(cfg.Destinations, pipeline.Endpoint[pipeline.Destination]{Name: "slow", Plugin: slowDestination{plug(d2, []byte(fmt.Sprintf(`{"dir": %q}`, out2))), 20 * time.Millisecond}})
	cfg.MaxBatchBytes = 32 << 10
	var last pipeline.Status
	cfg.OnStatus = func(s pipeline.Status) { last = s }
	if err := pipeline.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	want := expected(t, src, srcSettings)
	assertExactlyOnce(t, out1, "p", want)
	assertExactlyOnce(t, out2, "p", want)
	if last.WAL.ReclaimedThrough != last.WAL.LastCommitted || last.Destinations[0].LastApplied != last.Destinations[1].LastApplied {
		t.Fatalf("status after both applied: %+v", last)
	}
}

// TestAppliedButUnreclaimedEntriesAreReclaimedAtStart: SIGKILL after a destination's commit and before the
// reclaim that follows it leaves entries applied but still in the log. The next run must reclaim them even
// though it has nothing to apply; `sync --once` waited for that forever (an Iceberg SIGKILL test hung on it).
func TestAppliedButUnreclaimedEntriesAreReclaimedAtStart(t *testing.T) {
	ctx := context.Background()
	src, dst := start(t, "datagen"), start(t, "testdest")
	srcSettings := []byte(`{"seed": 5, "rows": 3000, "batch_size": 500}`)
	out := t.TempDir()
	dstSettings := []byte(fmt.Sprintf(`{"dir": %q}`, out))
	log := openLog(t, t.TempDir())
	cfg := config("orders", src, srcSettings, plug(dst, dstSettings), log)
	cfg.ApplyPaused = true
	if err := pipeline.Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// What the crash leaves: every entry applied by the destination, none reclaimed.
	entries, err := log.Entries(ctx, 0)
	if err != nil || len(entries) == 0 {
		t.Fatalf("entries: %d, %v", len(entries), err)
	}
	for _, e := range entries {
		frames, err := log.ReadSegment(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := plug(dst, dstSettings).ApplyRange(ctx, "orders", e.Seq, e.Seq, slices.Values(pipeline.Items(frames))); err != nil {
			t.Fatal(err)
		}
	}

	cfg.ApplyPaused = false
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := pipeline.Run(rctx, cfg); err != nil {
		t.Fatalf("run after the crash: %v", err)
	}
	head, err := log.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if head.Entries != 0 || head.ReclaimedThrough != head.LastSeq || head.LastSeq != entries[len(entries)-1].Seq {
		t.Fatalf("after the run: %+v, want every entry (through %d) reclaimed", head, entries[len(entries)-1].Seq)
	}
	assertExactlyOnce(t, out, "orders", expected(t, src, srcSettings))
}

// TestRefusesTruncatingSourceWithoutCapability: a pipeline whose source propagates TRUNCATE does not start
// with a destination that cannot apply one, and says how to go on.
func TestRefusesTruncatingSourceWithoutCapability(t *testing.T) {
	src, dst := start(t, "datagen"), start(t, "testdest")
	dstSettings := []byte(fmt.Sprintf(`{"dir": %q, "no_truncate": true}`, t.TempDir()))
	cfg := config("p", src, []byte(`{"rows": 10}`), plug(dst, dstSettings), openLog(t, t.TempDir()))
	cfg.SourceTruncates = true
	err := pipeline.Run(context.Background(), cfg)
	if !errors.Is(err, pipeline.ErrGuarantee) || !strings.Contains(err.Error(), "destination sink cannot apply a truncate") || !strings.Contains(err.Error(), "truncate: ignore") {
		t.Fatalf("err = %v, want ErrGuarantee naming the destination and the settings that avoid it", err)
	}
	cfg.SourceTruncates = false
	if err := pipeline.Run(context.Background(), cfg); err != nil {
		t.Fatalf("run without truncates: %v", err)
	}
}

func TestSourceTruncates(t *testing.T) {
	schema := []byte(`{"properties": {"truncate": {"type": "string", "enum": ["propagate", "error", "ignore"], "default": "propagate"}}}`)
	for _, tc := range []struct {
		name             string
		schema, settings string
		want             bool
	}{
		{"default propagate", string(schema), `{}`, true},
		{"set to propagate", string(schema), `{"truncate": "propagate"}`, true},
		{"set to error", string(schema), `{"truncate": "error"}`, false},
		{"set to ignore", string(schema), `{"truncate": "ignore"}`, false},
		{"source without the setting", `{"properties": {"rows": {"type": "integer"}}}`, `{"rows": 3}`, false},
		{"default error", `{"properties": {"truncate": {"default": "error"}}}`, `{}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pipeline.SourceTruncates([]byte(tc.schema), []byte(tc.settings)); got != tc.want {
				t.Fatalf("SourceTruncates = %v, want %v", got, tc.want)
			}
		})
	}
}

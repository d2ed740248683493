package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/shutdown"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
)

func TestTakeRange(t *testing.T) {
	sized := func(sizes ...int64) []wal.CommitRecord {
		out := make([]wal.CommitRecord, len(sizes))
		for i, s := range sizes {
			out[i] = wal.CommitRecord{Seq: uint64(i + 1), Size: s}
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		entries []wal.CommitRecord
		lim     pipeline.ApplyLimits
		want    int
	}{
		{"everything under the byte limit", sized(10, 10, 10), pipeline.ApplyLimits{MaxBytes: 100}, 3},
		{"bytes exactly at the limit", sized(10, 10, 10), pipeline.ApplyLimits{MaxBytes: 20}, 2},
		{"the next entry would cross the limit", sized(10, 10, 10), pipeline.ApplyLimits{MaxBytes: 29}, 2},
		{"a first entry larger than the limit goes alone", sized(50, 1, 1), pipeline.ApplyLimits{MaxBytes: 20}, 1},
		{"entry limit", sized(1, 1, 1, 1, 1), pipeline.ApplyLimits{MaxBytes: 100, MaxEntries: 2}, 2},
		{"entry limit of one", sized(1, 1, 1), pipeline.ApplyLimits{MaxBytes: 100, MaxEntries: 1}, 1},
		{"bytes bind before entries", sized(10, 10, 10, 10), pipeline.ApplyLimits{MaxBytes: 25, MaxEntries: 3}, 2},
		{"one entry waiting", sized(10), pipeline.ApplyLimits{MaxBytes: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pipeline.TakeRange(tc.entries, tc.lim); got != tc.want {
				t.Fatalf("takeRange = %d, want %d", got, tc.want)
			}
		})
	}
}

// fillLog runs a paced source with apply paused, so the log holds many entries nobody applied: a destination
// that is behind. It returns the entries.
func fillLog(t *testing.T, cfg pipeline.Config) []wal.CommitRecord {
	t.Helper()
	cfg.ApplyPaused = true
	cfg.MaxBatchBytes = 1 // an entry at every checkpoint when no commit is running
	if err := pipeline.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	entries, err := cfg.Log.Entries(context.Background(), 0)
	if err != nil || len(entries) < 6 {
		t.Fatalf("entries = %d, %v; want several", len(entries), err)
	}
	return entries
}

// pacedSource is a source whose batches arrive one commit apart: many small entries.
var pacedSource = []byte(`{"seed": 6, "rows": 3000, "batch_size": 100, "rows_per_second": 6000, "update_ratio": 0.3, "delete_ratio": 0.1}`)

// TestBehindDestinationCoalesces: a destination that is behind takes the entries it lacks in ranges bounded
// by its limits; one without coalesce, in the same pipeline, takes them one by one; both end exact, and the
// log is reclaimed once the slower of them has applied.
func TestBehindDestinationCoalesces(t *testing.T) {
	greedy := func(entries []wal.CommitRecord, lim pipeline.ApplyLimits) int {
		n := 0
		for len(entries) > 0 {
			entries = entries[pipeline.TakeRange(entries, lim):]
			n++
		}
		return n
	}
	for _, tc := range []struct {
		name string
		lim  func(entries []wal.CommitRecord) pipeline.ApplyLimits
		want func(entries []wal.CommitRecord) int
	}{
		{"default limits: one range", func([]wal.CommitRecord) pipeline.ApplyLimits { return pipeline.ApplyLimits{} },
			func([]wal.CommitRecord) int { return 1 }},
		{"max_entries 3", func([]wal.CommitRecord) pipeline.ApplyLimits { return pipeline.ApplyLimits{MaxEntries: 3} },
			func(e []wal.CommitRecord) int { return (len(e) + 2) / 3 }},
		{"max_bytes of about four entries", func(e []wal.CommitRecord) pipeline.ApplyLimits {
			return pipeline.ApplyLimits{MaxBytes: e[0].Size + e[1].Size + e[2].Size + e[3].Size}
		}, func(e []wal.CommitRecord) int {
			return greedy(e, pipeline.ApplyLimits{MaxBytes: e[0].Size + e[1].Size + e[2].Size + e[3].Size})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, d1, d2 := start(t, "datagen"), start(t, "testdest"), start(t, "testdest")
			out1, out2 := t.TempDir(), t.TempDir()
			log := openLog(t, t.TempDir())
			cfg := config("p", src, pacedSource, plug(d1, []byte(fmt.Sprintf(`{"dir": %q}`, out1))), log)
			cfg.Destinations = append(cfg.Destinations, pipeline.Endpoint[pipeline.Destination]{Name: "single", Plugin: plug(d2, []byte(fmt.Sprintf(`{"dir": %q, "no_coalesce": true}`, out2)))})
			entries := fillLog(t, cfg)
			cfg.Destinations[0].Apply = tc.lim(entries)
			cfg.Destinations[1].Apply = tc.lim(entries) // ignored: the plugin does not coalesce
			if err := pipeline.Run(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
			want := expected(t, src, pacedSource)
			assertExactlyOnce(t, out1, "p", want)
			assertExactlyOnce(t, out2, "p", want)
			st1, _ := filedest.Load(out1)
			st2, _ := filedest.Load(out2)
			if got, w := st1.Applies["p"], tc.want(entries); got != w {
				t.Errorf("coalescing destination: %d applies for %d entries, want %d", got, len(entries), w)
			}
			if got := st2.Applies["p"]; got != len(entries) {
				t.Errorf("destination without coalesce: %d applies for %d entries, want one each", got, len(entries))
			}
			head, err := log.Head(context.Background())
			if err != nil || head.Entries != 0 || head.ReclaimedThrough != entries[len(entries)-1].Seq {
				t.Fatalf("log after both applied: %+v, %v; want everything reclaimed", head, err)
			}
		})
	}
}

// TestMaxInterval: a destination that has caught up applies each entry at once by default, but with a
// max_interval it waits, so a run gets a few large applies; the end of a --once run, and the backpressure of
// the log's own bound, end the wait (a run would otherwise last the whole interval). A max_interval the
// destination plugin proposes does the same when the connection leaves it out, and a stated 0s overrides it.
func TestMaxInterval(t *testing.T) {
	for _, tc := range []struct {
		name       string
		interval   time.Duration
		propose    string // the destination's propose_max_interval
		unset      bool   // the connection leaves max_interval out
		unapplied  int64
		minApplies int // at least, as a fraction of entries: 2 means entries/2
		maxApplies int
	}{
		{name: "no interval: applies as entries come", interval: 0, minApplies: 2},
		{name: "an hour: the first apply, then one at the end", interval: time.Hour, maxApplies: 2},
		{name: "an hour proposed by the plugin, left out: as an hour", propose: "1h", unset: true, maxApplies: 2},
		{name: "an hour proposed by the plugin, 0s stated: applies as entries come", propose: "1h", minApplies: 2},
		{name: "an hour proposed by the plugin, under backpressure", propose: "1h", unset: true, unapplied: 4 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := start(t, "datagen"), start(t, "testdest")
			out := t.TempDir()
			log := openLog(t, t.TempDir())
			cfg := config("p", src, pacedSource, plug(dst, []byte(fmt.Sprintf(`{"dir": %q, "propose_max_interval": %q}`, out, tc.propose))), log)
			cfg.MaxBatchBytes = 1
			cfg.MaxUnappliedBytes = tc.unapplied
			cfg.Destinations[0].Apply = pipeline.ApplyLimits{MaxInterval: tc.interval, Unset: pipeline.ApplyKeys{MaxInterval: tc.unset}}
			cfg.Destinations[0].PluginName = "testdest"
			var logs bytes.Buffer
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			var (
				mu   sync.Mutex
				last pipeline.Status
			)
			cfg.OnStatus = func(st pipeline.Status) { mu.Lock(); last = st; mu.Unlock() }
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			began := time.Now()
			if err := pipeline.Run(ctx, cfg); err != nil {
				t.Fatalf("run: %v (a wait for max_interval that never ended?)", err)
			}
			t.Logf("run took %v", time.Since(began))
			const line = "apply.max_interval 1h0m0s proposed by plugin testdest; set apply.max_interval on connection sink to change"
			taken := tc.propose != "" && tc.unset
			if got := strings.Contains(logs.String(), line); got != taken {
				t.Errorf("log has %q: %v, want %v; log:\n%s", line, got, taken, logs.String())
			}
			mu.Lock()
			defer mu.Unlock()
			if len(last.Destinations) != 1 || last.Destinations[0].Apply == nil {
				t.Fatalf("status destinations %+v: want the effective apply limits", last.Destinations)
			}
			if a := last.Destinations[0].Apply; taken != (len(a.FromPlugin) == 1 && a.MaxIntervalMS == time.Hour.Milliseconds()) {
				t.Errorf("status apply %+v: want the plugin's hour only when max_interval is left out", a)
			}
			assertExactlyOnce(t, out, "p", expected(t, src, pacedSource))
			st, _ := filedest.Load(out)
			entries := len(st.Sequences["p"])
			applies := st.Applies["p"]
			t.Logf("%d entries in %d applies", entries, applies)
			if entries < 6 {
				t.Fatalf("only %d entries: the test needs many", entries)
			}
			if tc.minApplies > 0 && applies < entries/tc.minApplies {
				t.Errorf("%d applies for %d entries: a caught-up destination without max_interval should apply them as they come", applies, entries)
			}
			if tc.maxApplies > 0 && applies > tc.maxApplies {
				t.Errorf("%d applies for %d entries, want at most %d", applies, entries, tc.maxApplies)
			}
		})
	}
}

// TestSoftStopDoesNotWaitForMaxInterval: a destination waiting out its max_interval does not hold up a stop.
func TestSoftStopDoesNotWaitForMaxInterval(t *testing.T) {
	src, dst := start(t, "datagen"), start(t, "testdest")
	srcSettings := []byte(`{"seed": 3, "rows": 0, "rows_per_second": 2000, "batch_size": 200}`)
	out := t.TempDir()
	cfg := config("soft", src, srcSettings, plug(dst, []byte(fmt.Sprintf(`{"dir": %q}`, out))), openLog(t, t.TempDir()))
	cfg.Once = false
	// The hour is the destination's proposal, taken because the connection leaves max_interval out: what a
	// warehouse's default does. A stated one is the same limit once resolved.
	cfg.Destinations[0].Plugin = plug(dst, []byte(fmt.Sprintf(`{"dir": %q, "propose_max_interval": "1h"}`, out)))
	cfg.Destinations[0].Apply = pipeline.ApplyLimits{Unset: pipeline.ApplyKeys{MaxInterval: true}}
	ctx, release := shutdown.OnSignals(context.Background(), time.Hour, syscall.SIGUSR1)
	defer release()
	errc := make(chan error, 1)
	go func() { errc <- pipeline.Run(ctx, cfg) }()
	// The first apply goes at once; after it the destination waits for the hour.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, err := filedest.Load(out)
		if err != nil {
			t.Fatal(err)
		}
		if st.Applies["soft"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no apply")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // entries commit meanwhile and wait
	stopAt := time.Now()
	syscall.Kill(syscall.Getpid(), syscall.SIGUSR1)
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("run after a soft stop: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not end after a soft stop: it waited for max_interval")
	}
	t.Logf("stopped in %v", time.Since(stopAt))
}

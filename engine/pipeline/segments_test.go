package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/testkit/s3test"
)

// versity is one versitygw for the package run, started by the first test that needs it.
var versity s3test.Shared

// countingLog is the real WAL with its reads counted: one ReadSegment is one GET of the segment from the
// backend (local file or S3 object), one Entries a listing and a GET per commit record.
type countingLog struct {
	pipeline.Log
	mu      sync.Mutex
	reads   map[uint64]int
	entries int
	gate    chan struct{} // if set, ReadSegment waits for it
}

func newCountingLog(l pipeline.Log) *countingLog {
	return &countingLog{Log: l, reads: map[uint64]int{}}
}

func (c *countingLog) ReadSegment(ctx context.Context, rec wal.CommitRecord) ([]wal.Frame, error) {
	c.mu.Lock()
	c.reads[rec.Seq]++
	gate := c.gate
	c.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return c.Log.ReadSegment(ctx, rec)
}

func (c *countingLog) Entries(ctx context.Context, after uint64) ([]wal.CommitRecord, error) {
	c.mu.Lock()
	c.entries++
	c.mu.Unlock()
	return c.Log.Entries(ctx, after)
}

func (c *countingLog) readsOf(seq uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[seq]
}

func openS3Log(t *testing.T) *wal.Log {
	t.Helper()
	b := versity.Get(t).NewBucket(t)
	l, err := wal.Open(context.Background(), "s3://"+b.Name+"/p", wal.Options{S3: wal.S3Options{
		Endpoint: b.Endpoint, Region: s3test.Region, PathStyle: true, AccessKeyID: b.AccessKey, SecretAccessKey: b.SecretKey,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestTwoDestinationsReadEachSegmentOnce: with two destinations, one of them slower, every committed segment
// is read from the WAL once and the commit records are listed once (at start), not once per destination and
// apply; both destinations still end exact. Without the cache, or with a bound below any segment, each
// destination reads every segment itself.
func TestTwoDestinationsReadEachSegmentOnce(t *testing.T) {
	for _, tc := range []struct {
		name       string
		s3         bool
		cacheBytes int64
		wantReads  int
	}{
		{"local", false, 0, 1},
		{"s3", true, 0, 1},
		{"local, no cache", false, -1, 2},
		{"local, bound below a segment", false, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.s3 && os.Getenv("VERSITYGW") == "" {
				if _, err := s3test.Binary(); err != nil {
					t.Skipf("no S3 server: %v (set VERSITYGW)", err)
				}
			}
			src, d1, d2 := start(t, "datagen"), start(t, "testdest"), start(t, "testdest")
			srcSettings := []byte(`{"seed": 9, "rows": 4000, "batch_size": 250, "update_ratio": 0.3, "delete_ratio": 0.1}`)
			out1, out2 := t.TempDir(), t.TempDir()
			var wl *wal.Log
			if tc.s3 {
				wl = openS3Log(t)
			} else {
				wl = openLog(t, t.TempDir())
			}
			log := newCountingLog(wl)
			cfg := config("p", src, srcSettings, plug(d1, []byte(fmt.Sprintf(`{"dir": %q}`, out1))), log)
			cfg.Destinations = append(cfg.Destinations, pipeline.Endpoint[pipeline.Destination]{Name: "slow", Plugin: slowDestination{plug(d2, []byte(fmt.Sprintf(`{"dir": %q, "no_coalesce": true}`, out2))), 10 * time.Millisecond}})
			cfg.MaxBatchBytes = 16 << 10
			cfg.ReadCacheBytes = tc.cacheBytes
			var last pipeline.Status
			cfg.OnStatus = func(s pipeline.Status) { last = s }
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if err := pipeline.Run(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			want := expected(t, src, srcSettings)
			assertExactlyOnce(t, out1, "p", want)
			assertExactlyOnce(t, out2, "p", want)
			n := last.WAL.LastCommitted
			if n < 4 || last.WAL.ReclaimedThrough != n {
				t.Fatalf("status: %+v; want several entries, all reclaimed", last.WAL)
			}
			for seq := uint64(1); seq <= n; seq++ {
				if got := log.readsOf(seq); got != tc.wantReads {
					t.Errorf("entry %d of %d: segment read %d times, want %d", seq, n, got, tc.wantReads)
				}
			}
			if log.entries != 1 {
				t.Errorf("commit records listed %d times, want once (at start)", log.entries)
			}
		})
	}
}

// TestSegmentCache: the shared reader's rules, on a real local WAL.
func TestSegmentCache(t *testing.T) {
	ctx := context.Background()
	// Entry i holds one row of a string 1000·(i+1) bytes long; size[i] is its frame's payload.
	var size [3]int64
	setup := func(t *testing.T) (*countingLog, []wal.CommitRecord, string) {
		dir := t.TempDir()
		wl := openLog(t, dir)
		sc := arrow.NewSchema([]arrow.Field{{Name: "v", Type: arrow.BinaryTypes.String}}, nil)
		for i := range 3 {
			b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
			b.Field(0).(*array.StringBuilder).Append(strings.Repeat("x", 1000*(i+1)))
			rec := b.NewRecordBatch()
			var buf bytes.Buffer
			w := ipc.NewWriter(&buf, ipc.WithSchema(sc))
			if err := w.Write(rec); err != nil {
				t.Fatal(err)
			}
			w.Close()
			rec.Release()
			b.Release()
			size[i] = int64(buf.Len())
			if _, err := wl.Commit(ctx, []wal.Frame{{Kind: wal.FrameBatch, Stream: "s", Rows: 1, Data: buf.Bytes()}}, []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
		recs, err := wl.Entries(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		return newCountingLog(wl), recs, dir
	}
	read := func(t *testing.T, c *pipeline.SegmentCache, rec wal.CommitRecord, others int) []wal.Frame {
		t.Helper()
		frames, err := c.Read(ctx, rec, others)
		if err != nil {
			t.Fatal(err)
		}
		if len(frames) != 1 || int64(len(frames[0].Data)) != size[rec.Seq-1] {
			t.Fatalf("entry %d: %d frames", rec.Seq, len(frames))
		}
		return frames
	}

	t.Run("three destinations, one read, freed by the last", func(t *testing.T) {
		log, recs, _ := setup(t)
		c := pipeline.NewSegmentCache(log, 1<<20)
		read(t, c, recs[0], 2)
		if c.Bytes() != size[0] {
			t.Fatalf("held %d bytes after the first reader, want %d", c.Bytes(), size[0])
		}
		read(t, c, recs[0], 1)
		read(t, c, recs[0], 0)
		if got := log.readsOf(recs[0].Seq); got != 1 {
			t.Fatalf("%d backend reads, want 1", got)
		}
		if c.Bytes() != 0 {
			t.Fatalf("held %d bytes after every destination read, want 0", c.Bytes())
		}
	})
	t.Run("the last destination alone reads without keeping", func(t *testing.T) {
		log, recs, _ := setup(t)
		c := pipeline.NewSegmentCache(log, 1<<20)
		read(t, c, recs[1], 0)
		read(t, c, recs[1], 0)
		if got := log.readsOf(recs[1].Seq); got != 2 || c.Bytes() != 0 {
			t.Fatalf("%d backend reads, %d bytes held; want 2 and 0", got, c.Bytes())
		}
	})
	t.Run("over the bound: each reads itself", func(t *testing.T) {
		log, recs, _ := setup(t)
		c := pipeline.NewSegmentCache(log, 2*size[0])
		read(t, c, recs[0], 1) // kept: half the bound
		read(t, c, recs[1], 1) // not kept: larger than the other half
		read(t, c, recs[1], 0)
		read(t, c, recs[0], 0)
		if r0, r1 := log.readsOf(recs[0].Seq), log.readsOf(recs[1].Seq); r0 != 1 || r1 != 2 {
			t.Fatalf("backend reads: entry 1 %d (want 1), entry 2 %d (want 2)", r0, r1)
		}
	})
	t.Run("a reader arriving during the first read waits for it", func(t *testing.T) {
		log, recs, _ := setup(t)
		log.gate = make(chan struct{})
		c := pipeline.NewSegmentCache(log, 1<<20)
		first := make(chan error, 1)
		go func() { _, err := c.Read(ctx, recs[2], 1); first <- err }()
		for log.readsOf(recs[2].Seq) == 0 {
			time.Sleep(time.Millisecond)
		}
		second := make(chan error, 1)
		go func() { _, err := c.Read(ctx, recs[2], 0); second <- err }()
		time.Sleep(50 * time.Millisecond) // the second reader finds the read under way
		close(log.gate)
		if err := errors.Join(<-first, <-second); err != nil {
			t.Fatal(err)
		}
		if got := log.readsOf(recs[2].Seq); got != 1 {
			t.Fatalf("%d backend reads, want 1", got)
		}
	})
	t.Run("a corrupt segment is never kept: each reader gets the error", func(t *testing.T) {
		log, recs, dir := setup(t)
		var seg string
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(p, recs[0].Segment) {
				seg = p
			}
			return nil
		})
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-3] ^= 0x55
		if err := os.WriteFile(seg, b, 0o644); err != nil {
			t.Fatal(err)
		}
		c := pipeline.NewSegmentCache(log, 1<<20)
		for others := 1; others >= 0; others-- {
			if _, err := c.Read(ctx, recs[0], others); !errors.Is(err, wal.ErrCorrupt) || !strings.Contains(err.Error(), recs[0].Segment) {
				t.Fatalf("reader %d: err = %v, want ErrCorrupt naming %s", 2-others, err, recs[0].Segment)
			}
		}
		if got := log.readsOf(recs[0].Seq); got != 2 || c.Bytes() != 0 {
			t.Fatalf("%d backend reads, %d bytes held; want 2 and 0", got, c.Bytes())
		}
	})
	t.Run("drop frees what every destination applied", func(t *testing.T) {
		log, recs, _ := setup(t)
		c := pipeline.NewSegmentCache(log, 1<<20)
		read(t, c, recs[0], 1)
		read(t, c, recs[1], 1)
		c.Drop(recs[0].Seq)
		if c.Bytes() != size[1] {
			t.Fatalf("held %d bytes after dropping entry 1, want %d", c.Bytes(), size[1])
		}
	})
}

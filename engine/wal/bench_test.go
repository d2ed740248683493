package wal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// benchFrames builds about size bytes of Arrow IPC batches (64Ki-row batches
// of order-like rows) and returns them with their total payload size.
func benchFrames(b *testing.B, size int) ([]Frame, int64) {
	var frames []Frame
	var total int64
	for seed := uint64(1); total < int64(size); seed++ {
		rows := 1 << 16
		f := batchFrame(b, "public.orders", rows, seed)
		if rest := int64(size) - total; int64(len(f.Data)) > rest {
			rows = int(int64(rows) * rest / int64(len(f.Data)))
			f = batchFrame(b, "public.orders", max(rows, 1), seed)
		}
		frames = append(frames, f)
		total += int64(len(f.Data))
	}
	return frames, total
}

// writeFsync is the baseline: the same payload bytes written to a new file and fsynced.
func writeFsync(path string, frames []Frame) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	for _, fr := range frames {
		if _, err := f.Write(fr.Data); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// BenchmarkLocalAppend compares Commit (frame, compress with zstd or S2, CRC, write+fsync+rename
// the segment, fsync dir, write+fsync+link the record, fsync dir) with a plain
// write+fsync of the same payload, interleaved in the same run. MB/s are of
// payload (uncompressed Arrow IPC) bytes.
func BenchmarkLocalAppend(b *testing.B) {
	for _, size := range []int{1 << 20, 8 << 20} {
		for _, comp := range []string{"zstd", "s2"} {
			b.Run(fmt.Sprintf("%dMiB/%s", size>>20, comp), func(b *testing.B) {
				localAppend(b, size, comp)
			})
		}
	}
}

// localAppend is one BenchmarkLocalAppend case: entries of size payload bytes, segments written with comp.
func localAppend(b *testing.B, size int, comp string) {
	frames, payload := benchFrames(b, size)
	dir := b.TempDir()
	l := mustAcquire(b, "file://"+filepath.Join(dir, "wal"), Options{Owner: "bench", Compression: comp})
	plain := filepath.Join(dir, "plain")
	var walTime, fileTime time.Duration
	var stored int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		rec, err := l.Commit(ctxT(b), frames, []byte("ckpt"))
		if err != nil {
			b.Fatal(err)
		}
		walTime += time.Since(t0)
		stored += rec.Size

		t1 := time.Now()
		if err := writeFsync(plain, frames); err != nil {
			b.Fatal(err)
		}
		fileTime += time.Since(t1)
		os.Remove(plain)
	}
	b.StopTimer()
	mb := float64(payload) * float64(b.N) / 1e6
	b.ReportMetric(mb/walTime.Seconds(), "wal-MB/s")
	b.ReportMetric(mb/fileTime.Seconds(), "fsync-file-MB/s")
	b.ReportMetric(float64(stored)/(float64(payload)*float64(b.N)), "stored/payload")
}

// BenchmarkCommitLatency measures single Commit calls of a 1000-row batch.
func BenchmarkCommitLatency(b *testing.B) {
	type target struct {
		name string
		open func(b *testing.B) (string, Options)
	}
	targets := []target{
		{"local", func(b *testing.B) (string, Options) {
			return "file://" + filepath.Join(b.TempDir(), "wal"), Options{Owner: "bench"}
		}},
		{"s3", func(b *testing.B) (string, Options) {
			bucket := versity.Get(b).NewBucket(b)
			return "s3://" + bucket.Name + "/bench", Options{Owner: "bench", S3: S3Options{
				Endpoint: bucket.Endpoint, PathStyle: true, AccessKeyID: bucket.AccessKey, SecretAccessKey: bucket.SecretKey,
			}}
		}},
	}
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			url, opts := tg.open(b)
			l := mustAcquire(b, url, opts)
			frames := []Frame{batchFrame(b, "public.orders", 1000, 1)}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := l.Commit(ctxT(b), frames, []byte("ckpt")); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
		})
	}
}

// BenchmarkCommitUnderReclaim commits at a steady rate on the S3 backend, once with a reclaimer deleting
// applied entries beside it (as a pipeline's reclaim loop does after each apply) and once without, and reports
// the commit call's p50/p99 for both in the same run. Each iteration is one commit; run it with enough of them
// for a p99 (`-benchtime 1000x`). Reclaim lists the log and deletes commit records, segments and checkpoint
// records: whatever part of that a Commit must wait for shows here.
func BenchmarkCommitUnderReclaim(b *testing.B) {
	const (
		every   = 20 * time.Millisecond  // 50 commits/s
		reclaim = 100 * time.Millisecond // a destination applying every 100 ms
		lag     = 5                      // entries the destination is behind
	)
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("reclaim=%v", on), func(b *testing.B) {
			bucket := versity.Get(b).NewBucket(b)
			l := mustAcquire(b, "s3://"+bucket.Name+"/bench", Options{Owner: "bench", S3: S3Options{
				Endpoint: bucket.Endpoint, PathStyle: true, AccessKeyID: bucket.AccessKey, SecretAccessKey: bucket.SecretKey,
			}})
			frames := []Frame{batchFrame(b, "public.orders", 1000, 1)}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var last atomic.Uint64
			var reclaims atomic.Int64
			done := make(chan error, 1)
			go func() {
				if !on {
					done <- nil
					return
				}
				t := time.NewTicker(reclaim)
				defer t.Stop()
				var through uint64
				for {
					select {
					case <-ctx.Done():
						done <- nil
						return
					case <-t.C:
					}
					if upTo := last.Load(); upTo > through+lag {
						through = upTo - lag
						if err := l.Reclaim(ctx, through); err != nil && ctx.Err() == nil {
							done <- err
							return
						}
						reclaims.Add(1)
					}
				}
			}()
			lat := make([]time.Duration, 0, b.N)
			tick := time.NewTicker(every)
			defer tick.Stop()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				<-tick.C
				t0 := time.Now()
				rec, err := l.Commit(ctx, frames, []byte("ckpt"))
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
				last.Store(rec.Seq)
			}
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(float64(reclaims.Load()), "reclaims")
		})
	}
}

// BenchmarkCodecs encodes and decodes the same entries with each codec: CPU per row and stored bytes per row,
// the figures that chose DefaultCompression (BENCHMARKS.md, WAL codecs). The entries are those of a real run
// when SKIPPR_WAL_BENCH_DIR names a local WAL directory (bench/ keeps its WALs with SKIPPR_BENCH_KEEP_WAL=1),
// else 8 MiB of the synthetic order-like batches.
func BenchmarkCodecs(b *testing.B) {
	var entries [][]Frame
	if dir := os.Getenv("SKIPPR_WAL_BENCH_DIR"); dir != "" {
		l := mustOpen(b, "file://"+dir, Options{})
		for _, rec := range mustEntries(b, l, 0) {
			frames, err := l.ReadSegment(ctxT(b), rec)
			if err != nil {
				b.Fatal(err)
			}
			if len(frames) > 0 {
				entries = append(entries, frames)
			}
		}
	} else {
		frames, _ := benchFrames(b, 8<<20)
		entries = [][]Frame{frames}
	}
	var rows, raw int64
	for _, frames := range entries {
		for _, f := range frames {
			rows += f.Rows
			raw += int64(len(f.Data))
		}
	}
	if rows == 0 {
		b.Fatal("no rows in the entries")
	}
	for _, comp := range []Compression{CompressionZstd, CompressionS2, CompressionNone} {
		c, err := newCodec(comp, 1)
		if err != nil {
			b.Fatal(err)
		}
		for _, op := range []string{"encode", "decode"} {
			b.Run(comp.String()+"/"+op, func(b *testing.B) {
				segs := make([][]byte, len(entries))
				var stored int64
				for i, frames := range entries {
					seg, err := c.encode(frames)
					if err != nil {
						b.Fatal(err)
					}
					segs[i] = slices.Clone(seg)
					stored += int64(len(seg))
				}
				b.SetBytes(raw)
				b.ResetTimer()
				for range b.N {
					for i, frames := range entries {
						if op == "encode" {
							if _, err := c.encode(frames); err != nil {
								b.Fatal(err)
							}
						} else if _, err := c.decode(segs[i]); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(rows), "ns/row")
				b.ReportMetric(float64(stored)/float64(rows), "stored-B/row")
				b.ReportMetric(float64(raw)/float64(rows), "ipc-B/row")
			})
		}
		c.close()
	}
}

package dest

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go/table"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// BenchmarkApply measures applies of 100k-row batches (id, two strings, an int) into a local warehouse:
// inserts (append only) and updates (equality deletes plus new rows).
func BenchmarkApply(b *testing.B) {
	const rows = 100_000
	sc := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "email", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, []string{"id"})
	mk := func(op change.Op) arrow.RecordBatch {
		bld := change.NewBuilder(memory.DefaultAllocator, sc)
		defer bld.Release()
		for i := 0; i < rows; i++ {
			bld.Field(0).(*array.Int64Builder).Append(int64(i))
			bld.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("name-%d", i))
			bld.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("user%d@example.com", i))
			bld.Field(3).(*array.Int64Builder).Append(int64(i * 7))
			bld.Row(op, "")
		}
		return bld.NewBatch()
	}
	for _, op := range []change.Op{change.OpInsert, change.OpUpdate} {
		b.Run(op.String(), func(b *testing.B) {
			rec := mk(op)
			defer rec.Release()
			raw, _ := json.Marshal(map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(b.TempDir(), "wh")}})
			d := &Destination{}
			defer d.Close()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, err := d.Apply(b.Context(), serve.ApplyRequest{Settings: raw, Pipeline: "bench", Sequence: uint64(i + 1), Items: []serve.Item{{Stream: "t", Record: rec}}})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// The 10M-row figures in BENCHMARKS.md come from BenchmarkLake with SKIPPR_ICEBERG_BENCH_ROWS=10000000; without
// it the workload is 1M rows, so a plain `go test -bench .` stays short. Each variant belongs in its own process
// (`-bench '^BenchmarkLake$/^snapshot$/^iceberg$' -benchtime 1x`): peak-RSS-MiB is the process's getrusage
// maximum, which would otherwise carry the previous variant's peak.
const (
	benchBatchRows = 65_536    // rows per Arrow batch, as datagen sends them
	benchSeqRows   = 1_000_000 // rows per WAL sequence (default; SKIPPR_ICEBERG_BENCH_SEQ_ROWS overrides)
)

// benchSize returns an integer from the environment, or def.
func benchSize(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number of rows", name, v)
	}
	return n
}

// benchSchema is a 6-column stream keyed by id, close to an orders table: int64, text, double, timestamptz,
// a JSON-ish text payload and a bool.
var benchSchema = change.Schema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "amount", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "created_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	{Name: "payload", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "active", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
}, []string{"id"})

// benchChange is the op and key of the i-th row of a workload.
type benchChange func(i int) (change.Op, int64)

// snapshotRows reads keys 0..n-1.
func snapshotRows(i int) (change.Op, int64) { return change.OpRead, int64(i) }

// changeRows is a stream over a table holding keys 0..base-1: 20% updates and 5% deletes of existing keys, the
// rest inserts of new keys. Updated and deleted keys are a permutation of the table's keys (7919 is prime and
// does not divide base), so no key is touched twice and a delete never hits a key already gone.
func changeRows(base int) benchChange {
	return func(i int) (change.Op, int64) {
		switch h := (uint64(i) * 0x9E3779B97F4A7C15) >> 32 % 100; {
		case h < 20:
			return change.OpUpdate, int64((uint64(i) * 7919) % uint64(base))
		case h < 25:
			return change.OpDelete, int64((uint64(i) * 7919) % uint64(base))
		}
		return change.OpInsert, int64(base + i)
	}
}

// benchBatches builds rows [from, to) of a workload as change batches of benchBatchRows. Values are
// pseudo-random but depend only on the key and the row number, so every variant writes the same bytes; they are
// hashed rather than counted so that zstd sees data about as compressible as real orders, not runs.
func benchBatches(from, to int, row benchChange) []arrow.RecordBatch {
	bld := change.NewBuilder(memory.DefaultAllocator, benchSchema)
	defer bld.Release()
	var (
		out []arrow.RecordBatch
		buf []byte
	)
	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for i := from; i < to; i++ {
		op, id := row(i)
		h := mix64(uint64(id)<<20 ^ uint64(i))
		bld.Field(0).(*array.Int64Builder).Append(id)
		buf = strconv.AppendUint(append(buf[:0], "customer-"...), h%2_000_003, 10)
		bld.Field(1).(*array.StringBuilder).BinaryBuilder.Append(buf)
		bld.Field(2).(*array.Float64Builder).Append(float64(h>>24%1_000_000) / 100)
		bld.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(ts + int64(h>>8%(365*86_400_000_000))))
		buf = strconv.AppendUint(append(buf[:0], `{"sku":"SKU-`...), h>>16%50_000, 10)
		buf = strconv.AppendUint(append(buf, `","qty":`...), h>>40%20, 10)
		buf = append(buf, `,"channel":"`...)
		buf = append(buf, [...]string{"web", "store", "phone", "partner"}[h>>50%4]...)
		buf = append(buf, `"}`...)
		bld.Field(4).(*array.StringBuilder).BinaryBuilder.Append(buf)
		bld.Field(5).(*array.BooleanBuilder).Append(h>>60%3 != 0)
		bld.Row(op, "")
		if bld.Len() == benchBatchRows || i == to-1 {
			out = append(out, bld.NewBatch())
		}
	}
	return out
}

// mix64 is splitmix64's finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// arrowBytes is the size of a batch's data columns in Arrow memory: what MB/s counts.
func arrowBytes(rec arrow.RecordBatch) int64 {
	var n int64
	var walk func(d arrow.ArrayData)
	walk = func(d arrow.ArrayData) {
		for _, b := range d.Buffers() {
			if b != nil {
				n += int64(b.Len())
			}
		}
		for _, c := range d.Children() {
			walk(c)
		}
	}
	for i, f := range rec.Schema().Fields() {
		if !strings.HasPrefix(f.Name, change.ReservedPrefix) {
			walk(rec.Column(i).Data())
		}
	}
	return n
}

func peakRSSMiB(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return float64(ru.Maxrss) / 1024 // KiB on Linux
}

func releaseAll(recs []arrow.RecordBatch) {
	for _, r := range recs {
		r.Release()
	}
}

// benchWorkload is one measured workload: rows of a change stream applied as sequences of seqRows.
type benchWorkload struct {
	rows, seqRows int
	row           benchChange
	// base, when set, loads the table the stream applies to; it is not timed.
	base *benchWorkload
}

// BenchmarkLake measures the Iceberg destination against the write limit: arrow-go's pqarrow writing the same
// batches to Parquet files with the writer properties iceberg-go uses (zstd, 1M-row row groups, data page v2,
// dictionary cost fallback), one file per sequence, no catalog. "snapshot" is a 6-column snapshot (op=read) into
// a new table; "changes" is a stream of 75% inserts, 20% updates and 5% deletes over a table of the same size.
func BenchmarkLake(b *testing.B) {
	rows := benchSize(b, "SKIPPR_ICEBERG_BENCH_ROWS", 1_000_000)
	seqRows := benchSize(b, "SKIPPR_ICEBERG_BENCH_SEQ_ROWS", benchSeqRows)
	if rows%7919 == 0 {
		b.Fatalf("SKIPPR_ICEBERG_BENCH_ROWS=%d: the change stream needs a row count 7919 does not divide", rows)
	}
	snapshot := &benchWorkload{rows: rows, seqRows: seqRows, row: snapshotRows}
	workloads := []struct {
		name string
		w    *benchWorkload
	}{
		{"snapshot", snapshot},
		{"changes", &benchWorkload{rows: rows, seqRows: seqRows, row: changeRows(rows), base: snapshot}},
	}
	for _, wl := range workloads {
		b.Run(wl.name, func(b *testing.B) {
			b.Run("iceberg", func(b *testing.B) { benchIceberg(b, wl.w) })
			b.Run("pqarrow", func(b *testing.B) { benchPqarrow(b, wl.w) })
		})
	}
}

// eachSeq calls fn with the batches of every sequence of w. Only fn is timed, and only when timed is set;
// the timer is left stopped. It returns the CPU seconds the process spent in fn (all goroutines, GC included),
// a figure that a busy shared machine disturbs less than the elapsed time.
func (w *benchWorkload) eachSeq(b *testing.B, timed bool, fn func(seq int, recs []arrow.RecordBatch)) (cpu float64) {
	b.StopTimer()
	for seq, from := 1, 0; from < w.rows; seq, from = seq+1, from+w.seqRows {
		recs := benchBatches(from, min(from+w.seqRows, w.rows), w.row)
		if timed {
			b.StartTimer()
		}
		c := cpuSeconds(b)
		fn(seq, recs)
		cpu += cpuSeconds(b) - c
		b.StopTimer()
		releaseAll(recs)
	}
	return cpu
}

func cpuSeconds(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func (w *benchWorkload) bytes() (n int64) {
	for from := 0; from < w.rows; from += w.seqRows {
		recs := benchBatches(from, min(from+w.seqRows, w.rows), w.row)
		for _, r := range recs {
			n += arrowBytes(r)
		}
		releaseAll(recs)
	}
	return n
}

func benchIceberg(b *testing.B, w *benchWorkload) {
	var (
		commits, dataFiles, deleteFiles, fileBytes int64
		cpu                                        float64
	)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		raw, err := json.Marshal(map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(b.TempDir(), "wh")}})
		if err != nil {
			b.Fatal(err)
		}
		d := &Destination{Log: slog.New(slog.DiscardHandler)}
		apply := func(seq int, recs []arrow.RecordBatch) {
			_, err := d.Apply(b.Context(), serve.ApplyRequest{Settings: raw, Pipeline: "bench", Sequence: uint64(seq), Items: items("orders", recs...)})
			if err != nil {
				b.Fatalf("apply %d: %v", seq, err)
			}
		}
		first := 1
		if w.base != nil {
			w.base.eachSeq(b, false, func(seq int, recs []arrow.RecordBatch) { apply(seq, recs) })
			first += (w.base.rows + w.base.seqRows - 1) / w.base.seqRows
		}
		cpu += w.eachSeq(b, true, func(seq int, recs []arrow.RecordBatch) { apply(first+seq-1, recs) })

		s, err := ParseSettings(raw)
		if err != nil {
			b.Fatal(err)
		}
		oc, err := d.catalog(b.Context(), raw, s)
		if err != nil {
			b.Fatal(err)
		}
		tbl, err := oc.cat.LoadTable(b.Context(), []string{DefaultNamespace, "orders"})
		if err != nil {
			b.Fatal(err)
		}
		for _, snap := range tbl.Metadata().Snapshots() {
			if snap.Summary == nil {
				continue
			}
			p := snap.Summary.Properties
			if n, _ := strconv.Atoi(p[seqKey("bench")]); n < first {
				continue
			}
			commits++
			dataFiles += int64(p.GetInt("added-data-files", 0))
			deleteFiles += int64(p.GetInt("added-delete-files", 0))
			fileBytes += int64(p.GetInt("added-files-size", 0))
		}
		if err := d.Close(); err != nil {
			b.Fatal(err)
		}
	}
	if commits == 0 {
		b.Fatal("no commits recorded in the table's snapshots")
	}
	w.report(b, cpu)
	b.ReportMetric(float64(dataFiles+deleteFiles)/float64(commits), "files/commit")
	b.ReportMetric(float64(deleteFiles)/float64(commits), "delete-files/commit")
	b.ReportMetric(float64(fileBytes)/float64(b.N)/(1<<20), "parquet-MiB")
}

func benchPqarrow(b *testing.B, w *benchWorkload) {
	props := []parquet.WriterProperty{
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithMaxRowGroupLength(table.ParquetRowGroupLimitDefault),
		parquet.WithDataPageSize(table.ParquetPageSizeBytesDefault),
		parquet.WithDataPageVersion(parquet.DataPageV2),
		parquet.WithBatchSize(20_000),
		parquet.WithDictionaryPageSizeLimit(table.ParquetDictSizeBytesDefault),
	}
	for _, f := range change.DataFields(benchSchema) {
		props = append(props, parquet.WithDictionaryCostFallbackFor(f.Name, true))
	}
	wp := parquet.NewWriterProperties(props...)
	ap := pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())
	var (
		fileBytes int64
		cpu       float64
	)
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		cpu += w.eachSeq(b, true, func(seq int, recs []arrow.RecordBatch) {
			path := filepath.Join(dir, fmt.Sprintf("%05d.parquet", seq))
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			var fw *pqarrow.FileWriter
			for _, rec := range recs {
				data := change.StripReserved(rec)
				if fw == nil {
					if fw, err = pqarrow.NewFileWriter(data.Schema(), f, wp, ap); err != nil {
						b.Fatal(err)
					}
				}
				err = fw.WriteBuffered(data)
				data.Release()
				if err != nil {
					b.Fatalf("write %s: %v", path, err)
				}
			}
			if err := fw.Close(); err != nil { // closes f too
				b.Fatalf("close %s: %v", path, err)
			}
			st, err := os.Stat(path)
			if err != nil {
				b.Fatal(err)
			}
			fileBytes += st.Size()
		})
	}
	w.report(b, cpu)
	b.ReportMetric(1, "files/commit")
	b.ReportMetric(float64(fileBytes)/float64(b.N)/(1<<20), "parquet-MiB")
}

// report adds rows/s, MB/s (Arrow bytes of the data columns), the CPU seconds spent and the process's peak RSS.
func (w *benchWorkload) report(b *testing.B, cpu float64) {
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(w.rows)*float64(b.N)/sec, "rows/s")
	b.ReportMetric(float64(w.bytes())*float64(b.N)/sec/1e6, "MB/s")
	b.ReportMetric(peakRSSMiB(b), "peak-RSS-MiB")
	b.ReportMetric(cpu/float64(b.N), "cpu-s")
}

// BenchmarkResnapshot measures a re-snapshot of a 100k-row table (id, two strings, an int) in a local
// warehouse. copy/plain is the baseline: the 100k rows applied as snapshot reads with no re-snapshot open
// (appends); copy/open applies them while one is open (upserts: an equality delete per row beside the data);
// end is the end mark's apply alone, after a begin, the 100k reads and 1,000 rows the copy did not send: it
// reads the keys of the files added since the begin and scans the table's live keys, then writes the
// equality deletes of the 1,000.
func BenchmarkResnapshot(b *testing.B) {
	const rows, stray = 100_000, 1_000
	sc := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "email", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, []string{"id"})
	mk := func(op change.Op, from, n int) arrow.RecordBatch {
		bld := change.NewBuilder(memory.DefaultAllocator, sc)
		defer bld.Release()
		for i := from; i < from+n; i++ {
			bld.Field(0).(*array.Int64Builder).Append(int64(i))
			bld.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("name-%d", i))
			bld.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("user%d@example.com", i))
			bld.Field(3).(*array.Int64Builder).Append(int64(i * 7))
			bld.Row(op, "")
		}
		return bld.NewBatch()
	}
	reads, strays := mk(change.OpRead, 0, rows), mk(change.OpInsert, rows, stray)
	defer reads.Release()
	defer strays.Release()
	begin := serve.Item{Stream: "t", Resnapshot: serve.ResnapshotBegin}
	end := serve.Item{Stream: "t", Resnapshot: serve.ResnapshotEnd}
	for _, v := range []string{"copy/plain", "copy/open", "end"} {
		b.Run(v, func(b *testing.B) {
			raw, _ := json.Marshal(map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(b.TempDir(), "wh")}})
			d := &Destination{Log: slog.New(slog.DiscardHandler)}
			defer d.Close()
			var (
				seq uint64
				cpu float64
			)
			apply := func(items ...serve.Item) {
				seq++
				if _, err := d.Apply(b.Context(), serve.ApplyRequest{Settings: raw, Pipeline: "bench", Sequence: seq, Items: items}); err != nil {
					b.Fatal(err)
				}
			}
			apply(serve.Item{Stream: "t", Record: reads})
			if v == "copy/open" {
				apply(begin)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if v != "end" {
					apply(serve.Item{Stream: "t", Record: reads})
					continue
				}
				b.StopTimer()
				apply(serve.Item{Stream: "t", Record: strays})
				apply(begin)
				apply(serve.Item{Stream: "t", Record: reads})
				b.StartTimer()
				c0 := cpuSeconds(b)
				apply(end)
				cpu += cpuSeconds(b) - c0
			}
			if v == "end" {
				// CPU time is what a loaded machine's wall time hides.
				b.ReportMetric(cpu*1000/float64(b.N), "cpu-ms/op")
			}
			b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

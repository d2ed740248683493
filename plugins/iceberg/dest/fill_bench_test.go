package dest

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

// BenchmarkFillV2 measures what an ADD COLUMN … DEFAULT costs on a format v2 table (fill.go: every data file
// rewritten in the schema change's commit), beside a baseline of the same run: appending the same rows
// (benchSchema, SKIPPR_ICEBERG_BENCH_ROWS, default 1M, in applies of SKIPPR_ICEBERG_BENCH_SEQ_ROWS). Each
// phase reports its elapsed rows/s, MB/s of Arrow data (as BenchmarkLake counts it) and the process's peak RSS
// during it (VmHWM, reset between the phases through /proc/self/clear_refs). Run with -benchtime 1x;
// SKIPPR_ICEBERG_BENCH_MEMORY_LIMIT sets the plugin's memory_limit (default 1GiB).
func BenchmarkFillV2(b *testing.B) {
	rows := benchSize(b, "SKIPPR_ICEBERG_BENCH_ROWS", 1_000_000)
	seqRows := benchSize(b, "SKIPPR_ICEBERG_BENCH_SEQ_ROWS", benchSeqRows)
	w := &benchWorkload{rows: rows, seqRows: seqRows, row: snapshotRows}
	v2 := change.Schema(append(change.DataFields(benchSchema), arrow.Field{Name: "region", Type: arrow.BinaryTypes.String, Nullable: true,
		Metadata: arrow.NewMetadata([]string{values.MetaExistingRows}, []string{"eu-west"})}), []string{"id"})
	var appendDur, fillDur time.Duration
	var arrowB int64
	var appendPeak, fillPeak, fillStart float64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		settings := map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(b.TempDir(), "wh")}}
		if ml := os.Getenv("SKIPPR_ICEBERG_BENCH_MEMORY_LIMIT"); ml != "" {
			settings["memory_limit"] = ml
		}
		raw, err := json.Marshal(settings)
		if err != nil {
			b.Fatal(err)
		}
		d := &Destination{Log: slog.New(slog.DiscardHandler)}
		resetPeakRSS(b)
		arrowB = 0
		last := 0
		w.eachSeq(b, false, func(seq int, recs []arrow.RecordBatch) {
			for _, r := range recs {
				arrowB += arrowBytes(r)
			}
			start := time.Now()
			if _, err := d.Apply(b.Context(), serve.ApplyRequest{Settings: raw, Pipeline: "bench", Sequence: uint64(seq), Items: items("orders", recs...)}); err != nil {
				b.Fatalf("apply %d: %v", seq, err)
			}
			appendDur += time.Since(start)
			last = seq
		})
		appendPeak = vmHWMMiB(b)
		// The fill's peak over what the process holds before it: the build's garbage returned first.
		debug.FreeOSMemory()
		resetPeakRSS(b)
		fillStart = procStatusMiB(b, "VmRSS:")
		b.StartTimer()
		start := time.Now()
		if _, err := d.Apply(b.Context(), serve.ApplyRequest{Settings: raw, Pipeline: "bench", Sequence: uint64(last + 1), Items: []serve.Item{schemaItem("orders", v2)}}); err != nil {
			b.Fatalf("apply the ADD COLUMN: %v", err)
		}
		fillDur += time.Since(start)
		b.StopTimer()
		fillPeak = vmHWMMiB(b)
		if err := d.Close(); err != nil {
			b.Fatal(err)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(rows)*n/fillDur.Seconds(), "fill-rows/s")
	b.ReportMetric(float64(arrowB)*n/fillDur.Seconds()/1e6, "fill-MB/s")
	b.ReportMetric(fillPeak, "fill-peak-RSS-MiB")
	b.ReportMetric(fillStart, "fill-start-RSS-MiB")
	b.ReportMetric(float64(rows)*n/appendDur.Seconds(), "append-rows/s")
	b.ReportMetric(float64(arrowB)*n/appendDur.Seconds()/1e6, "append-MB/s")
	b.ReportMetric(appendPeak, "append-peak-RSS-MiB")
}

// resetPeakRSS resets the process's VmHWM to its current RSS (Linux: "5" to /proc/self/clear_refs).
func resetPeakRSS(b *testing.B) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Fatalf("reset peak RSS: %v", err)
	}
}

// vmHWMMiB is the process's peak RSS since the last reset.
func vmHWMMiB(b *testing.B) float64 { return procStatusMiB(b, "VmHWM:") }

// procStatusMiB is a kB figure of /proc/self/status, in MiB.
func procStatusMiB(b *testing.B, key string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb / 1024
		}
	}
	b.Fatalf("no %s in /proc/self/status", key)
	return 0
}

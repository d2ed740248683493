package wal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/testkit/s3test"
)

// versity is one versitygw for the whole package run, started on first use.
var versity s3test.Shared

func TestMain(m *testing.M) {
	if url := os.Getenv(helperEnv); url != "" {
		os.Exit(writerHelper(url))
	}
	code := m.Run()
	versity.Stop()
	os.Exit(code)
}

var ordersSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "customer", Type: arrow.BinaryTypes.String},
	{Name: "amount", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "updated_at", Type: arrow.FixedWidthTypes.Timestamp_us},
}, nil)

var words = []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"}

// batchIPC builds an Arrow IPC stream of one record with rows rows of
// order-like data, deterministic for a seed.
func batchIPC(t testing.TB, sc *arrow.Schema, rows int, seed uint64) []byte {
	t.Helper()
	b, err := makeBatchIPC(sc, rows, seed)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func makeBatchIPC(sc *arrow.Schema, rows int, seed uint64) ([]byte, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	mem := memory.NewGoAllocator()
	b := array.NewRecordBuilder(mem, sc)
	defer b.Release()
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for i := range rows {
		for fi, f := range sc.Fields() {
			switch f.Type.ID() {
			case arrow.INT64:
				b.Field(fi).(*array.Int64Builder).Append(int64(seed)*1_000_000 + int64(i))
			case arrow.STRING:
				b.Field(fi).(*array.StringBuilder).Append(fmt.Sprintf("%s-%s-%d", words[rng.IntN(len(words))], words[rng.IntN(len(words))], rng.IntN(100000)))
			case arrow.FLOAT64:
				if rng.IntN(10) == 0 {
					b.Field(fi).AppendNull()
				} else {
					b.Field(fi).(*array.Float64Builder).Append(float64(rng.IntN(1_000_000)) / 100)
				}
			case arrow.TIMESTAMP:
				b.Field(fi).(*array.TimestampBuilder).Append(arrow.Timestamp(base + int64(i)*1000 + rng.Int64N(1000)))
			default:
				return nil, fmt.Errorf("makeBatchIPC: unsupported type %s", f.Type)
			}
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(sc), ipc.WithAllocator(mem))
	if err := w.Write(rec); err != nil {
		return nil, fmt.Errorf("write IPC: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("close IPC: %w", err)
	}
	return buf.Bytes(), nil
}

// schemaIPC is an Arrow IPC stream holding only a schema.
func schemaIPC(t testing.TB, sc *arrow.Schema) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(sc))
	if err := w.Close(); err != nil {
		t.Fatalf("close IPC: %v", err)
	}
	return buf.Bytes()
}

func batchFrame(t testing.TB, stream string, rows int, seed uint64) Frame {
	return Frame{Kind: FrameBatch, Stream: stream, Rows: int64(rows), Data: batchIPC(t, ordersSchema, rows, seed)}
}

// backend is one storage implementation the shared tests run against.
type backend struct {
	name string
	// fresh returns the URL of a new, empty log and the options to open it.
	fresh func(t *testing.T) (string, Options)
}

func localBackend() backend {
	return backend{name: "local", fresh: func(t *testing.T) (string, Options) {
		return "file://" + t.TempDir() + "/wal", Options{Owner: "local-test"}
	}}
}

func s3Backend() backend {
	return backend{name: "s3", fresh: func(t *testing.T) (string, Options) {
		return s3Log(t, versity.Get(t).NewBucket(t), time.Second)
	}}
}

func s3Log(t *testing.T, b *s3test.Bucket, ttl time.Duration) (string, Options) {
	return "s3://" + b.Name + "/pipelines/orders", Options{
		Owner:    "s3-test",
		LeaseTTL: ttl,
		S3: S3Options{
			Endpoint: b.Endpoint, Region: s3test.Region, PathStyle: true,
			AccessKeyID: b.AccessKey, SecretAccessKey: b.SecretKey,
		},
	}
}

func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range []backend{localBackend(), s3Backend()} {
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustOpen(t testing.TB, url string, opts Options) *Log {
	t.Helper()
	l, err := Open(ctxT(t), url, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func mustAcquire(t testing.TB, url string, opts Options) *Log {
	t.Helper()
	l := mustOpen(t, url, opts)
	if err := l.Acquire(ctxT(t)); err != nil {
		t.Fatalf("Acquire(%s): %v", url, err)
	}
	return l
}

func mustCommit(t testing.TB, l *Log, frames []Frame, ckpt string) CommitRecord {
	t.Helper()
	rec, err := l.Commit(ctxT(t), frames, []byte(ckpt))
	if err != nil {
		t.Fatalf("Commit(checkpoint %q): %v", ckpt, err)
	}
	return rec
}

func mustHead(t testing.TB, l *Log) Head {
	t.Helper()
	h, err := l.Head(ctxT(t))
	if err != nil {
		t.Fatalf("Head: %v", err)
	}
	return h
}

func mustEntries(t testing.TB, l *Log, after uint64) []CommitRecord {
	t.Helper()
	recs, err := l.Entries(ctxT(t), after)
	if err != nil {
		t.Fatalf("Entries(%d): %v", after, err)
	}
	return recs
}

func seqsOf(recs []CommitRecord) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Seq
	}
	return out
}

func names(t testing.TB, l *Log, dir string) []string {
	t.Helper()
	objs, err := l.st.list(ctxT(t), dir, "")
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.name)
	}
	return out
}

func framesEqual(a, b []Frame) bool {
	return slices.EqualFunc(a, b, func(x, y Frame) bool {
		return x.Kind == y.Kind && x.Stream == y.Stream && x.Rows == y.Rows && bytes.Equal(x.Data, y.Data)
	})
}

func wantErr(t testing.TB, err, sentinel error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", sentinel)
	}
	if sentinel != nil && !errors.Is(err, sentinel) {
		t.Fatalf("error %q does not wrap %v", err, sentinel)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not mention %q", err, p)
		}
	}
}

// The test binary doubles as a second writer process: with helperEnv set,
// TestMain opens the log at that URL, acquires it, commits
// WAL_TEST_HELPER_COMMITS entries (helperFrames(i), checkpoint "ckpt-i"),
// prints "ready <pid>" and holds the log until stdin closes.
const helperEnv = "WAL_TEST_HELPER_URL"

func helperFrames(i int) ([]Frame, error) {
	data, err := makeBatchIPC(ordersSchema, 20+i, uint64(1000+i))
	if err != nil {
		return nil, err
	}
	return []Frame{{Kind: FrameBatch, Stream: "public.orders", Rows: int64(20 + i), Data: data}}, nil
}

func writerHelper(url string) int {
	ctx := context.Background()
	opts := Options{Owner: "helper-process", LeaseTTL: time.Second}
	if ep := os.Getenv("WAL_TEST_S3_ENDPOINT"); ep != "" {
		opts.S3 = S3Options{Endpoint: ep, Region: s3test.Region, PathStyle: true,
			AccessKeyID: os.Getenv("WAL_TEST_S3_KEY"), SecretAccessKey: os.Getenv("WAL_TEST_S3_SECRET")}
	}
	if d := os.Getenv("WAL_TEST_HELPER_TTL"); d != "" {
		opts.LeaseTTL, _ = time.ParseDuration(d)
	}
	l, err := Open(ctx, url, opts)
	if err == nil {
		err = l.Acquire(ctx)
	}
	n, _ := strconv.Atoi(os.Getenv("WAL_TEST_HELPER_COMMITS"))
	for i := 1; err == nil && i <= n; i++ {
		var frames []Frame
		if frames, err = helperFrames(i); err == nil {
			_, err = l.Commit(ctx, frames, []byte(fmt.Sprintf("ckpt-%d", i)))
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("ready %d\n", os.Getpid())
	buf := make([]byte, 1)
	os.Stdin.Read(buf) // hold the log until the parent closes stdin
	if err := l.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startWriter runs writerHelper in a child process and waits until it is ready.
// stop closes its stdin (a clean exit); kill sends SIGKILL (a crash).
func startWriter(t *testing.T, url string, env ...string) (pid int, stop, kill func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+url), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if !strings.HasPrefix(line, "ready ") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("writer process not ready: %q %s", line, stderr.String())
	}
	var once sync.Once
	end := func(f func()) func() {
		return func() { once.Do(func() { f(); cmd.Wait() }) }
	}
	stop = end(func() { stdin.Close() })
	kill = end(func() { cmd.Process.Kill() })
	t.Cleanup(kill)
	return cmd.Process.Pid, stop, kill
}

func osGetpid() int                              { return os.Getpid() }
func osWriteFile(name string, data []byte) error { return os.WriteFile(name, data, 0o644) }

type atomicSeq struct{ v atomic.Uint64 }

func (a *atomicSeq) store(n uint64) { a.v.Store(n) }
func (a *atomicSeq) load() uint64   { return a.v.Load() }

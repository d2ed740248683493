package lakequery

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/engine/wal"
)

// batch is one Arrow IPC stream of one int64 column holding id.
func batch(t *testing.T, stream string, id int64) wal.Frame {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(id)
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(sc))
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return wal.Frame{Kind: wal.FrameBatch, Stream: stream, Rows: 1, Data: buf.Bytes()}
}

// TestWALTail: across statements the tail lists only new commit records, keeps decoded entries (a segment
// read once is not read again: removing its file behind the log's back changes no answer), drops what was
// reclaimed, gives each statement the entries committed before it, and starts over when the log is made
// again.
func TestWALTail(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url := "file://" + dir
	w, err := wal.Open(ctx, url, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	var recs []wal.CommitRecord
	commit := func(stream string) {
		rec, err := w.Commit(ctx, []wal.Frame{batch(t, stream, int64(len(recs)+1))}, []byte("ckpt"))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	reader := func() *wal.Log {
		l, err := wal.Open(ctx, url, wal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	read := func(tail *walTail) (walEntries, error) { return tail.read(ctx, reader(), "p", false) }
	mustRead := func(tail *walTail, want ...uint64) walEntries {
		t.Helper()
		got, err := read(tail)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.seqs, want) {
			t.Fatalf("seqs %v, want %v", got.seqs, want)
		}
		return got
	}
	for _, s := range []string{"a", "b", "a"} {
		commit(s)
	}
	tail := newWALTail(1 << 20)
	first := mustRead(tail, 1, 2, 3)
	if !slices.Equal(first.streams, []string{"a", "b"}) {
		t.Fatalf("streams %v", first.streams)
	}
	// Entry 2's segment goes away behind the log's back: the tail answers from what it decoded; a tail that
	// keeps nothing reads the segment again and fails, naming the entry.
	seg := filepath.Join(dir, recs[1].Segment)
	if err := os.Remove(seg); err != nil {
		t.Fatal(err)
	}
	again := mustRead(tail, 1, 2, 3)
	if !bytes.Equal(again.frames[1][0].Data, first.frames[1][0].Data) {
		t.Fatal("entry 2 changed")
	}
	if _, err := read(newWALTail(0)); err == nil || !strings.Contains(err.Error(), "pipeline p") {
		t.Fatalf("a tail keeping nothing read a removed segment: %v", err)
	}
	// A new entry: the next statement has it; the one before keeps what it had.
	commit("b")
	mustRead(tail, 1, 2, 3, 4)
	if len(first.seqs) != 3 {
		t.Fatalf("an earlier statement's entries changed: %v", first.seqs)
	}
	// Reclaimed entries leave the tail (and its bytes); a statement holding them still has their rows.
	if err := w.Reclaim(ctx, 2); err != nil {
		t.Fatal(err)
	}
	mustRead(tail, 3, 4)
	if len(tail.entries) != 2 || tail.bytes != int64(len(first.frames[2][0].Data)+len(batch(t, "b", 4).Data)) {
		t.Fatalf("after reclaim the tail holds %d entries, %d bytes", len(tail.entries), tail.bytes)
	}
	if len(first.frames[0]) != 1 || first.frames[0][0].Rows != 1 {
		t.Fatal("a reclaim took rows from a running statement")
	}
	// Over the limit: entries are listed but read again by each statement.
	small := newWALTail(1)
	mustRead(small, 3, 4)
	if small.bytes != 0 {
		t.Fatalf("a 1-byte tail keeps %d bytes", small.bytes)
	}
	mustRead(small, 3, 4)

	// The log removed and made again (seqs start over): nothing cached is used, whether its newest seq is
	// below the newest seen or has caught up with it.
	remake := func(streams ...string) {
		w.Close()
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if w, err = wal.Open(ctx, url, wal.Options{}); err != nil {
			t.Fatal(err)
		}
		if err := w.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		recs = nil
		for _, s := range streams {
			commit(s)
		}
	}
	remake("c")
	if got := mustRead(tail, 1); !slices.Equal(got.streams, []string{"c"}) {
		t.Fatalf("after the log was made again: streams %v", got.streams)
	}
	remake("d", "d")
	if got := mustRead(tail, 1, 2); !slices.Equal(got.streams, []string{"d"}) {
		t.Fatalf("after the log was made again up to the seq seen: streams %v", got.streams)
	}
}

// TestWALTailIncremental: for a query engine that keeps the entries it was sent, a statement carries only the
// entries above the newest one sent (their frames; the older ones are named, with their streams, not read),
// and a forget or the log made again sends everything under a new generation.
func TestWALTailIncremental(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	url := "file://" + dir
	w, err := wal.Open(ctx, url, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	var recs []wal.CommitRecord
	commit := func(stream string) {
		rec, err := w.Commit(ctx, []wal.Frame{batch(t, stream, int64(len(recs)+1))}, []byte("ckpt"))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	l, err := wal.Open(ctx, url, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// sent lists the seqs whose frames a statement carries.
	read := func(tail *walTail) (walEntries, []uint64) {
		t.Helper()
		got, err := tail.read(ctx, l, "p", true)
		if err != nil {
			t.Fatal(err)
		}
		var sent []uint64
		for i, f := range got.frames {
			if f != nil {
				sent = append(sent, got.seqs[i])
			}
		}
		return got, sent
	}
	commit("a")
	commit("b")
	tail := newWALTail(0) // keeps no frames: an entry sent before must not be read again either
	got, sent := read(tail)
	if !slices.Equal(sent, []uint64{1, 2}) || got.base != 0 || got.through != 2 {
		t.Fatalf("first statement: sent %v base %d through %d, want 1 and 2 from base 0 through 2", sent, got.base, got.through)
	}
	tail.markSent(got.gen, got.through)
	commit("c")
	// Entry 1's segment is gone: a statement that read it again would fail.
	if err := os.Remove(filepath.Join(dir, recs[0].Segment)); err != nil {
		t.Fatal(err)
	}
	got, sent = read(tail)
	if !slices.Equal(sent, []uint64{3}) || !slices.Equal(got.seqs, []uint64{1, 2, 3}) || got.base != 2 || got.through != 3 {
		t.Fatalf("second statement: sent %v of %v base %d through %d, want 3 of 1-3 from base 2 through 3", sent, got.seqs, got.base, got.through)
	}
	if !slices.Equal(got.streams, []string{"a", "b", "c"}) {
		t.Fatalf("streams %v: the plan needs those of the entries sent before too", got.streams)
	}
	gen := got.gen
	// The engine did not hold them (ErrStale): everything again, under a new generation.
	tail.markSent(got.gen, got.through)
	tail.forget()
	if err := w.Reclaim(ctx, 1); err != nil {
		t.Fatal(err)
	}
	got, sent = read(tail)
	if !slices.Equal(sent, []uint64{2, 3}) || got.base != 0 || got.gen == gen || got.floor != 1 {
		t.Fatalf("after forget: sent %v base %d gen %d (was %d) floor %d, want 2 and 3 from base 0 in a new generation, floor 1", sent, got.base, got.gen, gen, got.floor)
	}
	// A mark of the old generation does not count.
	tail.markSent(gen, 3)
	if _, sent = read(tail); !slices.Equal(sent, []uint64{2, 3}) {
		t.Fatalf("after a stale mark: sent %v, want 2 and 3", sent)
	}
}

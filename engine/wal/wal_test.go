package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCommitEntriesRead(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		url, opts := b.fresh(t)
		l := mustAcquire(t, url, opts)
		if h := mustHead(t, l); h.LastSeq != 0 || h.Entries != 0 || h.LastCheckpoint != nil || h.Epoch != 1 || h.Holder != opts.Owner {
			t.Fatalf("fresh head: %+v", h)
		}
		batches := [][]Frame{
			{{Kind: FrameSchema, Stream: "public.orders", Data: schemaIPC(t, ordersSchema)}, batchFrame(t, "public.orders", 100, 1)},
			{batchFrame(t, "public.orders", 50, 2), batchFrame(t, "public.customers", 7, 3)},
			nil, // a heartbeat: the source moved on without data
			{batchFrame(t, "public.orders", 1, 4)},
		}
		var committed []CommitRecord
		for i, frames := range batches {
			rec := mustCommit(t, l, frames, fmt.Sprintf("lsn/%d", i+1))
			if rec.Seq != uint64(i+1) || rec.Epoch != 1 || rec.Segment != segmentName(rec.Seq, 1) {
				t.Fatalf("commit %d: %+v", i, rec)
			}
			committed = append(committed, rec)
		}
		if r := committed[0]; r.Rows["public.orders"] != 100 || r.SchemaIDs["public.orders"] != SchemaID(ordersSchema) {
			t.Fatalf("first record rows/schema: %+v", r)
		}
		if r := committed[1]; r.Rows["public.orders"] != 50 || r.Rows["public.customers"] != 7 {
			t.Fatalf("second record rows: %v", r.Rows)
		}
		if r := committed[2]; r.Rows != nil || r.SchemaIDs != nil || r.Size == 0 {
			t.Fatalf("heartbeat record: %+v", r)
		}

		got := mustEntries(t, l, 0)
		if len(got) != len(committed) {
			t.Fatalf("Entries(0) = %v", seqsOf(got))
		}
		for i := range got {
			g, w := got[i], committed[i]
			if g.Seq != w.Seq || g.Segment != w.Segment || g.CRC32C != w.CRC32C || g.Size != w.Size ||
				!bytes.Equal(g.Checkpoint, w.Checkpoint) || g.Epoch != w.Epoch || !g.Time.Equal(w.Time) ||
				fmt.Sprint(g.Rows) != fmt.Sprint(w.Rows) || fmt.Sprint(g.SchemaIDs) != fmt.Sprint(w.SchemaIDs) {
				t.Fatalf("entry %d read back as %+v, committed %+v", i+1, g, w)
			}
			frames, err := l.ReadSegment(ctxT(t), g)
			if err != nil {
				t.Fatal(err)
			}
			if !framesEqual(frames, batches[i]) {
				t.Fatalf("entry %d frames differ", g.Seq)
			}
		}
		if got := seqsOf(mustEntries(t, l, 2)); !slices.Equal(got, []uint64{3, 4}) {
			t.Fatalf("Entries(2) = %v", got)
		}
		if got := mustEntries(t, l, 4); len(got) != 0 {
			t.Fatalf("Entries(4) = %v", seqsOf(got))
		}
		h := mustHead(t, l)
		var size int64
		for _, r := range committed {
			size += r.Size
		}
		if h.LastSeq != 4 || string(h.LastCheckpoint) != "lsn/4" || h.Entries != 4 || h.Bytes != size || h.ReclaimedThrough != 0 {
			t.Fatalf("head %+v, want last 4, checkpoint lsn/4, 4 entries, %d bytes", h, size)
		}
	})
}

func TestReadSegmentDamage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		url, opts := b.fresh(t)
		l := mustAcquire(t, url, opts)
		var recs []CommitRecord
		for i := range 4 {
			recs = append(recs, mustCommit(t, l, []Frame{batchFrame(t, "s", 500, uint64(i))}, fmt.Sprint(i)))
		}
		stored := func(rec CommitRecord) []byte {
			data, err := l.st.get(ctxT(t), rec.Segment)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
		tests := []struct {
			rec      CommitRecord
			damage   func(data []byte) []byte // nil: delete the segment
			sentinel error
			want     string
		}{
			{recs[0], func(d []byte) []byte { d[len(d)/2] ^= 0x01; return d }, ErrCorrupt,
				fmt.Sprintf("crc mismatch: want %d got ", recs[0].CRC32C)},
			{recs[1], func(d []byte) []byte { return d[:len(d)-1] }, ErrCorrupt,
				fmt.Sprintf("size mismatch: want %d got %d", recs[1].Size, recs[1].Size-1)},
			{recs[2], nil, ErrMissing, "not found"},
		}
		for _, tt := range tests {
			if tt.damage == nil {
				if err := l.st.remove(ctxT(t), tt.rec.Segment); err != nil {
					t.Fatal(err)
				}
			} else if err := l.st.put(ctxT(t), tt.rec.Segment, tt.damage(stored(tt.rec))); err != nil {
				t.Fatal(err)
			}
			_, err := l.ReadSegment(ctxT(t), tt.rec)
			prefix := fmt.Sprintf("wal entry %d: segment %s: ", tt.rec.Seq, l.st.url(tt.rec.Segment))
			wantErr(t, err, tt.sentinel, prefix+tt.want)
		}
		if _, err := l.ReadSegment(ctxT(t), recs[3]); err != nil {
			t.Fatalf("undamaged entry 4: %v", err)
		}
		forged := recs[3]
		forged.Segment = "segments/../../../etc/passwd"
		_, err := l.ReadSegment(ctxT(t), forged)
		wantErr(t, err, ErrCorrupt, "wal entry 4", "is not a segment name of this entry")

		// A damaged commit record is reported by Entries, naming it.
		if err := l.st.put(ctxT(t), commitName(4), []byte(`{"kind":"commit","crc32c":1,"body":{"seq":4}}`)); err != nil {
			t.Fatal(err)
		}
		_, err = l.Entries(ctxT(t), 0)
		wantErr(t, err, ErrCorrupt, "wal entry 4: commit record "+l.st.url(commitName(4)), "record crc mismatch")
	})
}

func TestGapIsAnError(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		url, opts := b.fresh(t)
		l := mustAcquire(t, url, opts)
		for i := range 4 {
			mustCommit(t, l, []Frame{batchFrame(t, "s", 3, uint64(i))}, fmt.Sprint(i))
		}
		if err := l.st.remove(ctxT(t), commitName(2)); err != nil {
			t.Fatal(err)
		}
		_, err := l.Entries(ctxT(t), 0)
		wantErr(t, err, nil, "entry 2 is missing", "entry 1 is followed by entry 3")
		if got := seqsOf(mustEntries(t, l, 2)); !slices.Equal(got, []uint64{3, 4}) {
			t.Fatalf("Entries(2) = %v", got)
		}
		if err := l.st.remove(ctxT(t), commitName(1)); err != nil {
			t.Fatal(err)
		}
		_, err = l.Entries(ctxT(t), 0)
		wantErr(t, err, nil, "entry 1 is missing", "the start is followed by entry 3")

		// A writer must not extend a log with a hole in it.
		l.Close()
		l2 := mustOpen(t, url, opts)
		wantErr(t, l2.Acquire(ctxT(t)), nil, "entry 1 is missing")
		if _, err := l2.Head(ctxT(t)); err == nil {
			t.Fatal("Head of a log with a gap succeeded")
		}
		// The failed Acquire released the lock.
		l3 := mustOpen(t, url, opts)
		wantErr(t, l3.Acquire(ctxT(t)), nil, "entry 1 is missing")
	})
}

func TestReclaim(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		url, opts := b.fresh(t)
		l := mustAcquire(t, url, opts)
		for i := 1; i <= 5; i++ {
			mustCommit(t, l, []Frame{batchFrame(t, "s", 10, uint64(i))}, fmt.Sprintf("ckpt-%d", i))
		}
		if err := l.Reclaim(ctxT(t), 3); err != nil {
			t.Fatal(err)
		}
		if got := seqsOf(mustEntries(t, l, 3)); !slices.Equal(got, []uint64{4, 5}) {
			t.Fatalf("Entries(3) after Reclaim(3) = %v", got)
		}
		_, err := l.Entries(ctxT(t), 1)
		wantErr(t, err, ErrReclaimed, "entries 2 through 3 were reclaimed")
		h := mustHead(t, l)
		if h.LastSeq != 5 || h.ReclaimedThrough != 3 || h.Entries != 2 || string(h.LastCheckpoint) != "ckpt-5" {
			t.Fatalf("head after Reclaim(3): %+v", h)
		}
		if err := l.Reclaim(ctxT(t), 2); err != nil { // behind: nothing to do
			t.Fatal(err)
		}
		wantErr(t, l.Reclaim(ctxT(t), 6), nil, "cannot reclaim through 6: the last entry is 5")

		if err := l.Reclaim(ctxT(t), 5); err != nil {
			t.Fatal(err)
		}
		for _, dir := range []string{segmentsDir, commitsDir} {
			if n := names(t, l, dir); len(n) != 0 {
				t.Fatalf("%s after reclaiming everything: %v", dir, n)
			}
		}
		if n := names(t, l, checkpointsDir); !slices.Equal(n, []string{checkpointName(5)}) {
			t.Fatalf("checkpoint records: %v", n)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}

		// A restart with an empty log still knows where it was.
		l2 := mustOpen(t, url, opts)
		h = mustHead(t, l2)
		if h.LastSeq != 5 || h.ReclaimedThrough != 5 || h.Entries != 0 || h.Bytes != 0 || string(h.LastCheckpoint) != "ckpt-5" {
			t.Fatalf("head of an emptied log: %+v", h)
		}
		if got := mustEntries(t, l2, 5); len(got) != 0 {
			t.Fatalf("Entries(5) = %v", seqsOf(got))
		}
		if err := l2.Acquire(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if rec := mustCommit(t, l2, []Frame{batchFrame(t, "s", 1, 6)}, "ckpt-6"); rec.Seq != 6 {
			t.Fatalf("first commit after emptying got seq %d, want 6", rec.Seq)
		}
	})
}

// TestCommitBesideReclaim: a Reclaim busy deleting (slow DELETEs on S3) does not hold up Commit, which writes
// only entries Reclaim does not touch.
func TestCommitBesideReclaim(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		url, opts := b.fresh(t)
		l := mustAcquire(t, url, opts)
		for i := 1; i <= 3; i++ {
			mustCommit(t, l, []Frame{batchFrame(t, "s", 10, uint64(i))}, fmt.Sprintf("ckpt-%d", i))
		}
		st := newHoldingStore(l.st, func(string) bool { return true })
		l.st = st
		reclaimed := make(chan error, 1)
		go func() { reclaimed <- l.Reclaim(ctxT(t), 2) }()
		select {
		case <-st.holding:
		case err := <-reclaimed:
			t.Fatalf("Reclaim returned before deleting anything: %v", err)
		case <-time.After(20 * time.Second):
			t.Fatal("Reclaim never started deleting")
		}
		committed := make(chan error, 1)
		go func() {
			_, err := l.Commit(ctxT(t), []Frame{batchFrame(t, "s", 10, 4)}, []byte("ckpt-4"))
			committed <- err
		}()
		select {
		case err := <-committed:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			close(st.release)
			t.Fatal("Commit waited for a Reclaim's deletes")
		}
		close(st.release)
		if err := <-reclaimed; err != nil {
			t.Fatal(err)
		}
		if got := seqsOf(mustEntries(t, l, 2)); !slices.Equal(got, []uint64{3, 4}) {
			t.Fatalf("Entries(2) = %v", got)
		}
	})
}

// holdingStore holds the removes of the objects hold names until release is closed (closing holding when the
// first starts), and reports every other object it removed on removed.
type holdingStore struct {
	store
	hold     func(name string) bool
	holding  chan struct{}
	release  chan struct{}
	removed  chan string
	holdOnce sync.Once
}

func newHoldingStore(st store, hold func(name string) bool) *holdingStore {
	return &holdingStore{store: st, hold: hold, holding: make(chan struct{}), release: make(chan struct{}), removed: make(chan string, 64)}
}

func (s *holdingStore) remove(ctx context.Context, name string) error {
	if s.hold(name) {
		s.holdOnce.Do(func() { close(s.holding) })
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return s.store.remove(ctx, name)
	}
	err := s.store.remove(ctx, name)
	s.removed <- name
	return err
}

// listHookStore runs before once, ahead of its first listing of the commit records.
type listHookStore struct {
	store
	once   sync.Once
	before func()
}

func (s *listHookStore) list(ctx context.Context, dir, startAfter string) ([]object, error) {
	if dir == commitsDir {
		s.once.Do(s.before)
	}
	return s.store.list(ctx, dir, startAfter)
}

// TestEntriesBesideReclaim: a reader (no lease, as `skippr serve`) lists the entries while the writer's
// Reclaim deletes them, in parallel and in no order: it has deleted entry 2's commit record and not yet entry
// 1's, so the listing finds 1 then 3. That hole is the Reclaim's, below its mark: ErrReclaimed, to look again
// from the new mark, not a lost entry. A hole above the mark is still ErrMissing naming the entry.
func TestEntriesBesideReclaim(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		url, opts := b.fresh(t)
		w := mustAcquire(t, url, opts)
		for i := 1; i <= 5; i++ {
			mustCommit(t, w, []Frame{batchFrame(t, "s", 10, uint64(i))}, fmt.Sprintf("ckpt-%d", i))
		}
		st := w.st
		r := mustOpen(t, url, opts)
		rst := r.st
		// reclaimDuring has the reader's next Entries list the commit records while Reclaim(upTo) holds the
		// delete of hold's commit record, after deleting wait's (0: none).
		reclaimDuring := func(upTo, hold, wait uint64) (release func() error) {
			hs := newHoldingStore(st, func(name string) bool { return name == commitName(hold) })
			w.st = hs
			reclaimed := make(chan error, 1)
			r.st = &listHookStore{store: rst, before: func() {
				// The reader has read the reclaim mark; the Reclaim starts now.
				go func() { reclaimed <- w.Reclaim(ctxT(t), upTo) }()
				<-hs.holding
				for wait != 0 {
					if name := <-hs.removed; name == commitName(wait) {
						break
					}
				}
			}}
			return func() error {
				close(hs.release)
				return <-reclaimed
			}
		}

		release := reclaimDuring(2, 1, 2)
		_, err := r.Entries(ctxT(t), 0)
		if rerr := release(); rerr != nil {
			t.Fatal(rerr)
		}
		wantErr(t, err, ErrReclaimed, "entries 1 through 2 were reclaimed while reading")
		if got := seqsOf(mustEntries(t, r, 2)); !slices.Equal(got, []uint64{3, 4, 5}) {
			t.Fatalf("Entries(2) after the Reclaim = %v", got)
		}

		// Entry 4 lost: the listing finds 3 then 5 while a Reclaim through 3 runs. The mark moved past the
		// reader's position but not past the hole: the hole is an error naming the entry, now and from the
		// new mark.
		if err := st.remove(ctxT(t), commitName(4)); err != nil {
			t.Fatal(err)
		}
		release = reclaimDuring(3, 3, 0)
		_, err = r.Entries(ctxT(t), 2)
		if rerr := release(); rerr != nil {
			t.Fatal(rerr)
		}
		wantErr(t, err, ErrMissing, "entry 4 is missing: entry 3 is followed by entry 5")
		r.st = rst
		_, err = r.Entries(ctxT(t), 3)
		wantErr(t, err, ErrMissing, "entry 4 is missing: the start is followed by entry 5")
	})
}

// eachListHookStore runs before ahead of each listing of the commit records.
type eachListHookStore struct {
	store
	before func()
}

func (s *eachListHookStore) list(ctx context.Context, dir, startAfter string) ([]object, error) {
	if dir == commitsDir {
		s.before()
	}
	return s.store.list(ctx, dir, startAfter)
}

// TestHeadBesideReclaims: Reclaims that leave a hole below their mark under every scan of a reader's Head (each
// has written its checkpoint record and deleted its last commit record, not the one before) make it look again;
// after scanAttempts spoiled scans it fails with ErrReclaimed, which says to look again, not ErrMissing.
func TestHeadBesideReclaims(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		url, opts := b.fresh(t)
		w := mustAcquire(t, url, opts)
		const last = 2*(2*scanAttempts-1) + 1
		for i := 1; i <= last; i++ {
			mustCommit(t, w, []Frame{batchFrame(t, "s", 1, uint64(i))}, fmt.Sprintf("ckpt-%d", i))
		}
		r := mustOpen(t, url, opts)
		var reclaims, spoil int // Reclaims run (through 2, 4, …); scans still to spoil
		r.st = &eachListHookStore{store: r.st, before: func() {
			if spoil == 0 {
				return
			}
			spoil--
			reclaims++
			upTo := uint64(2 * reclaims)
			body, err := sealRecord(kindCheckpoint, checkpointRecord{Seq: upTo, Checkpoint: []byte(fmt.Sprintf("ckpt-%d", upTo)), Epoch: 1})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.st.create(ctxT(t), checkpointName(upTo), body); err != nil {
				t.Fatal(err)
			}
			if err := w.st.remove(ctxT(t), commitName(upTo)); err != nil {
				t.Fatal(err)
			}
		}}
		spoil = scanAttempts - 1
		h, err := r.Head(ctxT(t))
		if err != nil {
			t.Fatalf("Head beside %d reclaims: %v", scanAttempts-1, err)
		}
		if want := uint64(2 * (scanAttempts - 1)); h.ReclaimedThrough != want || h.LastSeq != last || h.Entries != last-int(want) {
			t.Fatalf("Head beside %d reclaims: %+v, want reclaimed through %d, last %d", scanAttempts-1, h, want, last)
		}
		spoil = scanAttempts
		_, err = r.Head(ctxT(t))
		wantErr(t, err, ErrReclaimed, "reclaimed while reading")
		if h := mustHead(t, r); h.ReclaimedThrough != 2*(2*scanAttempts-1) || h.LastSeq != last || h.Entries != 1 {
			t.Fatalf("Head after the reclaims: %+v", h)
		}
	})
}

func TestInterruptedReclaimIsFinishedByAcquire(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		url, opts := b.fresh(t)
		l := mustAcquire(t, url, opts)
		for i := 1; i <= 4; i++ {
			mustCommit(t, l, []Frame{batchFrame(t, "s", 10, uint64(i))}, fmt.Sprintf("ckpt-%d", i))
		}
		// Crash right after Reclaim(2) wrote its checkpoint record.
		body, err := sealRecord(kindCheckpoint, checkpointRecord{Seq: 2, Checkpoint: []byte("ckpt-2"), Epoch: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.st.create(ctxT(t), checkpointName(2), body); err != nil {
			t.Fatal(err)
		}
		if got := seqsOf(mustEntries(t, l, 2)); !slices.Equal(got, []uint64{3, 4}) {
			t.Fatalf("Entries(2) = %v", got)
		}
		if h := mustHead(t, l); h.ReclaimedThrough != 2 || h.Entries != 2 || h.LastSeq != 4 {
			t.Fatalf("head: %+v", h)
		}
		l.Close()
		l2 := mustAcquire(t, url, opts)
		if n := names(t, l2, commitsDir); !slices.Equal(n, []string{commitName(3), commitName(4)}) {
			t.Fatalf("commit records after Acquire: %v", n)
		}
		if n := names(t, l2, segmentsDir); len(n) != 2 {
			t.Fatalf("segments after Acquire: %v", n)
		}
	})
}

func TestReopenContinues(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		url, opts := b.fresh(t)
		l := mustAcquire(t, url, opts)
		mustCommit(t, l, []Frame{batchFrame(t, "s", 10, 1)}, "a")
		mustCommit(t, l, []Frame{batchFrame(t, "s", 10, 2)}, "b")
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		_, err := l.Commit(ctxT(t), nil, nil)
		wantErr(t, err, ErrClosed)

		ro := mustOpen(t, url, opts)
		h := mustHead(t, ro)
		if h.LastSeq != 2 || string(h.LastCheckpoint) != "b" || h.Holder != "" || h.Epoch != 1 {
			t.Fatalf("read-only head after close: %+v", h)
		}
		_, err = ro.Commit(ctxT(t), nil, nil)
		wantErr(t, err, ErrReadOnly)
		wantErr(t, ro.Reclaim(ctxT(t), 1), ErrReadOnly)

		l2 := mustAcquire(t, url, opts)
		wantErr(t, l2.Acquire(ctxT(t)), nil, "already acquired")
		rec := mustCommit(t, l2, []Frame{batchFrame(t, "s", 10, 3)}, "c")
		if rec.Seq != 3 || rec.Epoch != 2 {
			t.Fatalf("commit after reopen: seq %d epoch %d, want 3 and 2", rec.Seq, rec.Epoch)
		}
		recs := mustEntries(t, ro, 0)
		if !slices.Equal(seqsOf(recs), []uint64{1, 2, 3}) || recs[0].Epoch != 1 || recs[2].Epoch != 2 {
			t.Fatalf("entries: %+v", recs)
		}
		for _, r := range recs {
			if _, err := ro.ReadSegment(ctxT(t), r); err != nil {
				t.Fatal(err)
			}
		}
		if h := mustHead(t, ro); h.Holder != opts.Owner || h.Epoch != 2 {
			t.Fatalf("head seen by a reader while a writer holds the log: %+v", h)
		}
	})
}

func TestOrphanSegments(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		url, opts := b.fresh(t)
		l := mustAcquire(t, url, opts)
		r1 := mustCommit(t, l, []Frame{batchFrame(t, "s", 10, 1)}, "a")
		r2 := mustCommit(t, l, []Frame{batchFrame(t, "s", 10, 2)}, "b")
		orphan, err := EncodeSegment([]Frame{batchFrame(t, "s", 10, 3)})
		if err != nil {
			t.Fatal(err)
		}
		// A crash between segment and commit record, and a segment a fenced
		// writer of an older epoch uploaded for a seq that was committed.
		crashed, fenced := segmentName(3, 1), segmentName(2, 0)
		for _, n := range []string{crashed, fenced} {
			if err := l.st.put(ctxT(t), n, orphan); err != nil {
				t.Fatal(err)
			}
		}
		if got := seqsOf(mustEntries(t, l, 0)); !slices.Equal(got, []uint64{1, 2}) {
			t.Fatalf("entries with orphans present: %v", got)
		}
		if h := mustHead(t, l); h.LastSeq != 2 || h.Bytes != r1.Size+r2.Size+int64(len(orphan)) {
			// The fenced writer's segment shares seq 2, so Head counts it until cleanup.
			t.Fatalf("head with orphans: %+v", h)
		}
		l.Close()
		l2 := mustAcquire(t, url, opts)
		if n := names(t, l2, segmentsDir); !slices.Equal(n, []string{r1.Segment, r2.Segment}) {
			t.Fatalf("segments after Acquire: %v", n)
		}
		if h := mustHead(t, l2); h.Bytes != r1.Size+r2.Size {
			t.Fatalf("head after cleanup: %+v", h)
		}
		rec := mustCommit(t, l2, []Frame{batchFrame(t, "s", 10, 4)}, "c")
		if rec.Seq != 3 {
			t.Fatalf("seq %d", rec.Seq)
		}
		for _, r := range mustEntries(t, l2, 0) {
			if _, err := l2.ReadSegment(ctxT(t), r); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestSecondWriterRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		url, opts := b.fresh(t)
		l1 := mustAcquire(t, url, opts)
		mustCommit(t, l1, []Frame{batchFrame(t, "s", 1, 1)}, "a")

		opts2 := opts
		opts2.Owner = "second-writer"
		l2 := mustOpen(t, url, opts2)
		err := l2.Acquire(ctxT(t))
		wantErr(t, err, ErrLocked, "held by "+opts.Owner, "epoch 1")
		if b.name == "s3" {
			wantErr(t, err, ErrLocked, "until 20")
		} else {
			wantErr(t, err, ErrLocked, fmt.Sprintf("pid %d", osGetpid()), "until that process exits")
		}
		if _, err := l2.Commit(ctxT(t), nil, nil); !errors.Is(err, ErrReadOnly) {
			t.Fatalf("refused writer's Commit: %v", err)
		}
		// The refused Log still reads.
		if got := mustEntries(t, l2, 0); len(got) != 1 {
			t.Fatalf("entries: %v", seqsOf(got))
		}
		if err := l1.Close(); err != nil {
			t.Fatal(err)
		}
		if err := l2.Acquire(ctxT(t)); err != nil {
			t.Fatalf("Acquire after the first writer closed: %v", err)
		}
		if rec := mustCommit(t, l2, []Frame{batchFrame(t, "s", 1, 2)}, "b"); rec.Seq != 2 || rec.Epoch != 2 {
			t.Fatalf("second writer's commit: %+v", rec)
		}
		if h := mustHead(t, l2); h.Holder != "second-writer" || h.Epoch != 2 {
			t.Fatalf("head: %+v", h)
		}
	})
}

func TestCommitRejectsBadInput(t *testing.T) {
	url, opts := localBackend().fresh(t)
	l := mustAcquire(t, url, opts)
	_, err := l.Commit(ctxT(t), []Frame{batchFrame(t, "s", 1, 1), {Kind: FrameBatch, Stream: "t", Rows: 1, Data: []byte("garbage")}}, nil)
	wantErr(t, err, nil, "wal commit 1: frame 1 (stream \"t\", batch): not an Arrow IPC stream")
	_, err = l.Commit(ctxT(t), []Frame{{Kind: FrameSchema, Stream: "t", Rows: 2, Data: schemaIPC(t, ordersSchema)}}, nil)
	wantErr(t, err, nil, "wal commit 1: frame 0 (stream \"t\"): schema frame with 2 rows")
	// Rejected input changes nothing.
	if rec := mustCommit(t, l, []Frame{batchFrame(t, "s", 1, 1)}, "x"); rec.Seq != 1 {
		t.Fatalf("seq %d", rec.Seq)
	}
	if n := names(t, l, segmentsDir); len(n) != 1 {
		t.Fatalf("segments: %v", n)
	}
}

func TestOpenRejectsBadURLs(t *testing.T) {
	file := t.TempDir() + "/plain-file"
	if err := osWriteFile(file, []byte("x")); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ url, want string }{
		{"file://relative/dir", "not host \"relative\""},
		{"file:relative", "want an absolute path"},
		{"file://" + file, "is not a directory"},
		{"s3:///prefix", "missing bucket"},
		{"gs://bucket/x", "unsupported scheme \"gs\""},
		{"file:///tmp/x?y=1", "query and fragment are not allowed"},
		{"::", "missing protocol scheme"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			_, err := Open(ctxT(t), tt.url, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open(%q) = %v, want an error mentioning %q", tt.url, err, tt.want)
			}
		})
	}
}

// The pipeline's shape: the writer commits and reclaims what the destination
// applied while an apply loop tails Entries and reads segments.
func TestApplyLoopBesideWriter(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		url, opts := b.fresh(t)
		w := mustAcquire(t, url, opts)
		r := mustOpen(t, url, opts)
		const total = 25
		frames := make([][]Frame, total+1)
		for i := 1; i <= total; i++ {
			frames[i] = []Frame{batchFrame(t, "s", i, uint64(i))}
		}
		var applied atomicSeq
		done := make(chan error, 1)
		go func() {
			var last uint64
			for last < total {
				recs, err := r.Entries(ctxT(t), last)
				if err != nil {
					done <- err
					return
				}
				for _, rec := range recs {
					got, err := r.ReadSegment(ctxT(t), rec)
					if err != nil {
						done <- err
						return
					}
					if rec.Seq != last+1 || !framesEqual(got, frames[rec.Seq]) || string(rec.Checkpoint) != fmt.Sprint(rec.Seq) {
						done <- fmt.Errorf("entry %d (after %d) differs from what was committed", rec.Seq, last)
						return
					}
					last = rec.Seq
					applied.store(last)
				}
			}
			done <- nil
		}()
		for i := 1; i <= total; i++ {
			mustCommit(t, w, frames[i], fmt.Sprint(i))
			if a := applied.load(); a > 0 && i%5 == 0 {
				if err := w.Reclaim(ctxT(t), a); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := w.Reclaim(ctxT(t), total); err != nil {
			t.Fatal(err)
		}
		if h := mustHead(t, r); h.LastSeq != total || h.Entries != 0 || string(h.LastCheckpoint) != fmt.Sprint(total) {
			t.Fatalf("head: %+v", h)
		}
	})
}

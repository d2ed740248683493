package lakequery

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/skippr-dev/skippr/engine/wal"
)

// reclaiming is a reader of a real log before whose listing a writer commits one more entry and reclaims the
// log through it, as a sync beside a statement does, the first n times.
type reclaiming struct {
	walReader
	t *testing.T
	w *wal.Log
	n int
}

func (r *reclaiming) Entries(ctx context.Context, after uint64) ([]wal.CommitRecord, error) {
	if r.n > 0 {
		r.n--
		rec, err := r.w.Commit(ctx, []wal.Frame{batch(r.t, "s", 1)}, []byte("ckpt"))
		if err != nil {
			r.t.Fatal(err)
		}
		if err := r.w.Reclaim(ctx, rec.Seq); err != nil {
			r.t.Fatal(err)
		}
	}
	return r.walReader.Entries(ctx, after)
}

// TestWALTailReclaimedWhileListing: a reclaim between a statement's Head and its listing makes it look again;
// when every look of the statement meets a new reclaim, it fails with ErrRetry (skippr serve: Unavailable,
// which clients retry) and wal.ErrReclaimed, never with a listing it did not finish.
func TestWALTailReclaimedWhileListing(t *testing.T) {
	for _, tc := range []struct {
		reclaims int
		retry    bool
	}{
		{reclaims: 1},
		{reclaims: tailAttempts - 1},
		{reclaims: tailAttempts, retry: true},
	} {
		ctx := context.Background()
		url := "file://" + t.TempDir()
		w, err := wal.Open(ctx, url, wal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Commit(ctx, []wal.Frame{batch(t, "s", 1)}, []byte("ckpt")); err != nil {
			t.Fatal(err)
		}
		r, err := wal.Open(ctx, url, wal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := newWALTail(0).read(ctx, &reclaiming{walReader: r, t: t, w: w, n: tc.reclaims}, "p", false)
		switch {
		case tc.retry && (!errors.Is(err, ErrRetry) || !errors.Is(err, wal.ErrReclaimed)):
			t.Errorf("%d reclaims: %v, want ErrRetry and wal.ErrReclaimed", tc.reclaims, err)
		case !tc.retry && err != nil:
			t.Errorf("%d reclaims: %v", tc.reclaims, err)
		case !tc.retry && len(got.seqs) != 0:
			t.Errorf("%d reclaims: entries %v listed, but every entry was reclaimed", tc.reclaims, got.seqs)
		}
		r.Close()
		w.Close()
	}
}

// reclaimingHead is a reader whose Head met a reclaim under every one of its scans.
type reclaimingHead struct{ walReader }

func (reclaimingHead) Head(context.Context) (wal.Head, error) {
	return wal.Head{}, fmt.Errorf("wal x: entries through 9 were reclaimed while reading: %w", wal.ErrReclaimed)
}

// TestWALTailHeadReclaimed: a Head that Reclaims kept spoiling (wal.ErrReclaimed) fails the statement with
// ErrRetry, not as an internal error.
func TestWALTailHeadReclaimed(t *testing.T) {
	_, err := newWALTail(0).read(context.Background(), reclaimingHead{}, "p", false)
	if !errors.Is(err, ErrRetry) || !errors.Is(err, wal.ErrReclaimed) {
		t.Fatalf("%v, want ErrRetry and wal.ErrReclaimed", err)
	}
}

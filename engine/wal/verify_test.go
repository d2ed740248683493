package wal

import (
	"fmt"
	"strings"
	"testing"
)

// Verify reports every live entry, and a damaged or missing segment as bad, naming it, without failing.
func TestVerify(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		url, opts := b.fresh(t)
		l := mustAcquire(t, url, opts)
		var recs []CommitRecord
		for i := range 4 {
			recs = append(recs, mustCommit(t, l, []Frame{batchFrame(t, "s", 200, uint64(i))}, fmt.Sprint(i)))
		}
		rep, err := Verify(ctxT(t), l)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Bad != 0 || len(rep.Entries) != 4 || rep.LastSeq != 4 || rep.URL != l.URL() {
			t.Fatalf("intact log: %d bad, %d entries, last %d, url %s", rep.Bad, len(rep.Entries), rep.LastSeq, rep.URL)
		}
		data, err := l.st.get(ctxT(t), recs[1].Segment)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0x01
		if err := l.st.put(ctxT(t), recs[1].Segment, data); err != nil {
			t.Fatal(err)
		}
		if err := l.st.remove(ctxT(t), recs[3].Segment); err != nil {
			t.Fatal(err)
		}
		rep, err = Verify(ctxT(t), l)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Bad != 2 {
			t.Fatalf("%d bad entries, want 2: %+v", rep.Bad, rep.Entries)
		}
		for i, e := range rep.Entries {
			wantBad := i == 1 || i == 3
			if e.OK == wantBad || e.Seq != recs[i].Seq || e.Rows["s"] != 200 {
				t.Errorf("entry %d: ok %v (want %v), seq %d, rows %v", i, e.OK, !wantBad, e.Seq, e.Rows)
			}
			if wantBad && !strings.Contains(e.Error, recs[i].Segment) {
				t.Errorf("entry %d: error %q does not name segment %s", i, e.Error, recs[i].Segment)
			}
		}
	})
}

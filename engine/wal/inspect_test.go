package wal

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Inspect refuses what is not a log before opening anything: a URL of another scheme, a missing directory.
func TestInspectRefuses(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nothing")
	for _, tc := range []struct {
		url  string
		kind error
		msg  string
	}{
		{"http://example.com/wal", ErrInspectURL, `"http://example.com/wal" is not a file:///abs/dir or s3://bucket/prefix URL`},
		{"/abs/dir", ErrInspectURL, `"/abs/dir" is not a file:///abs/dir or s3://bucket/prefix URL`},
		{"file://" + missing, ErrNoLog, "no WAL at file://" + missing + ": " + missing + " does not exist"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, err := Inspect(ctxT(t), tc.url, Options{})
			if !errors.Is(err, tc.kind) || err.Error() != tc.msg {
				t.Fatalf("Inspect(%s) = %v, want %q matching %v", tc.url, err, tc.msg, tc.kind)
			}
		})
	}
}

// Inspect of a local log reports its entries without taking the lease, and a damaged one names the entry.
func TestInspectLocal(t *testing.T) {
	url, opts := localBackend().fresh(t)
	l := mustAcquire(t, url, opts)
	var recs []CommitRecord
	for i := range 3 {
		recs = append(recs, mustCommit(t, l, []Frame{batchFrame(t, "s", 10, uint64(i))}, fmt.Sprint(i)))
	}
	rep, err := Inspect(ctxT(t), url, Options{Owner: "inspector"})
	if err != nil || rep.Bad != 0 || len(rep.Entries) != 3 || rep.Err() != nil {
		t.Fatalf("intact: %v, %+v", err, rep)
	}
	if err := l.st.remove(ctxT(t), recs[1].Segment); err != nil {
		t.Fatal(err)
	}
	rep, err = Inspect(ctxT(t), url, Options{Owner: "inspector"})
	if err != nil || rep.Bad != 1 {
		t.Fatalf("damaged: %v, %d bad", err, rep.Bad)
	}
	if e := rep.Err(); e == nil || !strings.Contains(e.Error(), "1 of 3 entries failed verification") || !strings.Contains(e.Error(), recs[1].Segment) {
		t.Fatalf("Err() = %v, want the bad entry's segment %s", e, recs[1].Segment)
	}
}

// WriteText prints the head and one row per entry; checkpoints as text when printable, else hex.
func TestReportWriteText(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)
	for _, tc := range []struct {
		name string
		rep  Report
		want string
	}{
		{"empty", Report{URL: "file:///w"},
			"wal file:///w\nlast seq 0, reclaimed through 0, 0 entries, 0 bytes, epoch 0, writer none\nsource checkpoint (none)\nno entries\n"},
		{"entries", Report{URL: "s3://b/p", LastSeq: 2, ReclaimedThrough: 0, Bytes: 30, Epoch: 3, Holder: "h:1", LastCheckpoint: []byte("lsn 5"), Bad: 1,
			Entries: []EntryReport{
				{Seq: 1, Segment: "segments/1", Size: 30, Rows: map[string]int64{"b": 2, "a": 1}, Epoch: 3, Time: at, OK: true},
				{Seq: 2, Epoch: 3, Time: at, Fence: true},
			}},
			"wal s3://b/p\nlast seq 2, reclaimed through 0, 2 entries, 30 bytes, epoch 3, writer h:1\nsource checkpoint \"lsn 5\"\n\n" +
				"SEQ  SEGMENT     SIZE  ROWS     EPOCH  TIME                      CHECKSUM\n" +
				"1    segments/1  30    a=1,b=2  3      2026-01-02T03:04:05.006Z  ok\n" +
				"2    (fence)     0     -        3      2026-01-02T03:04:05.006Z  BAD\n"},
		{"binary checkpoint", Report{URL: "u", LastCheckpoint: []byte{0, 1, 0xff}},
			"wal u\nlast seq 0, reclaimed through 0, 0 entries, 0 bytes, epoch 0, writer none\nsource checkpoint 0x0001ff\nno entries\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := tc.rep.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Fatalf("got:\n%s\nwant:\n%s", b.String(), tc.want)
			}
		})
	}
}

package main

import (
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// TestCommittedAt: a row streamed from the binary log carries its event's time, the server's clock in
// seconds, in _skippr_committed_at; a snapshot row carries NULL. The server runs on this machine, so the time
// lies between the test's clock before the write (floored to the second) and after it.
func TestCommittedAt(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	db.Exec(t, `CREATE TABLE c (id int PRIMARY KEY, v int); INSERT INTO c VALUES (1, 1)`)
	r := startReading(t, startPlugin(t), settings(db, map[string]any{"tables": []string{"c"}}), nil)
	type seen struct {
		at    time.Time
		known bool
	}
	got := map[int32][]seen{} // every change of each id, in order
	collect := func(until func() bool) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for !until() {
			ch, err := r.Next(time.Until(deadline))
			if err != nil {
				t.Fatalf("read: %v (rows so far %v)", err, got)
			}
			for _, it := range ch.Items {
				if it.Batch == nil {
					continue
				}
				recs, _, err := protocol.DecodeRecords(memory.DefaultAllocator, it.Batch.IPC)
				if err != nil {
					t.Fatal(err)
				}
				for _, rec := range recs {
					times, err := change.Committed(rec)
					if err != nil || times == nil {
						t.Fatalf("batch of %s has no usable %s column (%v): %v", it.Batch.Stream, change.CommittedColumn, err, rec.Schema())
					}
					ids := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.Int32)
					for i := range int(rec.NumRows()) {
						at, ok := change.CommittedAt(times, i)
						got[ids.Value(i)] = append(got[ids.Value(i)], seen{at, ok})
					}
					rec.Release()
				}
			}
		}
	}
	collect(func() bool { return len(got[1]) == 1 })
	if s := got[1][0]; s.known {
		t.Errorf("snapshot row 1: %s = %v, want NULL", change.CommittedColumn, s.at)
	}
	before := time.Now().Truncate(time.Second)
	db.Exec(t, `INSERT INTO c VALUES (2, 2)`)
	db.Exec(t, `UPDATE c SET v = 10 WHERE id = 1`)
	after := time.Now()
	collect(func() bool { return len(got[2]) == 1 && len(got[1]) == 2 })
	for _, id := range []int32{1, 2} {
		if s := got[id][len(got[id])-1]; !s.known || s.at.Before(before) || s.at.After(after) || s.at.Nanosecond() != 0 {
			t.Errorf("streamed row %d: %s = %v, want the event's time in whole seconds, between %v and %v", id, change.CommittedColumn, s.at, before, after)
		}
	}
}

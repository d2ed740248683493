package main

import (
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugins/mysql/source"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// TestMillionRowTransaction streams one transaction of 1M rows (≈ 130 MB of values) and checks it is never
// held whole: batches of batch_size rows arrive before its end, no checkpoint falls inside it, every row
// arrives, and the plugin's peak RSS stays under 100 MiB.
func TestMillionRowTransaction(t *testing.T) {
	const rows, batch = 1_000_000, 10_000
	db := mysqltest.NewDB(t)
	db.Exec(t, `CREATE TABLE big (id bigint PRIMARY KEY, pad varchar(200))`)
	src := startPlugin(t)
	r := startReading(t, src, settings(db, map[string]any{"tables": []string{"big"}, "batch_size": batch}), nil)
	catchUp(t, r, newState(), db)
	db.Exec(t, `INSERT INTO big SELECT seq, repeat(md5(seq), 4) FROM seq_1_to_1000000`)

	var got, batches int64
	deadline := time.After(5 * time.Minute)
	for got < rows {
		select {
		case m := <-r.Messages():
			switch {
			case m.Batch != nil:
				if m.Batch.Rows > batch {
					t.Fatalf("a batch of %d rows, batch_size is %d", m.Batch.Rows, batch)
				}
				got += m.Batch.Rows
				batches++
			case m.Checkpoint != nil && got > 0:
				t.Fatalf("a checkpoint after %d of the transaction's %d rows", got, rows)
			}
		case err := <-r.Errors():
			t.Fatalf("read: %v", err)
		case <-deadline:
			t.Fatalf("only %d of %d rows within 5 minutes", got, rows)
		}
	}
	c := r.MustNext(time.Minute)
	if c.Rows != 0 || position(t, c.Checkpoint.Position).Phase != source.PhaseStream {
		t.Fatalf("after the last batch: %d more rows; want the transaction's checkpoint", c.Rows)
	}
	if batches < rows/batch {
		t.Errorf("%d batches for %d rows", batches, rows)
	}
	hwm, err := conformance.PeakRSS(src.Pid())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rows in %d batches; plugin peak RSS %d MiB", got, batches, hwm>>20)
	if hwm > 100<<20 {
		t.Errorf("plugin peak RSS %d MiB: the transaction seems to be held in memory", hwm>>20)
	}
}

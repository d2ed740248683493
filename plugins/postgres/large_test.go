package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestMillionRowTransaction: one transaction of a million rows arrives in batches of batch_size with no
// checkpoint inside it, and the plugin's memory stays far below the transaction's size.
func TestMillionRowTransaction(t *testing.T) {
	t.Parallel()
	const rows, batch = 1_000_000, 10_000
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE big (id bigint PRIMARY KEY, pad text); ALTER TABLE big REPLICA IDENTITY FULL`)
	src := startPlugin(t)
	r := startReading(t, src, settings(db, map[string]any{"tables": []string{"big"}, "slot": slot(db), "snapshot": false, "batch_size": batch}), nil)
	r.mustNext(time.Minute) // the slot exists
	// 1M rows × ~120 bytes of text: about 120 MB of values if one transaction were held in memory.
	db.Exec(t, `INSERT INTO big SELECT g, repeat(md5(g::text), 4) FROM generate_series(1, `+strconv.Itoa(rows)+`) g`)

	var got, batches int64
	deadline := time.After(3 * time.Minute)
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
			t.Fatalf("only %d of %d rows within 3 minutes", got, rows)
		}
	}
	c := r.mustNext(time.Minute)
	if c.rows != 0 || c.cp.Idle {
		t.Fatalf("after the last batch: %d more rows, idle %v; want the transaction's checkpoint", c.rows, c.cp.Idle)
	}
	if batches < rows/batch {
		t.Errorf("%d batches for %d rows", batches, rows)
	}
	hwm, err := conformance.PeakRSS(src.Pid())
	if err != nil {
		t.Fatal(err)
	}
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", src.Pid()))
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	t.Logf("%d rows in %d batches; plugin peak RSS %d MB, CPU user %s sys %s (ticks)", got, batches, hwm>>20, f[11], f[12])
	if hwm > 100<<20 {
		t.Errorf("plugin peak RSS %d MB: the transaction seems to be held in memory", hwm>>20)
	}
}

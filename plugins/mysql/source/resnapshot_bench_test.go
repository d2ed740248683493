package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// counter is an Emitter that counts rows and end marks, and keeps the last checkpoint.
type counter struct {
	mu      sync.Mutex
	rows    int64
	ends    int
	last    []byte
	idle    bool
	changed chan struct{}
}

func (c *counter) Batch(_ context.Context, _ string, rec arrow.RecordBatch) error {
	c.mu.Lock()
	c.rows += rec.NumRows()
	c.mu.Unlock()
	return nil
}
func (c *counter) SchemaChange(context.Context, serve.Stream) error { return nil }
func (c *counter) Truncate(context.Context, string) error           { return nil }
func (c *counter) Resnapshot(_ context.Context, _ string, end bool) error {
	c.mu.Lock()
	if end {
		c.ends++
	}
	c.mu.Unlock()
	return nil
}
func (c *counter) Checkpoint(_ context.Context, cp serve.Checkpoint) error {
	c.mu.Lock()
	c.last, c.idle = cp.Position, cp.Idle
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
	return nil
}

// readTill runs a Read until done holds at a checkpoint.
func readTill(b *testing.B, s *Source, req serve.ReadRequest, c *counter, done func() bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- s.Read(ctx, req, c) }()
	for {
		select {
		case err := <-errc:
			b.Fatalf("read ended: %v", err)
		case <-c.changed:
			c.mu.Lock()
			ok := done()
			c.mu.Unlock()
			if ok {
				cancel()
				if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
					b.Fatal(err)
				}
				return
			}
		}
	}
}

// BenchmarkResnapshot copies a 200000-row table (bigint key, varchar, decimal, datetime) again while
// streaming, chunk by chunk through the watermark table, beside the same run's initial snapshot of the table
// (one streamed SELECT, no marks) as the baseline; rows/s is what a destination receives, from the Read's start
// to the snapshot's last checkpoint or the re-snapshot's end mark.
//
//	go test -run '^$' -bench BenchmarkResnapshot -benchtime 3x ./source/
func BenchmarkResnapshot(b *testing.B) {
	const n = 200_000
	db := mysqltest.NewDB(b)
	db.Exec(b, `CREATE TABLE o (id bigint PRIMARY KEY, name varchar(100) NOT NULL, amount decimal(12,2), at datetime(6))`)
	db.Exec(b, fmt.Sprintf(`INSERT INTO o SELECT seq, concat('name-', seq), seq * 1.25, '2026-01-01' + INTERVAL seq SECOND FROM seq_1_to_%d`, n))
	stream := db.Name + ".o"
	for _, chunk := range []int{1000, 10000} {
		raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "root", "database": db.Name,
			"tables": []string{"o"}, "batch_size": chunk, "snapshot_parallel": 1})
		b.Run(fmt.Sprintf("snapshot/chunk=%d", chunk), func(b *testing.B) {
			var rows int64
			for b.Loop() {
				c := &counter{changed: make(chan struct{}, 1)}
				readTill(b, New(), serve.ReadRequest{Settings: raw}, c, func() bool {
					p, err := DecodePosition(c.last)
					return err == nil && p.Phase == PhaseStream // the snapshot's last checkpoint, before any heartbeat
				})
				if c.rows != n {
					b.Fatalf("snapshot sent %d rows, want %d", c.rows, n)
				}
				rows += c.rows
			}
			b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
		})
		b.Run(fmt.Sprintf("resnapshot/chunk=%d", chunk), func(b *testing.B) {
			s := New()
			c := &counter{changed: make(chan struct{}, 1)}
			readTill(b, s, serve.ReadRequest{Settings: raw}, c, func() bool { return c.idle })
			from := c.last
			b.ResetTimer()
			var rows int64
			for b.Loop() {
				c := &counter{changed: make(chan struct{}, 1)}
				readTill(b, s, serve.ReadRequest{Settings: raw, Checkpoint: from, Resnapshot: []string{stream}}, c, func() bool { return c.ends == 1 })
				if c.rows != n {
					b.Fatalf("re-snapshot sent %d rows, want %d", c.rows, n)
				}
				rows += c.rows
			}
			b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

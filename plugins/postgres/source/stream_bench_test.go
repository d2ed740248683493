package source

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/jackc/pglogrepl"

	"github.com/skippr-dev/skippr/plugin-sdk/mempool"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/postgres/config"
	"github.com/skippr-dev/skippr/plugins/postgres/typemap"
)

// discard is an Emitter that drops what it is given: the benchmark measures the source's side.
type discard struct{ rows int64 }

func (d *discard) Batch(_ context.Context, _ string, rec arrow.RecordBatch) error {
	d.rows += rec.NumRows()
	return nil
}
func (*discard) SchemaChange(context.Context, serve.Stream) error   { return nil }
func (*discard) Truncate(context.Context, string) error             { return nil }
func (*discard) Resnapshot(context.Context, string, bool) error     { return nil }
func (*discard) Checkpoint(context.Context, serve.Checkpoint) error { return nil }

// BenchmarkStreamTransaction is the plugin's work per streamed transaction, after the socket: decoding the
// pgoutput messages of a 200-row transaction of the bench's table (bench/postgres.go: bigint key, text,
// numeric(12,2), timestamptz, jsonb, bool), building its batch and its checkpoint.
func BenchmarkStreamTransaction(b *testing.B) {
	const txRows = 200
	cols := []column{
		{Name: "id", Type: &typemap.Type{Name: "bigint", Kind: typemap.KindInt64}},
		{Name: "name", Type: &typemap.Type{Name: "text", Kind: typemap.KindString}},
		{Name: "amount", Type: &typemap.Type{Name: "numeric(12,2)", Kind: typemap.KindDecimal, Precision: 12, Scale: 2}},
		{Name: "at", Type: &typemap.Type{Name: "timestamp with time zone", Kind: typemap.KindTimestampTZ}},
		{Name: "doc", Type: &typemap.Type{Name: "jsonb", Kind: typemap.KindString}},
		{Name: "flag", Type: &typemap.Type{Name: "boolean", Kind: typemap.KindBool}},
	}
	rel := &relation{id: 16384, stream: "public.strm", table: &table{}, cols: cols, key: []string{"id"}, keyIdx: []int{0}}
	rel.schema = schema(cols, rel.key, values.Fail, false)
	out := &discard{}
	r := &reader{cfg: config.Settings{Slot: "bench", BatchSize: config.DefaultBatchSize, Policy: values.Fail}, st: newSlotState(), out: out,
		mem: mempool.New(), tables: map[string]*table{}, announced: map[string]string{}}
	r.values = values.NewHandler(r.cfg.Policy, nil)
	p := &processor{r: r, rels: map[uint32]*relation{rel.id: rel}}
	p.rs = newResnapper(p, nil)
	defer p.release()

	// One transaction's messages as the server sends them.
	lsn := pglogrepl.LSN(0x16B3748)
	var msgs [][]byte
	var starts []pglogrepl.LSN
	add := func(m []byte) { msgs, starts = append(msgs, m), append(starts, lsn); lsn += pglogrepl.LSN(len(m)) }
	add(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64([]byte{'B'}, 0), 0), 7))
	for g := 1; g <= txRows; g++ {
		at := time.Date(2026, 12, 4, 7, 41, 0, g*1000, time.UTC).Format("2006-01-02 15:04:05.999999-07")
		add(rowMessage('I', rel.id, []byte{'N'}, tupleBytes(str(strconv.Itoa(g)), str("name-"+strconv.Itoa(g)), str(fmt.Sprintf("%d.%02d", g/100, g%100)),
			str(at), str(fmt.Sprintf(`{"k": %d, "tag": "bench"}`, g%100)), str("t"))))
	}
	commit := []byte{'C', 0}
	commit = binary.BigEndian.AppendUint64(commit, uint64(lsn))
	commit = binary.BigEndian.AppendUint64(commit, uint64(lsn)+40)
	commit = binary.BigEndian.AppendUint64(commit, 0)
	add(commit)

	ctx := context.Background()
	recv := make([]byte, 0, 1<<10) // the receive buffer, reused by every read
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for i, m := range msgs {
			recv = append(recv[:0], m...)
			lm, err := parseMessage(recv)
			if err != nil {
				b.Fatal(err)
			}
			if err := p.handle(ctx, item{walStart: starts[i], msg: lm}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	if out.rows != int64(b.N)*txRows {
		b.Fatalf("%d rows emitted, want %d", out.rows, int64(b.N)*txRows)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(int64(b.N)*txRows), "ns/row")
}

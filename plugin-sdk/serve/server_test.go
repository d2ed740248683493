package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// plainDest implements Destination only: it must keep getting every item at once.
type plainDest struct {
	got []string // "stream:rows" or "stream:schema"
}

func (d *plainDest) Spec() Spec                                   { return Spec{Name: "plain", Kind: KindDestination} }
func (d *plainDest) Check(context.Context, json.RawMessage) error { return nil }
func (d *plainDest) Capabilities(context.Context, json.RawMessage) (Capabilities, error) {
	return Capabilities{}, nil
}
func (d *plainDest) LastApplied(context.Context, json.RawMessage, string) (Applied, error) {
	return Applied{}, nil
}

func (d *plainDest) Apply(_ context.Context, req ApplyRequest) (ApplyResult, error) {
	var rows int64
	for _, it := range req.Items {
		d.got = append(d.got, describe(it))
		if it.Record != nil {
			rows += it.Record.NumRows()
		}
	}
	return ApplyResult{Rows: rows}, nil
}

func describe(it Item) string {
	if it.Record != nil {
		return fmt.Sprintf("%s:%d", it.Stream, it.Record.NumRows())
	}
	if it.Truncate {
		return it.Stream + ":truncate"
	}
	switch it.Resnapshot {
	case ResnapshotBegin:
		return it.Stream + ":resnapshot-begin"
	case ResnapshotEnd:
		return it.Stream + ":resnapshot-end"
	}
	return it.Stream + ":schema"
}

// streamDest implements StreamingDestination. It notes how many records were alive (not yet released by the
// SDK) when each item arrived, keeps the ones named in keep (Retain), and stops after stopAfter items.
type streamDest struct {
	plainDest
	mem       *memory.CheckedAllocator
	stopAfter int
	fail      error
	kept      []arrow.RecordBatch
	liveBytes []int
	err       error // what the iterator yielded, if anything
}

func (d *streamDest) ApplyStream(_ context.Context, req ApplyRequest, items iter.Seq2[Item, error]) (ApplyResult, error) {
	if len(req.Items) != 0 {
		return ApplyResult{}, errors.New("req.Items is not empty")
	}
	var rows int64
	for it, err := range items {
		if err != nil {
			d.err = err
			return ApplyResult{}, fmt.Errorf("streaming: %w", err)
		}
		d.liveBytes = append(d.liveBytes, d.mem.CurrentAlloc())
		d.got = append(d.got, describe(it))
		if it.Record != nil {
			rows += it.Record.NumRows()
			if len(d.kept) == 0 {
				it.Record.Retain()
				d.kept = append(d.kept, it.Record)
			}
		}
		if d.stopAfter > 0 && len(d.got) == d.stopAfter {
			return ApplyResult{Skipped: true}, nil
		}
	}
	if d.fail != nil {
		return ApplyResult{}, d.fail
	}
	return ApplyResult{Rows: rows}, nil
}

var _ StreamingDestination = (*streamDest)(nil)

// startServer serves p over an in-memory connection and returns a client of it.
func startServer(t *testing.T, p Plugin, mem memory.Allocator) pluginv2.PluginClient {
	t.Helper()
	return startGRPC(t, NewServer(p, mem))
}

// startGRPC serves impl over an in-memory connection and returns a client of it.
func startGRPC(t *testing.T, impl pluginv2.PluginServer) pluginv2.PluginClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(protocol.MaxMessageSize))
	pluginv2.RegisterPluginServer(srv, impl)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(protocol.MaxMessageSize)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pluginv2.NewPluginClient(conn)
}

func testSchema() *arrow.Schema {
	return change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: arrow.BinaryTypes.String, Nullable: true}}, []string{"id"})
}

// encodedBatch is a batch of n rows of stream, encoded as the engine sends it.
func encodedBatch(t *testing.T, stream string, n int) protocol.Batch {
	t.Helper()
	sc := testSchema()
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append(strings.Repeat("x", 100))
		b.Row(change.OpInsert, "")
	}
	rec := b.NewBatch()
	defer rec.Release()
	ipc, err := protocol.EncodeRecord(memory.DefaultAllocator, rec)
	if err != nil {
		t.Fatal(err)
	}
	return protocol.Batch{Stream: stream, SchemaID: protocol.SchemaID(sc), Rows: int64(n), IPC: ipc}
}

// sendApply sends a header, a schema change of stream a, and the batches (chunked), then waits for the answer.
func sendApply(ctx context.Context, t *testing.T, c pluginv2.PluginClient, batches ...protocol.Batch) (*pluginv2.ApplyResponse, error) {
	t.Helper()
	s, err := c.Apply(ctx)
	if err != nil {
		return nil, err
	}
	sch, err := protocol.EncodeSchema(memory.DefaultAllocator, testSchema())
	if err != nil {
		t.Fatal(err)
	}
	msgs := []*pluginv2.ApplyMessage{
		{Msg: &pluginv2.ApplyMessage_Header{Header: &pluginv2.ApplyHeader{Pipeline: "p", Sequence: 7}}},
		{Msg: &pluginv2.ApplyMessage_Schema{Schema: &pluginv2.SchemaChange{Stream: &pluginv2.Stream{Name: "a", ArrowSchema: sch}}}},
	}
	for _, b := range batches {
		for _, ch := range protocol.Chunks(b) {
			msgs = append(msgs, &pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Batch{Batch: ch}})
		}
	}
	for _, m := range msgs {
		if err := s.Send(m); err != nil {
			break // the server ended the call; CloseAndRecv says why
		}
	}
	return s.CloseAndRecv()
}

func TestApplyStreaming(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A batch larger than one gRPC message arrives in several chunks and is decoded once, whole.
	big := encodedBatch(t, "a", 60000)
	if n := len(protocol.Chunks(big)); n < 2 {
		t.Fatalf("the big batch is %d chunk(s); the test needs several", n)
	}
	batches := []protocol.Batch{encodedBatch(t, "a", 3), big, encodedBatch(t, "b", 5)}
	want := []string{"a:schema", "a:3", "a:60000", "b:5"}

	t.Run("plain destination gets every item at once", func(t *testing.T) {
		mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
		d := &plainDest{}
		res, err := sendApply(ctx, t, startServer(t, d, mem), batches...)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(d.got) != fmt.Sprint(want) || res.Rows != 60008 {
			t.Fatalf("got %v rows %d, want %v rows 60008", d.got, res.Rows, want)
		}
		mem.AssertSize(t, 0)
	})

	t.Run("streaming destination gets items one by one and the SDK releases them", func(t *testing.T) {
		mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
		d := &streamDest{mem: mem}
		res, err := sendApply(ctx, t, startServer(t, d, mem), batches...)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(d.got) != fmt.Sprint(want) || res.Rows != 60008 {
			t.Fatalf("got %v rows %d, want %v", d.got, res.Rows, want)
		}
		// When the last batch arrives, only it and the one record the destination retained are alive: the big
		// batch in between was released as soon as the destination moved on.
		first := d.kept[0]
		last := d.liveBytes[len(d.liveBytes)-1]
		if lim := 3*int(first.NumRows()*200+5*200) + 64<<10; last > lim {
			t.Fatalf("%d bytes alive at the last item (limit %d): the big batch was not released", last, lim)
		}
		if d.liveBytes[2] < 60000*100 {
			t.Fatalf("%d bytes alive while the big batch is yielded: the test does not measure what it means to", d.liveBytes[2])
		}
		first.Release()
		mem.AssertSize(t, 0)
	})

	t.Run("a destination that stops early still answers", func(t *testing.T) {
		mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
		d := &streamDest{mem: mem, stopAfter: 2}
		res, err := sendApply(ctx, t, startServer(t, d, mem), batches...)
		if err != nil {
			t.Fatalf("early stop: %v", err)
		}
		if !res.Skipped || len(d.got) != 2 {
			t.Fatalf("res %+v, got %v", res, d.got)
		}
		d.kept[0].Release()
		mem.AssertSize(t, 0)
	})

	t.Run("a destination error reaches the engine", func(t *testing.T) {
		mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
		d := &streamDest{mem: mem, fail: errors.New("disk on fire")}
		_, err := sendApply(ctx, t, startServer(t, d, mem), batches...)
		if err == nil || !strings.Contains(err.Error(), "apply 7: disk on fire") {
			t.Fatalf("err = %v", err)
		}
		d.kept[0].Release()
		mem.AssertSize(t, 0)
	})

	t.Run("a stream ending inside a batch is an error the destination sees", func(t *testing.T) {
		mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
		d := &streamDest{mem: mem}
		c := startServer(t, d, mem)
		s, err := c.Apply(ctx)
		if err != nil {
			t.Fatal(err)
		}
		chunks := protocol.Chunks(big)
		for _, m := range []*pluginv2.ApplyMessage{
			{Msg: &pluginv2.ApplyMessage_Header{Header: &pluginv2.ApplyHeader{Pipeline: "p", Sequence: 7}}},
			{Msg: &pluginv2.ApplyMessage_Batch{Batch: chunks[0]}},
		} {
			if err := s.Send(m); err != nil {
				t.Fatal(err)
			}
		}
		_, err = s.CloseAndRecv()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "stream ended inside a batch") || d.err == nil {
			t.Fatalf("err = %v, destination saw %v", err, d.err)
		}
		if strings.Count(err.Error(), "apply 7") != 1 {
			t.Fatalf("err = %v: the destination's wrapping leaked into the status", err)
		}
		mem.AssertSize(t, 0)
	})
}

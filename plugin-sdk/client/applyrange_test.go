package client

import (
	"context"
	"encoding/json"
	"net"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// countingDest counts the applies it committed.
type countingDest struct{ applied atomic.Int64 }

func (d *countingDest) Spec() serve.Spec {
	return serve.Spec{Name: "counting", Kind: serve.KindDestination}
}
func (d *countingDest) Check(context.Context, json.RawMessage) error { return nil }
func (d *countingDest) Capabilities(context.Context, json.RawMessage) (serve.Capabilities, error) {
	return serve.Capabilities{ExactlyOnce: true, Coalesce: true}, nil
}
func (d *countingDest) LastApplied(context.Context, json.RawMessage, string) (serve.Applied, error) {
	return serve.Applied{}, nil
}
func (d *countingDest) Apply(context.Context, serve.ApplyRequest) (serve.ApplyResult, error) {
	d.applied.Add(1)
	return serve.ApplyResult{}, nil
}

// inMemory serves d over an in-memory connection (the plugin process is not what is under test here) and
// returns a Client of it.
func inMemory(t *testing.T, d serve.Destination) *Client {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(protocol.MaxMessageSize))
	pluginv2.RegisterPluginServer(srv, serve.NewServer(d, memory.DefaultAllocator))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &Client{name: "counting", rpc: pluginv2.NewPluginClient(conn), tail: newTailBuffer(1)}
}

// A caller that cancels while ApplyRange pulls its items (the engine does so when the next WAL segment of a
// range turns out corrupt) must leave the range uncommitted: ending the items must not read as "that was
// all". The race it guards against is between the cancellation and the half-close, so it is run many times.
func TestApplyRangeCancelledMidItemsCommitsNothing(t *testing.T) {
	d := &countingDest{}
	c := inMemory(t, d)
	sc := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, []string{"id"})
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	b.Field(0).(*array.Int64Builder).Append(1)
	b.Row(change.OpInsert, "")
	rec := b.NewBatch()
	b.Release()
	ipc, err := protocol.EncodeRecord(memory.DefaultAllocator, rec)
	rec.Release()
	if err != nil {
		t.Fatal(err)
	}
	schema, err := protocol.EncodeSchema(memory.DefaultAllocator, sc)
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		items := func(yield func(ApplyItem) bool) {
			_ = yield(ApplyItem{Entry: 1}) &&
				yield(ApplyItem{Schema: &pluginv2.Stream{Name: "t", ArrowSchema: schema}}) &&
				yield(ApplyItem{Batch: &protocol.Batch{Stream: "t", Rows: 1, IPC: ipc}})
			cancel() // entry 2 could not be read
		}
		if _, err := c.ApplyRange(ctx, nil, "p", 1, 2, items); err == nil {
			t.Fatal("ApplyRange cancelled mid-items returned no error")
		}
	}
	if n := d.applied.Load(); n != 0 {
		t.Fatalf("the destination committed %d of 200 cancelled ranges", n)
	}
}

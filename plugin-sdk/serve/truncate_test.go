package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// truncSource emits a batch, a truncate and another batch of stream a, then a checkpoint.
type truncSource struct{}

func (truncSource) Spec() Spec                                   { return Spec{Name: "trunc", Kind: KindSource} }
func (truncSource) Check(context.Context, json.RawMessage) error { return nil }
func (truncSource) Discover(context.Context, json.RawMessage) ([]Stream, error) {
	return nil, nil
}
func (truncSource) Ack(context.Context, []byte) error { return nil }
func (truncSource) Read(ctx context.Context, _ ReadRequest, out Emitter) error {
	if err := out.Truncate(ctx, "a"); err != nil {
		return err
	}
	return out.Checkpoint(ctx, Checkpoint{Position: []byte("p"), Idle: true})
}

// TestTruncateTravelsInOrder: a truncate a source emits reaches the engine as its own message, and a truncate
// the engine sends in an apply reaches the destination between the batches around it, on both Apply paths.
func TestTruncateTravelsInOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("read", func(t *testing.T) {
		c := startServer(t, truncSource{}, memory.DefaultAllocator)
		rs, err := c.Read(ctx, &pluginv2.ReadRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			m, err := rs.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			switch v := m.Msg.(type) {
			case *pluginv2.ReadMessage_Truncate:
				got = append(got, "truncate "+v.Truncate.Stream)
			case *pluginv2.ReadMessage_Checkpoint:
				got = append(got, "checkpoint")
			}
		}
		if fmt.Sprint(got) != "[truncate a checkpoint]" {
			t.Fatalf("read %v", got)
		}
	})

	big := encodedBatch(t, "a", 60000)
	msgs := func(truncateInsideBatch bool) []*pluginv2.ApplyMessage {
		ms := []*pluginv2.ApplyMessage{{Msg: &pluginv2.ApplyMessage_Header{Header: &pluginv2.ApplyHeader{Pipeline: "p", Sequence: 7}}}}
		for _, ch := range protocol.Chunks(encodedBatch(t, "a", 3)) {
			ms = append(ms, &pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Batch{Batch: ch}})
		}
		trunc := &pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Truncate{Truncate: &pluginv2.Truncate{Stream: "a"}}}
		chunks := protocol.Chunks(big)
		if !truncateInsideBatch {
			ms = append(ms, trunc)
		}
		for i, ch := range chunks {
			ms = append(ms, &pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Batch{Batch: ch}})
			if truncateInsideBatch && i == 0 {
				ms = append(ms, trunc)
			}
		}
		return ms
	}
	send := func(c pluginv2.PluginClient, ms []*pluginv2.ApplyMessage) (*pluginv2.ApplyResponse, error) {
		s, err := c.Apply(ctx)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			if err := s.Send(m); err != nil {
				break
			}
		}
		return s.CloseAndRecv()
	}
	want := "[a:3 a:truncate a:60000]"
	t.Run("plain destination", func(t *testing.T) {
		d := &plainDest{}
		if _, err := send(startServer(t, d, memory.DefaultAllocator), msgs(false)); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(d.got) != want {
			t.Fatalf("got %v, want %v", d.got, want)
		}
	})
	t.Run("streaming destination", func(t *testing.T) {
		mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
		d := &streamDest{mem: mem}
		if _, err := send(startServer(t, d, mem), msgs(false)); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(d.got) != want {
			t.Fatalf("got %v, want %v", d.got, want)
		}
	})
	t.Run("a truncate inside a chunked batch is refused", func(t *testing.T) {
		if len(protocol.Chunks(big)) < 2 {
			t.Fatal("the big batch is one chunk; the test needs several")
		}
		d := &plainDest{}
		_, err := send(startServer(t, d, memory.DefaultAllocator), msgs(true))
		if status.Code(err) != codes.InvalidArgument || d.got != nil {
			t.Fatalf("err = %v, items %v; want InvalidArgument and nothing applied", err, d.got)
		}
	})
}

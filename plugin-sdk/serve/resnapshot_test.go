package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// resnapSource echoes the streams a Read asks to re-snapshot as begin and end marks around a checkpoint.
type resnapSource struct{ truncSource }

func (resnapSource) Read(ctx context.Context, req ReadRequest, out Emitter) error {
	for _, s := range req.Resnapshot {
		if err := out.Resnapshot(ctx, s, false); err != nil {
			return err
		}
		if err := out.Resnapshot(ctx, s, true); err != nil {
			return err
		}
	}
	return out.Checkpoint(ctx, Checkpoint{Position: []byte("p"), Idle: true})
}

// TestResnapshotMarksTravelInOrder: the streams of ReadRequest.resnapshot reach the source, its marks reach the
// engine in order, and marks the engine sends in an apply reach the destination between the batches around them.
func TestResnapshotMarksTravelInOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("read", func(t *testing.T) {
		c := startServer(t, resnapSource{}, memory.DefaultAllocator)
		rs, err := c.Read(ctx, &pluginv2.ReadRequest{Resnapshot: []string{"a", "b"}})
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
			case *pluginv2.ReadMessage_Resnapshot:
				got = append(got, fmt.Sprintf("%s end=%v", v.Resnapshot.Stream, v.Resnapshot.End))
			case *pluginv2.ReadMessage_Checkpoint:
				got = append(got, "checkpoint")
			}
		}
		if fmt.Sprint(got) != "[a end=false a end=true b end=false b end=true checkpoint]" {
			t.Fatalf("read %v", got)
		}
	})

	mark := func(end bool) *pluginv2.ApplyMessage {
		return &pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Resnapshot{Resnapshot: &pluginv2.ResnapshotMark{Stream: "a", End: end}}}
	}
	msgs := func(markInsideBatch bool) []*pluginv2.ApplyMessage {
		ms := []*pluginv2.ApplyMessage{{Msg: &pluginv2.ApplyMessage_Header{Header: &pluginv2.ApplyHeader{Pipeline: "p", Sequence: 7}}}, mark(false)}
		for _, ch := range protocol.Chunks(encodedBatch(t, "a", 3)) {
			ms = append(ms, &pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Batch{Batch: ch}})
		}
		for i, ch := range protocol.Chunks(encodedBatch(t, "a", 60000)) {
			ms = append(ms, &pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Batch{Batch: ch}})
			if markInsideBatch && i == 0 {
				ms = append(ms, mark(true))
			}
		}
		if !markInsideBatch {
			ms = append(ms, mark(true))
		}
		return ms
	}
	send := func(c pluginv2.PluginClient, ms []*pluginv2.ApplyMessage) error {
		s, err := c.Apply(ctx)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if err := s.Send(m); err != nil {
				break
			}
		}
		_, err = s.CloseAndRecv()
		return err
	}
	want := "[a:resnapshot-begin a:3 a:60000 a:resnapshot-end]"
	t.Run("plain destination", func(t *testing.T) {
		d := &plainDest{}
		if err := send(startServer(t, d, memory.DefaultAllocator), msgs(false)); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(d.got) != want {
			t.Fatalf("got %v, want %v", d.got, want)
		}
	})
	t.Run("streaming destination", func(t *testing.T) {
		mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
		d := &streamDest{mem: mem}
		if err := send(startServer(t, d, mem), msgs(false)); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(d.got) != want {
			t.Fatalf("got %v, want %v", d.got, want)
		}
	})
	t.Run("a mark inside a chunked batch is refused", func(t *testing.T) {
		d := &plainDest{}
		err := send(startServer(t, d, memory.DefaultAllocator), msgs(true))
		if status.Code(err) != codes.InvalidArgument || d.got != nil {
			t.Fatalf("err = %v, items %v; want InvalidArgument and nothing applied", err, d.got)
		}
	})
}

// canResnapSource is resnapSource declaring (or not) that it can re-snapshot.
type canResnapSource struct {
	resnapSource
	can bool
}

func (s canResnapSource) CanResnapshot() bool { return s.can }

// TestSpecAnnouncesResnapshot: Spec lists source.resnapshot exactly for a source whose CanResnapshot says so.
func TestSpecAnnouncesResnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		p    Plugin
		want bool
	}{
		{"declares", canResnapSource{can: true}, true},
		{"declares it cannot", canResnapSource{can: false}, false},
		{"silent", resnapSource{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := startServer(t, tc.p, memory.DefaultAllocator).Spec(ctx, &pluginv2.SpecRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(spec.Services, protocol.ServiceResnapshot); got != tc.want {
				t.Fatalf("services %v: %s listed = %v, want %v", spec.Services, protocol.ServiceResnapshot, got, tc.want)
			}
		})
	}
}

package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// rangeDest records the range of each apply and the entry of each item.
type rangeDest struct {
	first, last uint64
	got         []string // "seq:stream:rows"
}

func (d *rangeDest) Spec() Spec                                   { return Spec{Name: "range", Kind: KindDestination} }
func (d *rangeDest) Check(context.Context, json.RawMessage) error { return nil }
func (d *rangeDest) Capabilities(context.Context, json.RawMessage) (Capabilities, error) {
	return Capabilities{ExactlyOnce: true, Coalesce: true}, nil
}
func (d *rangeDest) LastApplied(context.Context, json.RawMessage, string) (Applied, error) {
	return Applied{}, nil
}
func (d *rangeDest) Apply(_ context.Context, req ApplyRequest) (ApplyResult, error) {
	d.first, d.last = req.FirstSequence, req.Sequence
	for _, it := range req.Items {
		d.got = append(d.got, fmt.Sprintf("%d:%s", it.Sequence, describe(it)))
	}
	return ApplyResult{}, nil
}

func TestApplyRange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mark := func(seq uint64) *pluginv2.ApplyMessage {
		return &pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Entry{Entry: &pluginv2.EntryStart{Sequence: seq}}}
	}
	header := func(first, last uint64) *pluginv2.ApplyMessage {
		return &pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Header{Header: &pluginv2.ApplyHeader{Pipeline: "p", FirstSequence: first, Sequence: last}}}
	}
	batch := func(n int) []*pluginv2.ApplyMessage {
		var out []*pluginv2.ApplyMessage
		for _, ch := range protocol.Chunks(encodedBatch(t, "a", n)) {
			out = append(out, &pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Batch{Batch: ch}})
		}
		return out
	}
	cat := func(parts ...[]*pluginv2.ApplyMessage) []*pluginv2.ApplyMessage {
		var out []*pluginv2.ApplyMessage
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	one := func(m *pluginv2.ApplyMessage) []*pluginv2.ApplyMessage { return []*pluginv2.ApplyMessage{m} }
	tests := []struct {
		name        string
		msgs        []*pluginv2.ApplyMessage
		first, last uint64
		want        []string
		code        codes.Code
	}{
		{name: "one entry needs no mark", msgs: cat(one(header(0, 7)), batch(2)), first: 7, last: 7, want: []string{"7:a:2"}},
		{name: "a range tags each item with its entry",
			msgs:  cat(one(header(5, 7)), one(mark(5)), batch(1), one(mark(6)), batch(2), one(mark(7)), batch(3)),
			first: 5, last: 7, want: []string{"5:a:1", "6:a:2", "7:a:3"}},
		{name: "entries may be absent from a range (empty entries)",
			msgs:  cat(one(header(5, 9)), one(mark(5)), batch(1), one(mark(9)), batch(1)),
			first: 5, last: 9, want: []string{"5:a:1", "9:a:1"}},
		{name: "items before the first mark", msgs: cat(one(header(5, 7)), batch(1)), code: codes.InvalidArgument},
		{name: "mark out of order", msgs: cat(one(header(5, 7)), one(mark(6)), batch(1), one(mark(6))), code: codes.InvalidArgument},
		{name: "mark outside the range", msgs: cat(one(header(5, 7)), one(mark(8))), code: codes.InvalidArgument},
		{name: "empty range", msgs: one(header(8, 7)), code: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &rangeDest{}
			s, err := startServer(t, d, memory.DefaultAllocator).Apply(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tt.msgs {
				if err := s.Send(m); err != nil {
					break // the server ended the call; CloseAndRecv says why
				}
			}
			_, err = s.CloseAndRecv()
			if tt.code != codes.OK {
				if status.Code(err) != tt.code {
					t.Fatalf("got %v, want code %v", err, tt.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.first != tt.first || d.last != tt.last {
				t.Errorf("range %d..%d, want %d..%d", d.first, d.last, tt.first, tt.last)
			}
			if fmt.Sprint(d.got) != fmt.Sprint(tt.want) {
				t.Errorf("items %v, want %v", d.got, tt.want)
			}
		})
	}
}

func TestApplyRequestCovers(t *testing.T) {
	r := ApplyRequest{FirstSequence: 5, Sequence: 7}
	for fence, want := range map[uint64]bool{4: false, 5: false, 6: false, 7: true, 9: true} {
		if got := r.Covers(fence); got != want {
			t.Errorf("Covers(%d) = %v, want %v", fence, got, want)
		}
	}
}

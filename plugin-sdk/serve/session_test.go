package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

func TestRangeEntries(t *testing.T) {
	item := func(seq uint64, stream string) Item { return Item{Stream: stream, Sequence: seq, Truncate: true} }
	tests := []struct {
		name   string
		seq    uint64 // the range's last entry; first is 5
		items  []Item
		fence  uint64
		want   string
		broken error // yielded after the items
	}{
		{name: "each entry ends after its last item", seq: 7,
			items: []Item{item(5, "a"), item(5, "b"), item(6, "a"), item(7, "b")},
			want:  "5:a 5:b end5 6:a end6 7:b end7"},
		{name: "entries at or below the fence are skipped whole", seq: 7, fence: 6,
			items: []Item{item(5, "a"), item(6, "a"), item(6, "b"), item(7, "a"), item(7, "b")},
			want:  "7:a 7:b end7"},
		{name: "a fence at the range's end leaves nothing", seq: 7, fence: 7,
			items: []Item{item(5, "a"), item(7, "a")}},
		{name: "untagged items belong to the last entry", seq: 7,
			items: []Item{item(0, "a"), item(0, "b")},
			want:  "7:a 7:b end7"},
		{name: "no items, no steps", seq: 7},
		{name: "a broken stream ends the range with its error", seq: 7,
			items: []Item{item(5, "a"), item(6, "a")}, broken: errors.New("stream broke"),
			want: "5:a end5 6:a error:stream broke"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items := func(yield func(Item, error) bool) {
				for _, it := range tt.items {
					if !yield(it, nil) {
						return
					}
				}
				if tt.broken != nil {
					yield(Item{}, tt.broken)
				}
			}
			r := NewRange(ApplyRequest{Pipeline: "p", FirstSequence: 5, Sequence: tt.seq}, items)
			var got []string
			for st, err := range r.Entries(tt.fence) {
				switch {
				case err != nil:
					got = append(got, "error:"+err.Error())
				case st.End:
					got = append(got, fmt.Sprintf("end%d", st.Sequence))
				default:
					got = append(got, fmt.Sprintf("%d:%s", st.Sequence, st.Stream))
				}
			}
			if strings.Join(got, " ") != tt.want {
				t.Fatalf("steps %q, want %q", strings.Join(got, " "), tt.want)
			}
		})
	}

	t.Run("a range is read once", func(t *testing.T) {
		r := NewRange(ApplyRequest{Pipeline: "p", Sequence: 3, Items: []Item{item(3, "a")}}, nil)
		if r.FirstSequence != 3 {
			t.Fatalf("FirstSequence %d, want the single entry 3", r.FirstSequence)
		}
		for range r.Entries(0) {
		}
		var err error
		for _, e := range r.Entries(0) {
			err = e
		}
		if err == nil {
			t.Fatal("a second read of the entries yielded no error")
		}
	})

	t.Run("a loop that stops early ends the range", func(t *testing.T) {
		r := NewRange(ApplyRequest{Pipeline: "p", Sequence: 6, FirstSequence: 5, Items: []Item{item(5, "a"), item(6, "a")}}, nil)
		n := 0
		for range r.Entries(0) {
			n++
			break
		}
		if n != 1 {
			t.Fatalf("%d steps after a break", n)
		}
	})
}

// sessionDest is a destination written against sessions: it counts opens and closes, and each session keeps
// its own fence and log, so a test sees which session served a call.
type sessionDest struct {
	mu      sync.Mutex
	opens   map[string]int
	closed  []string
	failing map[string]bool // settings whose Open fails
	gate    chan struct{}   // when set, Open waits for it
}

func (d *sessionDest) Spec() Spec                                   { return Spec{Name: "sessions", Kind: KindDestination} }
func (d *sessionDest) Check(context.Context, json.RawMessage) error { return nil }
func (d *sessionDest) Capabilities(context.Context, json.RawMessage) (Capabilities, error) {
	return Capabilities{ExactlyOnce: true, Coalesce: true}, nil
}

func (d *sessionDest) Open(_ context.Context, settings json.RawMessage) (Session, error) {
	if d.gate != nil {
		<-d.gate
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.opens == nil {
		d.opens = map[string]int{}
	}
	d.opens[string(settings)]++
	if d.failing[string(settings)] {
		return nil, fmt.Errorf("open %s: refused", settings)
	}
	return &testSession{d: d, name: string(settings)}, nil
}

type testSession struct {
	d     *sessionDest
	name  string
	fence uint64
	log   []string
}

func (s *testSession) LastApplied(context.Context, string) (Applied, error) {
	return Applied{Sequence: s.fence}, nil
}

func (s *testSession) Apply(_ context.Context, r *Range) (ApplyResult, error) {
	if r.Covers(s.fence) {
		return ApplyResult{Skipped: true}, nil
	}
	var rows int64
	for st, err := range r.Entries(s.fence) {
		if err != nil {
			return ApplyResult{}, err
		}
		switch {
		case st.End:
			s.log = append(s.log, fmt.Sprintf("end%d", st.Sequence))
		case st.Record != nil:
			s.log = append(s.log, fmt.Sprintf("%d:%s:%d", st.Sequence, st.Stream, st.Record.NumRows()))
			rows += st.Record.NumRows()
		}
	}
	s.fence = r.Sequence
	return ApplyResult{Rows: rows}, nil
}

func (s *testSession) Close() error {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.closed = append(s.d.closed, s.name)
	return nil
}

func TestSessions(t *testing.T) {
	ctx := context.Background()

	t.Run("one session per distinct settings, closed once", func(t *testing.T) {
		d := &sessionDest{}
		s := NewSessions(d)
		for _, settings := range []string{`{"a":1}`, `{"a":2}`, `{"a":1}`, `{"a":1}`} {
			if _, err := s.LastApplied(ctx, json.RawMessage(settings), "p"); err != nil {
				t.Fatal(err)
			}
		}
		if d.opens[`{"a":1}`] != 1 || d.opens[`{"a":2}`] != 1 {
			t.Fatalf("opens %v, want one per settings", d.opens)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if len(d.closed) != 2 {
			t.Fatalf("closed %v, want both sessions", d.closed)
		}
	})

	t.Run("a failed open is not kept", func(t *testing.T) {
		d := &sessionDest{failing: map[string]bool{`{}`: true}}
		s := NewSessions(d)
		for range 2 {
			if _, err := s.LastApplied(ctx, json.RawMessage(`{}`), "p"); err == nil || !strings.Contains(err.Error(), "refused") {
				t.Fatalf("err = %v", err)
			}
		}
		if d.opens[`{}`] != 2 {
			t.Fatalf("%d opens, want a new try per call", d.opens[`{}`])
		}
		if err := s.Close(); err != nil || len(d.closed) != 0 {
			t.Fatalf("close: %v, closed %v", err, d.closed)
		}
	})

	t.Run("concurrent first calls open once", func(t *testing.T) {
		d := &sessionDest{gate: make(chan struct{})}
		s := NewSessions(d)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if _, err := s.LastApplied(ctx, json.RawMessage(`{}`), "p"); err != nil {
					t.Error(err)
				}
			})
		}
		time.Sleep(20 * time.Millisecond)
		close(d.gate)
		wg.Wait()
		if d.opens[`{}`] != 1 {
			t.Fatalf("%d opens, want 1", d.opens[`{}`])
		}
	})

	t.Run("Apply over items replays only what the session lacks", func(t *testing.T) {
		d := &sessionDest{}
		s := NewSessions(d)
		rec := func(n int) Item {
			b := encodedBatch(t, "a", n)
			recs, _, err := protocol.DecodeRecords(memory.DefaultAllocator, b.IPC)
			if err != nil || len(recs) != 1 {
				t.Fatalf("decode: %d records, %v", len(recs), err)
			}
			return Item{Stream: "a", Record: recs[0]}
		}
		at := func(it Item, seq uint64) Item { it.Sequence = seq; return it }
		r1, r2, r3 := rec(1), rec(2), rec(3)
		defer r1.Record.Release()
		defer r2.Record.Release()
		defer r3.Record.Release()
		if _, err := s.Apply(ctx, ApplyRequest{Settings: json.RawMessage(`{}`), Pipeline: "p", FirstSequence: 4, Sequence: 5, Items: []Item{at(r1, 4), at(r2, 5)}}); err != nil {
			t.Fatal(err)
		}
		// A coalesced range whose first entries the session holds: only entry 6 is new.
		res, err := s.Apply(ctx, ApplyRequest{Settings: json.RawMessage(`{}`), Pipeline: "p", FirstSequence: 4, Sequence: 6, Items: []Item{at(r1, 4), at(r2, 5), at(r3, 6)}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Rows != 3 {
			t.Fatalf("rows %d, want the 3 of entry 6", res.Rows)
		}
		res, err = s.Apply(ctx, ApplyRequest{Settings: json.RawMessage(`{}`), Pipeline: "p", Sequence: 6, Items: []Item{at(r3, 6)}})
		if err != nil || !res.Skipped {
			t.Fatalf("replay of 6: %+v, %v", res, err)
		}
		x, _ := s.Session(ctx, json.RawMessage(`{}`))
		if got := strings.Join(x.(*testSession).log, " "); got != "4:a:1 end4 5:a:2 end5 6:a:3 end6" {
			t.Fatalf("log %q", got)
		}
		if _, err := s.Apply(ctx, ApplyRequest{Settings: json.RawMessage(`{}`), Sequence: 7}); err == nil {
			t.Fatal("an apply without a pipeline name was taken")
		}
	})
}

// TestServeSessions runs a SessionDestination and a destination written against the SDK 0.3 interfaces
// (Destination, StreamingDestination) through the gRPC server: both keep being served, and the server keeps a
// session across calls and closes it when it is closed.
func TestServeSessions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rangeApply := func(c pluginv2.PluginClient, settings string, first, last uint64) (*pluginv2.ApplyResponse, error) {
		s, err := c.Apply(ctx)
		if err != nil {
			return nil, err
		}
		msgs := []*pluginv2.ApplyMessage{{Msg: &pluginv2.ApplyMessage_Header{Header: &pluginv2.ApplyHeader{Settings: []byte(settings), Pipeline: "p", FirstSequence: first, Sequence: last}}}}
		for seq := first; seq <= last; seq++ {
			msgs = append(msgs, &pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Entry{Entry: &pluginv2.EntryStart{Sequence: seq}}})
			for _, ch := range protocol.Chunks(encodedBatch(t, "a", int(seq))) {
				msgs = append(msgs, &pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Batch{Batch: ch}})
			}
		}
		for _, m := range msgs {
			if err := s.Send(m); err != nil {
				break
			}
		}
		return s.CloseAndRecv()
	}

	t.Run("session destination", func(t *testing.T) {
		mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
		d := &sessionDest{}
		impl, closeSessions := NewServerCloser(d, mem)
		c := startGRPC(t, impl)
		if _, err := rangeApply(c, `{}`, 1, 2); err != nil {
			t.Fatal(err)
		}
		res, err := rangeApply(c, `{}`, 2, 3) // entry 2 is held: only 3 is applied
		if err != nil {
			t.Fatal(err)
		}
		if res.Rows != 3 {
			t.Fatalf("rows %d, want 3", res.Rows)
		}
		la, err := c.LastApplied(ctx, &pluginv2.LastAppliedRequest{Settings: []byte(`{}`), Pipeline: "p"})
		if err != nil || la.Sequence != 3 {
			t.Fatalf("last applied %v, %v", la, err)
		}
		caps, err := c.Capabilities(ctx, &pluginv2.CapabilitiesRequest{Settings: []byte(`{}`)})
		if err != nil || !caps.Coalesce {
			t.Fatalf("capabilities %v, %v", caps, err)
		}
		if d.opens[`{}`] != 1 {
			t.Fatalf("%d opens over four calls, want 1", d.opens[`{}`])
		}
		if len(d.closed) != 0 {
			t.Fatalf("closed %v while serving", d.closed)
		}
		if err := closeSessions(); err != nil {
			t.Fatal(err)
		}
		if len(d.closed) != 1 {
			t.Fatalf("closed %v, want the one session", d.closed)
		}
		mem.AssertSize(t, 0)
	})

	t.Run("destination written against SDK 0.3", func(t *testing.T) {
		d := &rangeDest{}
		c := startServer(t, d, memory.DefaultAllocator)
		if _, err := rangeApply(c, `{}`, 4, 5); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(d.got) != "[4:a:4 5:a:5]" {
			t.Fatalf("items %v", d.got)
		}
	})

	t.Run("an open that fails reaches the engine", func(t *testing.T) {
		d := &sessionDest{failing: map[string]bool{`{"bad":1}`: true}}
		c := startServer(t, d, memory.DefaultAllocator)
		_, err := rangeApply(c, `{"bad":1}`, 1, 1)
		if err == nil || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("err = %v", err)
		}
		_, err = c.LastApplied(ctx, &pluginv2.LastAppliedRequest{Settings: []byte(`{"bad":1}`), Pipeline: "p"})
		if status.Code(err) == codes.OK {
			t.Fatal("last applied with a failing open succeeded")
		}
	})
}

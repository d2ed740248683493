package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// server adapts a Plugin to the gRPC service.
type server struct {
	pluginv2.UnimplementedPluginServer
	p   Plugin
	mem memory.Allocator
	// dest is the destination role: p itself when it implements Destination (the SDK 0.3 interfaces), or the
	// session cache of a SessionDestination, which then holds its sessions until close.
	dest     Destination
	sessions *Sessions
}

// NewServer returns the gRPC implementation of p. Serve uses it; tests may too. The sessions of a
// SessionDestination stay open for the server's life: a test that wants them closed uses NewServerCloser.
func NewServer(p Plugin, mem memory.Allocator) pluginv2.PluginServer {
	return newServer(p, mem)
}

// NewServerCloser is NewServer with the function that closes the destination sessions the server opened.
func NewServerCloser(p Plugin, mem memory.Allocator) (pluginv2.PluginServer, func() error) {
	s := newServer(p, mem)
	return s, s.close
}

func newServer(p Plugin, mem memory.Allocator) *server {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	s := &server{p: p, mem: mem}
	if sd, ok := p.(SessionDestination); ok {
		s.sessions = NewSessions(sd)
		s.dest = s.sessions
	} else if d, ok := p.(Destination); ok {
		s.dest = d
	}
	return s
}

// close closes the sessions of a SessionDestination.
func (s *server) close() error {
	if s.sessions == nil {
		return nil
	}
	return s.sessions.Close()
}

func (s *server) source() (Source, error) {
	src, ok := s.p.(Source)
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "plugin %s is not a source", s.p.Spec().Name)
	}
	return src, nil
}

func (s *server) destination() (Destination, error) {
	if s.dest == nil {
		return nil, status.Errorf(codes.Unimplemented, "plugin %s is not a destination", s.p.Spec().Name)
	}
	return s.dest, nil
}

func (s *server) Spec(context.Context, *pluginv2.SpecRequest) (*pluginv2.SpecResponse, error) {
	sp := s.p.Spec()
	return &pluginv2.SpecResponse{Name: sp.Name, Version: sp.Version, Kind: pluginv2.Kind(sp.Kind), SettingsSchema: sp.SettingsSchema, Description: sp.Description, Services: services(s.p)}, nil
}

func (s *server) Check(ctx context.Context, req *pluginv2.CheckRequest) (*pluginv2.CheckResponse, error) {
	if err := s.p.Check(ctx, req.Settings); err != nil {
		// A classified error travels as a status so its class and fix reach the engine: a transient one
		// (a server restarting) is retried, not taken for a failed check; the client turns the others
		// back into a *client.CheckError.
		if fault.ClassOf(err) == fault.Unknown && unreachable(err) {
			// The engine refuses a pipeline whose check fails: a server that did not answer is not a
			// refusal but a retry, even when the plugin did not classify it.
			err = fault.TransientErr(err)
		}
		if fault.ClassOf(err) != fault.Unknown {
			return nil, toStatus(err)
		}
		return &pluginv2.CheckResponse{Ok: false, Error: err.Error()}, nil
	}
	return &pluginv2.CheckResponse{Ok: true}, nil
}

func (s *server) Discover(ctx context.Context, req *pluginv2.DiscoverRequest) (*pluginv2.DiscoverResponse, error) {
	src, err := s.source()
	if err != nil {
		return nil, err
	}
	streams, err := src.Discover(ctx, req.Settings)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pluginv2.DiscoverResponse{}
	for _, st := range streams {
		pb, err := s.streamToProto(st)
		if err != nil {
			return nil, err
		}
		out.Streams = append(out.Streams, pb)
	}
	return out, nil
}

func (s *server) streamToProto(st Stream) (*pluginv2.Stream, error) {
	if st.Schema == nil {
		return nil, status.Errorf(codes.Internal, "stream %s has no schema", st.Name)
	}
	b, err := protocol.EncodeSchema(s.mem, st.Schema)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "stream %s: %v", st.Name, err)
	}
	pb := &pluginv2.Stream{Name: st.Name, ArrowSchema: b, PrimaryKey: st.PrimaryKey, SchemaId: protocol.SchemaID(st.Schema)}
	for _, m := range st.Modes {
		pb.Modes = append(pb.Modes, pluginv2.SyncMode(m))
	}
	return pb, nil
}

// StreamFromProto decodes a stream description.
func StreamFromProto(mem memory.Allocator, pb *pluginv2.Stream) (Stream, error) {
	sc, err := protocol.DecodeSchema(mem, pb.ArrowSchema)
	if err != nil {
		return Stream{}, fmt.Errorf("stream %s: %w", pb.Name, err)
	}
	st := Stream{Name: pb.Name, Schema: sc, PrimaryKey: pb.PrimaryKey}
	if len(st.PrimaryKey) == 0 {
		st.PrimaryKey = change.PrimaryKey(sc)
	}
	for _, m := range pb.Modes {
		st.Modes = append(st.Modes, SyncMode(m))
	}
	return st, nil
}

// emitter sends a source's output on the Read stream.
type emitter struct {
	s   *server
	mu  sync.Mutex
	out pluginv2.Plugin_ReadServer
	// ipc holds *bytes.Buffer for encoding batches. A buffer goes back once its batch is sent: gRPC has
	// marshalled the message into its own buffers by the time Send returns, and this server installs no
	// stats handler that could look at the message later.
	ipc sync.Pool
	ids protocol.SchemaIDs // under mu
}

func (e *emitter) send(m *pluginv2.ReadMessage) error {
	if err := e.out.Send(m); err != nil {
		return fmt.Errorf("send to engine: %w", err)
	}
	return nil
}

func (e *emitter) Batch(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	buf, _ := e.ipc.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	defer e.ipc.Put(buf)
	if err := protocol.EncodeRecordTo(buf, e.s.mem, rec); err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range protocol.Chunks(protocol.Batch{Stream: stream, SchemaID: e.ids.ID(stream, rec.Schema()), Rows: rec.NumRows(), IPC: buf.Bytes()}) {
		if err := e.send(&pluginv2.ReadMessage{Msg: &pluginv2.ReadMessage_Batch{Batch: c}}); err != nil {
			return err
		}
	}
	return nil
}

func (e *emitter) SchemaChange(ctx context.Context, st Stream) error {
	pb, err := e.s.streamToProto(st)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.send(&pluginv2.ReadMessage{Msg: &pluginv2.ReadMessage_Schema{Schema: &pluginv2.SchemaChange{Stream: pb}}})
}

func (e *emitter) Truncate(ctx context.Context, stream string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.send(&pluginv2.ReadMessage{Msg: &pluginv2.ReadMessage_Truncate{Truncate: &pluginv2.Truncate{Stream: stream}}})
}

func (e *emitter) Resnapshot(ctx context.Context, stream string, end bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if stream == "" {
		return errors.New("resnapshot mark without a stream")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.send(&pluginv2.ReadMessage{Msg: &pluginv2.ReadMessage_Resnapshot{Resnapshot: &pluginv2.ResnapshotMark{Stream: stream, End: end}}})
}

func (e *emitter) Checkpoint(ctx context.Context, cp Checkpoint) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var metrics []*pluginv2.Metric
	for _, m := range cp.Metrics {
		metrics = append(metrics, &pluginv2.Metric{Name: m.Name, Value: m.Value, Labels: m.Labels, Help: m.Help})
	}
	return e.send(&pluginv2.ReadMessage{Msg: &pluginv2.ReadMessage_Checkpoint{Checkpoint: &pluginv2.Checkpoint{
		Position: cp.Position, RowsDone: cp.RowsDone, RowsTotal: cp.RowsTotal, LagMs: cp.LagMS, Idle: cp.Idle,
		Metrics: metrics,
	}}})
}

func (s *server) Read(req *pluginv2.ReadRequest, out pluginv2.Plugin_ReadServer) error {
	src, err := s.source()
	if err != nil {
		return err
	}
	err = src.Read(out.Context(), ReadRequest{Settings: json.RawMessage(req.Settings), Streams: req.Streams, Checkpoint: req.Checkpoint, Resnapshot: req.Resnapshot, Pipeline: req.Pipeline}, &emitter{s: s, out: out})
	if err != nil && out.Context().Err() != nil {
		return status.FromContextError(out.Context().Err()).Err()
	}
	return toStatus(err)
}

func (s *server) Ack(ctx context.Context, req *pluginv2.AckRequest) (*pluginv2.AckResponse, error) {
	src, err := s.source()
	if err != nil {
		return nil, err
	}
	if err := src.Ack(ctx, req.Checkpoint); err != nil {
		return nil, toStatus(err)
	}
	return &pluginv2.AckResponse{}, nil
}

func (s *server) Capabilities(ctx context.Context, req *pluginv2.CapabilitiesRequest) (*pluginv2.CapabilitiesResponse, error) {
	d, err := s.destination()
	if err != nil {
		return nil, err
	}
	c, err := d.Capabilities(ctx, req.Settings)
	if err != nil {
		return nil, toStatus(err)
	}
	var unsupported []string
	if tl, ok := s.p.(TypeLimits); ok {
		unsupported = tl.UnsupportedTypes()
	}
	return &pluginv2.CapabilitiesResponse{UnsupportedTypes: unsupported, ExactlyOnce: c.ExactlyOnce, Deletes: c.Deletes, SchemaEvolution: c.SchemaEvolution, ExactlyOnceNote: c.ExactlyOnceNote, Truncate: c.Truncate, Coalesce: c.Coalesce, Resnapshot: c.Resnapshot,
		FullRow: c.FullRow, RenamedStream: c.RenamedStream, ApplyDefaults: applyDefaults(c.ApplyDefaults)}, nil
}

// applyDefaults is nil when a destination proposes nothing, as it was before proposals existed.
func applyDefaults(a ApplyDefaults) *pluginv2.ApplyDefaults {
	if a == (ApplyDefaults{}) {
		return nil
	}
	return &pluginv2.ApplyDefaults{MaxIntervalMs: a.MaxInterval.Milliseconds(), MaxBytes: a.MaxBytes, MaxEntries: a.MaxEntries}
}

func (s *server) Apply(in pluginv2.Plugin_ApplyServer) error {
	d, err := s.destination()
	if err != nil {
		return err
	}
	first, err := in.Recv()
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "apply: read header: %v", err)
	}
	h := first.GetHeader()
	if h == nil {
		return status.Errorf(codes.InvalidArgument, "apply: first message is not a header")
	}
	firstSeq := h.FirstSequence
	if firstSeq == 0 {
		firstSeq = h.Sequence
	}
	if firstSeq > h.Sequence {
		return status.Errorf(codes.InvalidArgument, "apply: range %d..%d is empty", firstSeq, h.Sequence)
	}
	req := ApplyRequest{Settings: h.Settings, Pipeline: h.Pipeline, FirstSequence: firstSeq, Sequence: h.Sequence}
	// A single entry has no EntryStart: its items belong to Sequence. A range must mark its first entry.
	src := &applySource{s: s, in: in, seq: h.Sequence, first: firstSeq, cur: firstSeq, marked: firstSeq == h.Sequence}
	var res ApplyResult
	if sd, ok := d.(StreamingDestination); ok {
		res, err = sd.ApplyStream(in.Context(), req, src.items)
	} else {
		res, err = s.applyAll(in.Context(), d, req, src)
	}
	if src.err != nil {
		return src.err // the stream itself failed: its status, whatever the destination wrapped it in
	}
	if err != nil {
		return toStatus(fmt.Errorf("apply %d: %w", h.Sequence, err))
	}
	// The engine sends the whole entry before it reads the answer: a destination that stopped early (a skipped
	// sequence number) still has to let it finish, or the engine's next send fails instead of getting the result.
	if err := src.drain(); err != nil {
		return err
	}
	return in.SendAndClose(&pluginv2.ApplyResponse{Skipped: res.Skipped, Rows: res.Rows})
}

// applyAll collects every item, then calls Apply: what a destination without ApplyStream gets.
func (s *server) applyAll(ctx context.Context, d Destination, req ApplyRequest, src *applySource) (ApplyResult, error) {
	defer func() {
		for _, it := range req.Items {
			if it.Record != nil {
				it.Record.Release()
			}
		}
	}()
	for it, err := range src.items {
		if err != nil {
			return ApplyResult{}, err
		}
		if it.Record != nil {
			it.Record.Retain() // the iterator releases what it yielded
		}
		req.Items = append(req.Items, it)
	}
	return d.Apply(ctx, req)
}

// applySource reads the items of one Apply call off the gRPC stream.
type applySource struct {
	s   *server
	in  pluginv2.Plugin_ApplyServer
	seq uint64
	// first..seq is the range; cur is the entry the items now read belong to; marked says an EntryStart set it
	// (or the apply is one entry and needs none).
	first, cur uint64
	marked     bool
	asm        protocol.Assembler
	done       bool  // the stream's end was read
	err        error // what ended the stream early, as a gRPC status
}

// items yields the stream's items in order, decoding each batch as its last chunk arrives, and releases each
// record once the consumer asks for the next item (see StreamingDestination).
func (a *applySource) items(yield func(Item, error) bool) {
	for !a.done {
		its, err := a.next()
		if err != nil {
			a.err = err
			yield(Item{}, err)
			return
		}
		for i, it := range its {
			ok := yield(it, nil)
			if it.Record != nil {
				it.Record.Release()
			}
			if !ok {
				for _, rest := range its[i+1:] {
					if rest.Record != nil {
						rest.Record.Release()
					}
				}
				return
			}
		}
	}
}

// next reads one message: the items it completes (none for a batch chunk that is not the last), or the end.
func (a *applySource) next() ([]Item, error) {
	m, err := a.in.Recv()
	if errors.Is(err, io.EOF) {
		a.done = true
		if a.asm.Pending() {
			return nil, status.Errorf(codes.InvalidArgument, "apply %d: stream ended inside a batch", a.seq)
		}
		return nil, nil
	}
	if err != nil {
		return nil, status.Errorf(codes.Aborted, "apply %d: receive: %v", a.seq, err)
	}
	if _, ok := m.Msg.(*pluginv2.ApplyMessage_Entry); !ok && !a.marked {
		return nil, status.Errorf(codes.InvalidArgument, "apply %d..%d: items before the first entry mark", a.first, a.seq)
	}
	switch v := m.Msg.(type) {
	case *pluginv2.ApplyMessage_Entry:
		e := v.Entry.Sequence
		if a.asm.Pending() {
			return nil, status.Errorf(codes.InvalidArgument, "apply %d..%d: entry %d starts inside a batch", a.first, a.seq, e)
		}
		if e < a.first || e > a.seq || (a.marked && e <= a.cur) {
			return nil, status.Errorf(codes.InvalidArgument, "apply %d..%d: entry %d out of order (after %d)", a.first, a.seq, e, a.cur)
		}
		a.cur, a.marked = e, true
		return nil, nil
	case *pluginv2.ApplyMessage_Batch:
		b, done, err := a.asm.Add(v.Batch)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "apply %d: %v", a.seq, err)
		}
		if !done {
			return nil, nil
		}
		recs, _, err := protocol.DecodeRecords(a.s.mem, b.IPC)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "apply %d: stream %s: %v", a.seq, b.Stream, err)
		}
		its := make([]Item, len(recs))
		for i, r := range recs {
			its[i] = Item{Stream: b.Stream, Record: r, Sequence: a.cur}
		}
		return its, nil
	case *pluginv2.ApplyMessage_Schema:
		st, err := StreamFromProto(a.s.mem, v.Schema.Stream)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "apply %d: %v", a.seq, err)
		}
		return []Item{{Stream: st.Name, Schema: &st, Sequence: a.cur}}, nil
	case *pluginv2.ApplyMessage_Truncate:
		if a.asm.Pending() {
			return nil, status.Errorf(codes.InvalidArgument, "apply %d: truncate of %s inside a batch", a.seq, v.Truncate.Stream)
		}
		return []Item{{Stream: v.Truncate.Stream, Truncate: true, Sequence: a.cur}}, nil
	case *pluginv2.ApplyMessage_Resnapshot:
		if a.asm.Pending() {
			return nil, status.Errorf(codes.InvalidArgument, "apply %d: resnapshot mark of %s inside a batch", a.seq, v.Resnapshot.Stream)
		}
		if v.Resnapshot.Stream == "" {
			return nil, status.Errorf(codes.InvalidArgument, "apply %d: resnapshot mark without a stream", a.seq)
		}
		mark := ResnapshotBegin
		if v.Resnapshot.End {
			mark = ResnapshotEnd
		}
		return []Item{{Stream: v.Resnapshot.Stream, Resnapshot: mark, Sequence: a.cur}}, nil
	}
	return nil, status.Errorf(codes.InvalidArgument, "apply %d: unexpected message %T", a.seq, m.Msg)
}

// drain reads the rest of the stream without decoding it.
func (a *applySource) drain() error {
	for !a.done {
		_, err := a.in.Recv()
		if errors.Is(err, io.EOF) {
			a.done = true
			break
		}
		if err != nil {
			return status.Errorf(codes.Aborted, "apply %d: receive: %v", a.seq, err)
		}
	}
	return nil
}

func (s *server) LastApplied(ctx context.Context, req *pluginv2.LastAppliedRequest) (*pluginv2.LastAppliedResponse, error) {
	d, err := s.destination()
	if err != nil {
		return nil, err
	}
	a, err := d.LastApplied(ctx, req.Settings, req.Pipeline)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pluginv2.LastAppliedResponse{Sequence: a.Sequence, Streams: a.Streams}, nil
}

func (s *server) Teardown(ctx context.Context, req *pluginv2.TeardownRequest) (*pluginv2.TeardownResponse, error) {
	var released []string
	var err error
	if td, ok := s.p.(PipelineTearingDown); ok {
		released, err = td.TeardownPipeline(ctx, req.Settings, req.Pipeline)
	} else if td, ok := s.p.(TearingDown); ok {
		released, err = td.Teardown(ctx, req.Settings)
	} else {
		return nil, status.Errorf(codes.Unimplemented, "plugin %s holds nothing to tear down", s.p.Spec().Name)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &pluginv2.TeardownResponse{Released: released}, nil
}

// toStatus keeps a plugin's error message, and its fault class, intact across the boundary.
func toStatus(err error) error { return fault.ToStatus(err) }

// unreachable says whether err is a network failure (a refused or reset connection, a timeout, a name that
// did not resolve for now), judged by type, never by message text.
func unreachable(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, io.ErrUnexpectedEOF)
}

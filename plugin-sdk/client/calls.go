package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// Spec asks the plugin to describe itself.
func (c *Client) Spec(ctx context.Context) (*pluginv2.SpecResponse, error) {
	r, err := c.rpc.Spec(ctx, &pluginv2.SpecRequest{})
	return r, c.wrap("spec", err)
}

// Check tests settings; a failed check is an error carrying the plugin's explanation.
func (c *Client) Check(ctx context.Context, settings []byte) error {
	r, err := c.rpc.Check(ctx, &pluginv2.CheckRequest{Settings: settings})
	if err != nil {
		if st, ok := status.FromError(err); ok && !c.pc.Exited() {
			if f := fault.FromStatus(st); fault.ClassOf(f).Permanent() {
				return &CheckError{Plugin: c.name, Message: st.Message(), Class: fault.ClassOf(f), Fix: fault.FixOf(f)}
			}
		}
		return c.wrap("check", err)
	}
	if !r.Ok {
		return &CheckError{Plugin: c.name, Message: r.Error, Class: fault.Config}
	}
	return nil
}

// CheckError is a failed Check: the settings, the server or the tables must change before the plugin can
// work. It matches its class's sentinel (fault.ErrConfig unless the plugin said otherwise), and fault.FixOf
// gives the plugin's fix when it sent one.
type CheckError struct {
	Plugin  string
	Message string
	Class   fault.Class
	Fix     string
}

func (e *CheckError) Error() string { return fmt.Sprintf("check %s: %s", e.Plugin, e.Message) }

// Unwrap gives the class (and the fix) to errors.Is and fault.FixOf.
func (e *CheckError) Unwrap() error {
	class := e.Class
	if !class.Permanent() {
		class = fault.Config
	}
	return fault.New(class, errors.New(e.Message), e.Fix)
}

// Discover lists the source's streams.
func (c *Client) Discover(ctx context.Context, settings []byte) ([]*pluginv2.Stream, error) {
	r, err := c.rpc.Discover(ctx, &pluginv2.DiscoverRequest{Settings: settings})
	if err != nil {
		return nil, c.wrap("discover", err)
	}
	return r.Streams, nil
}

// Capabilities asks a destination what it honours.
func (c *Client) Capabilities(ctx context.Context, settings []byte) (*pluginv2.CapabilitiesResponse, error) {
	r, err := c.rpc.Capabilities(ctx, &pluginv2.CapabilitiesRequest{Settings: settings})
	return r, c.wrap("capabilities", err)
}

// LastApplied asks a destination for the highest sequence number it holds for a pipeline.
func (c *Client) LastApplied(ctx context.Context, settings []byte, pipeline string) (*pluginv2.LastAppliedResponse, error) {
	r, err := c.rpc.LastApplied(ctx, &pluginv2.LastAppliedRequest{Settings: settings, Pipeline: pipeline})
	return r, c.wrap("last applied", err)
}

// Teardown asks a source to release its server-side resources for a pipeline. A plugin that has none
// returns an empty list.
func (c *Client) Teardown(ctx context.Context, settings []byte) ([]string, error) {
	return c.TeardownFor(ctx, "", settings)
}

// TeardownFor is Teardown of the named pipeline (TeardownRequest.pipeline), for a source whose server-side
// state is named after the pipeline that read.
func (c *Client) TeardownFor(ctx context.Context, pipeline string, settings []byte) ([]string, error) {
	r, err := c.rpc.Teardown(ctx, &pluginv2.TeardownRequest{Settings: settings, Pipeline: pipeline})
	if status.Code(err) == codes.Unimplemented {
		return nil, nil
	}
	if err != nil {
		return nil, c.wrap("teardown", err)
	}
	return r.Released, nil
}

// Ack tells the source a checkpoint is durable.
func (c *Client) Ack(ctx context.Context, checkpoint []byte) error {
	_, err := c.rpc.Ack(ctx, &pluginv2.AckRequest{Checkpoint: checkpoint})
	return c.wrap("ack", err)
}

// Message is one element of a Read: exactly one field is set.
type Message struct {
	Batch      *protocol.Batch
	Schema     *pluginv2.Stream
	Checkpoint *pluginv2.Checkpoint
	Truncate   string // the stream a truncate empties, "" when the message is something else
	Resnapshot *pluginv2.ResnapshotMark
}

// ReadStream is a running Read.
type ReadStream struct {
	c   *Client
	s   pluginv2.Plugin_ReadClient
	asm protocol.Assembler
}

// Read starts reading from a checkpoint (nil: the beginning).
func (c *Client) Read(ctx context.Context, settings []byte, streams []string, checkpoint []byte) (*ReadStream, error) {
	return c.ReadResnapshot(ctx, settings, streams, checkpoint, nil)
}

// ReadResnapshot is Read that also asks the source to copy the streams in resnapshot again while it streams
// (see ReadRequest.resnapshot).
func (c *Client) ReadResnapshot(ctx context.Context, settings []byte, streams []string, checkpoint []byte, resnapshot []string) (*ReadStream, error) {
	return c.ReadFor(ctx, "", settings, streams, checkpoint, resnapshot)
}

// ReadFor is ReadResnapshot on behalf of the named pipeline (ReadRequest.pipeline): a source that derives an id
// its server tells readers apart by (the MySQL binlog client's server_id) derives it from the name too.
func (c *Client) ReadFor(ctx context.Context, pipeline string, settings []byte, streams []string, checkpoint []byte, resnapshot []string) (*ReadStream, error) {
	s, err := c.rpc.Read(ctx, &pluginv2.ReadRequest{Settings: settings, Streams: streams, Checkpoint: checkpoint, Resnapshot: resnapshot, Pipeline: pipeline})
	if err != nil {
		return nil, c.wrap("read", err)
	}
	return &ReadStream{c: c, s: s}, nil
}

// Next returns the next message; io.EOF when the source ended the stream.
func (r *ReadStream) Next() (Message, error) {
	for {
		m, err := r.s.Recv()
		if errors.Is(err, io.EOF) {
			if r.asm.Pending() {
				return Message{}, r.c.wrap("read", io.ErrUnexpectedEOF)
			}
			return Message{}, io.EOF
		}
		if err != nil {
			return Message{}, r.c.wrap("read", err)
		}
		switch v := m.Msg.(type) {
		case *pluginv2.ReadMessage_Batch:
			b, done, err := r.asm.Add(v.Batch)
			if err != nil {
				return Message{}, r.c.wrap("read", err)
			}
			if done {
				return Message{Batch: &b}, nil
			}
		case *pluginv2.ReadMessage_Schema:
			return Message{Schema: v.Schema.Stream}, nil
		case *pluginv2.ReadMessage_Checkpoint:
			return Message{Checkpoint: v.Checkpoint}, nil
		case *pluginv2.ReadMessage_Truncate:
			if v.Truncate.Stream == "" {
				return Message{}, r.c.wrap("read", fmt.Errorf("truncate without a stream"))
			}
			return Message{Truncate: v.Truncate.Stream}, nil
		case *pluginv2.ReadMessage_Resnapshot:
			if v.Resnapshot.Stream == "" {
				return Message{}, r.c.wrap("read", fmt.Errorf("resnapshot mark without a stream"))
			}
			return Message{Resnapshot: v.Resnapshot}, nil
		default:
			return Message{}, r.c.wrap("read", fmt.Errorf("unexpected message %T", m.Msg))
		}
	}
}

// ApplyItem is one element of an apply: a batch, a schema change, a truncate, or (in a coalesced apply) the
// mark that the items after it belong to WAL entry Entry.
type ApplyItem struct {
	Batch    *protocol.Batch
	Schema   *pluginv2.Stream
	Truncate string // the stream a truncate empties
	Entry    uint64 // an entry mark: sent before each entry of a range
	// Resnapshot is a resnapshot mark: the begin or the end of a re-snapshot of its stream.
	Resnapshot *pluginv2.ResnapshotMark
}

// Apply sends the content of one WAL sequence number to a destination and waits for its commit.
func (c *Client) Apply(ctx context.Context, settings []byte, pipeline string, seq uint64, items []ApplyItem) (*pluginv2.ApplyResponse, error) {
	return c.ApplyRange(ctx, settings, pipeline, seq, seq, slices.Values(items))
}

// ApplyRange sends the entries first..last to a destination as one atomic apply and waits for its commit. A
// range (first < last) is only for a destination whose capabilities say coalesce, and items must then start
// each entry with an Entry mark. items is pulled as the call sends, so the caller can read one WAL segment at a
// time and hold no more than that in memory.
func (c *Client) ApplyRange(ctx context.Context, settings []byte, pipeline string, first, last uint64, items iter.Seq[ApplyItem]) (*pluginv2.ApplyResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	what := fmt.Sprintf("apply %d", last)
	if first != last {
		what = fmt.Sprintf("apply %d..%d", first, last)
	}
	s, err := c.rpc.Apply(ctx)
	if err != nil {
		return nil, c.wrap("apply", err)
	}
	send := func(m *pluginv2.ApplyMessage) error {
		if err := s.Send(m); err != nil {
			if errors.Is(err, io.EOF) {
				// The server ended the call early; CloseAndRecv has its reason.
				_, rerr := s.CloseAndRecv()
				if rerr != nil {
					return rerr
				}
			}
			return err
		}
		return nil
	}
	h := &pluginv2.ApplyHeader{Settings: settings, Pipeline: pipeline, Sequence: last}
	if first != last {
		h.FirstSequence = first
	}
	if err := send(&pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Header{Header: h}}); err != nil {
		return nil, c.wrap(what, err)
	}
	for it := range items {
		var err error
		switch {
		case it.Entry != 0:
			err = send(&pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Entry{Entry: &pluginv2.EntryStart{Sequence: it.Entry}}})
		case it.Schema != nil:
			err = send(&pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Schema{Schema: &pluginv2.SchemaChange{Stream: it.Schema}}})
		case it.Truncate != "":
			err = send(&pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Truncate{Truncate: &pluginv2.Truncate{Stream: it.Truncate}}})
		case it.Resnapshot != nil:
			err = send(&pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Resnapshot{Resnapshot: it.Resnapshot}})
		case it.Batch != nil:
			for _, ch := range protocol.Chunks(*it.Batch) {
				if err = send(&pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Batch{Batch: ch}}); err != nil {
					break
				}
			}
		}
		if err != nil {
			return nil, c.wrap(what, err)
		}
	}
	if err := ctx.Err(); err != nil {
		// The caller cancelled while items were pulled (a WAL segment it could not read): half-closing now
		// would tell the plugin the range is complete, and the plugin could commit it before the
		// cancellation reached it. Returning leaves only the cancellation, which aborts the apply.
		return nil, c.wrap(what, context.Cause(ctx))
	}
	r, err := s.CloseAndRecv()
	if err != nil {
		return nil, c.wrap(what, err)
	}
	return r, nil
}

package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"sync"
)

// SessionDestination is a destination written against sessions (SDK 0.4): it parses its settings and connects
// once, in Open, and the SDK keeps the Session for every later call with the same settings. Serve prefers it
// to Destination when a plugin implements both.
type SessionDestination interface {
	Plugin
	Capabilities(ctx context.Context, settings json.RawMessage) (Capabilities, error)
	// Open parses settings and connects. The SDK calls it once per distinct settings and keeps the session
	// until the plugin exits (or Sessions.Close); it does not open the same settings twice at once. An error
	// is returned to the call that needed the session, and the next call opens again.
	Open(ctx context.Context, settings json.RawMessage) (Session, error)
}

// Session is a destination open for one settings value. Its methods may be called concurrently (one plugin
// process can serve several applies at once, and LastApplied beside them): a session that cannot run two
// applies at once serialises them itself.
type Session interface {
	// LastApplied returns what the destination holds for pipeline: sequence 0 when it never applied any.
	LastApplied(ctx context.Context, pipeline string) (Applied, error)
	// Apply applies one range atomically together with the record of its last sequence number (see Range).
	Apply(ctx context.Context, r *Range) (ApplyResult, error)
	// Close releases what Open acquired. The SDK calls it once, when no call uses the session any more.
	Close() error
}

// Range is the content of one apply as it arrives from the engine: the entries FirstSequence..Sequence of the
// request, read off the wire while the session consumes them. A session reads its fence (what it holds of
// Pipeline) in the transaction the apply commits in, returns ApplyResult{Skipped: true} when Covers(fence),
// and otherwise ranges over Entries(fence).
type Range struct {
	// ApplyRequest names the pipeline and the range; its Items are empty (they come from Entries) and
	// FirstSequence is set, also for a single entry.
	ApplyRequest
	items iter.Seq2[Item, error]
	used  bool
}

// NewRange returns the range of req whose items come from items (nil: from req.Items). Only tests and
// in-process callers need it; Serve builds ranges itself.
func NewRange(req ApplyRequest, items iter.Seq2[Item, error]) *Range {
	if items == nil {
		items = sliceItems(req.Items)
	}
	req.Items = nil
	if req.FirstSequence == 0 {
		req.FirstSequence = req.Sequence
	}
	return &Range{ApplyRequest: req, items: items}
}

func sliceItems(all []Item) iter.Seq2[Item, error] {
	return func(yield func(Item, error) bool) {
		for _, it := range all {
			if !yield(it, nil) {
				return
			}
		}
	}
}

// Step is one step of Range.Entries: an item of an entry the destination does not hold yet or, with End set,
// the end of entry Sequence (every item of it has been yielded). Item.Sequence is always the entry's number.
type Step struct {
	Item
	End bool
}

// Entries yields the range's items in log order, skipping those of entries at or below fence (a replay of
// part of a range whose first entries committed before), and a Step with End after the last item of each entry
// it yielded items of, so a destination that writes per entry writes at End and holds one entry in memory. An
// item the engine sent untagged (Sequence 0, from an in-process caller) belongs to the range's last entry.
//
// A yielded record belongs to the SDK and is valid only until the loop asks for the next step: the SDK releases
// it then, so a session that keeps a record longer must Retain it (and Release it when done). The loop may stop
// early; the SDK discards the rest of the range. An error (the engine's stream broke, a malformed batch) is
// yielded once and ends the range: Apply must then return an error. Entries may be ranged over once.
func (r *Range) Entries(fence uint64) iter.Seq2[Step, error] {
	return func(yield func(Step, error) bool) {
		if r.used {
			yield(Step{}, fmt.Errorf("apply %d: the range's entries were read already", r.Sequence))
			return
		}
		r.used = true
		var cur uint64 // the entry whose items were yielded last; 0: none
		for it, err := range r.items {
			if err != nil {
				yield(Step{}, err)
				return
			}
			if it.Sequence == 0 {
				it.Sequence = r.Sequence
			}
			if it.Sequence <= fence {
				continue // committed before: a replay of part of the range
			}
			if cur != 0 && it.Sequence != cur {
				if !yield(Step{Item: Item{Sequence: cur}, End: true}, nil) {
					return
				}
			}
			cur = it.Sequence
			if !yield(Step{Item: it}, nil) {
				return
			}
		}
		if cur != 0 {
			yield(Step{Item: Item{Sequence: cur}, End: true}, nil)
		}
	}
}

// Sessions serves a SessionDestination through the Destination and StreamingDestination interfaces: it keeps
// one open Session per distinct settings (byte for byte, as the engine sends them) and turns every call into a
// call on that session. Serve uses it for a SessionDestination, and closes it when the plugin ends; tests and
// in-process callers use it to call a SessionDestination as the engine does. It is safe for concurrent use.
type Sessions struct {
	d  SessionDestination
	mu sync.Mutex
	m  map[string]*slot // by settings
}

// slot is one settings value's session, or the open in progress (ready not closed yet).
type slot struct {
	ready chan struct{}
	s     Session
	err   error
}

var _ StreamingDestination = (*Sessions)(nil)

// NewSessions returns the session cache of d.
func NewSessions(d SessionDestination) *Sessions {
	return &Sessions{d: d, m: map[string]*slot{}}
}

// Destination is the SessionDestination the sessions belong to.
func (s *Sessions) Destination() SessionDestination { return s.d }

// Session returns the session of settings, opening it if none is open.
func (s *Sessions) Session(ctx context.Context, settings json.RawMessage) (Session, error) {
	key := string(settings)
	s.mu.Lock()
	sl, ok := s.m[key]
	if !ok {
		sl = &slot{ready: make(chan struct{})}
		s.m[key] = sl
	}
	s.mu.Unlock()
	if !ok {
		sl.s, sl.err = s.d.Open(ctx, settings)
		if sl.err != nil {
			s.mu.Lock()
			if s.m[key] == sl {
				delete(s.m, key) // the next call opens again
			}
			s.mu.Unlock()
		}
		close(sl.ready)
	}
	select {
	case <-sl.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return sl.s, sl.err
}

// Close closes every open session and forgets it; a later call opens again.
func (s *Sessions) Close() error {
	s.mu.Lock()
	slots := s.m
	s.m = map[string]*slot{}
	s.mu.Unlock()
	var errs []error
	for _, sl := range slots {
		<-sl.ready
		if sl.err == nil {
			errs = append(errs, sl.s.Close())
		}
	}
	return errors.Join(errs...)
}

func (s *Sessions) Spec() Spec { return s.d.Spec() }

func (s *Sessions) Check(ctx context.Context, settings json.RawMessage) error {
	return s.d.Check(ctx, settings)
}

func (s *Sessions) Capabilities(ctx context.Context, settings json.RawMessage) (Capabilities, error) {
	return s.d.Capabilities(ctx, settings)
}

func (s *Sessions) LastApplied(ctx context.Context, settings json.RawMessage, pipeline string) (Applied, error) {
	x, err := s.Session(ctx, settings)
	if err != nil {
		return Applied{}, err
	}
	a, err := x.LastApplied(ctx, pipeline)
	if a.Streams == nil && err == nil {
		a.Streams = map[string]uint64{}
	}
	return a, err
}

// Apply is ApplyStream over req.Items: the one adapter from the streaming form, for in-process callers.
func (s *Sessions) Apply(ctx context.Context, req ApplyRequest) (ApplyResult, error) {
	items := req.Items
	req.Items = nil
	return s.ApplyStream(ctx, req, sliceItems(items))
}

// ApplyStream applies req with its items from items on the session of req.Settings.
func (s *Sessions) ApplyStream(ctx context.Context, req ApplyRequest, items iter.Seq2[Item, error]) (ApplyResult, error) {
	if req.Pipeline == "" {
		return ApplyResult{}, errors.New("apply: no pipeline name")
	}
	x, err := s.Session(ctx, req.Settings)
	if err != nil {
		return ApplyResult{}, err
	}
	return x.Apply(ctx, NewRange(req, items))
}

package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/infer"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// streamState is a stream's schema as a Read knows it.
type streamState struct {
	name    string
	keys    []string
	fields  []arrow.Field // data fields
	schema  *arrow.Schema // the change schema
	encoded []byte        // schema as Arrow IPC, for comparison and checkpoints
	initial []byte        // the schema the settings alone give, as Arrow IPC
	// announced says this Read's log already holds schema: emitted by this Read, or restored from the
	// checkpoint (whose WAL entries hold it).
	announced bool
}

func (st *streamState) stream() serve.Stream {
	modes := []serve.SyncMode{serve.ModeAppendOnly}
	if len(st.keys) > 0 {
		modes = []serve.SyncMode{serve.ModeCDC}
	}
	return serve.Stream{Name: st.name, Schema: st.schema, PrimaryKey: st.keys, Modes: modes}
}

// newState makes a state for fields, with the key columns present and required.
func newState(name string, keys []string, fields []arrow.Field, initial []byte) (*streamState, error) {
	fields = withKeys(fields, keys)
	sc := change.TimedSchema(fields, keys)
	enc, err := protocol.EncodeSchema(memory.DefaultAllocator, sc)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	if initial == nil {
		initial = enc
	}
	return &streamState{name: name, keys: keys, fields: fields, schema: sc, encoded: enc, initial: initial}, nil
}

// withKeys returns fields with every key column present (a null-only placeholder until a record gives it a
// type) and not nullable.
func withKeys(fields []arrow.Field, keys []string) []arrow.Field {
	out := append([]arrow.Field(nil), fields...)
	for _, k := range keys {
		found := false
		for i := range out {
			if out[i].Name == k {
				out[i].Nullable, found = false, true
			}
		}
		if !found {
			out = append(out, infer.NullOnly(k, false))
		}
	}
	return out
}

// job is one request's data waiting for the engine's acknowledgement.
type job struct {
	seq  uint64
	done chan struct{}
	err  error // set before done closes; nil means acknowledged
}

// session is one running Read: the emitter requests write to, and the streams' schemas as of its log.
type session struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	out    serve.Emitter
	cfg    *settings
	opt    infer.Options
	seq    *atomic.Uint64 // the Source's request counter
	mem    memory.Allocator

	// emitting is a lock (a one-slot channel, so a request can give up waiting for it): it keeps what one
	// request emits contiguous in the log (schema change, batches, checkpoint) and guards the fields below.
	emitting chan struct{}
	streams  map[string]*streamState
	carried  map[string][]byte // checkpoint schemas of streams this Read does not serve, passed on
	lastSeq  uint64
	lastIdle bool
	rows     int64
	// waiting counts requests queued for the lock: a checkpoint is idle only when none is.
	waiting atomic.Int32

	// jobsMu is not the emitting lock: Ack must never wait behind an emission, since the engine reads no more of the
	// stream until Ack returns.
	jobsMu sync.Mutex
	jobs   []*job
	ended  bool
}

var errUnavailable = errors.New("the source is not reading")

func unavailable(format string, args ...any) *requestError {
	return &requestError{Status: http.StatusServiceUnavailable, Msg: fmt.Sprintf(format, args...)}
}

// position returns the checkpoint after request seq. The caller holds the lock.
func (s *session) position(seq uint64) []byte {
	cp := checkpoint{Seq: seq}
	for name, enc := range s.carried {
		if cp.Schemas == nil {
			cp.Schemas = map[string][]byte{}
		}
		cp.Schemas[name] = enc
	}
	for name, st := range s.streams {
		if !bytes.Equal(st.encoded, st.initial) {
			if cp.Schemas == nil {
				cp.Schemas = map[string][]byte{}
			}
			cp.Schemas[name] = st.encoded
		}
	}
	return cp.encode()
}

func (s *session) lock(ctx context.Context) error {
	select {
	case s.emitting <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *session) unlock() { <-s.emitting }

// start emits the first checkpoint: idle, since nothing has been posted to this Read yet.
func (s *session) start() error {
	if err := s.lock(s.ctx); err != nil {
		return err
	}
	defer s.unlock()
	s.lastSeq, s.lastIdle = s.seq.Load(), true
	return s.out.Checkpoint(s.ctx, serve.Checkpoint{Position: s.position(s.lastSeq), Idle: true})
}

// submit infers, builds and emits one request's rows, all or nothing, and returns the job that completes
// when the engine acknowledges the request's checkpoint. ctx bounds only the wait for the lock (while the
// engine applies backpressure, say): once emitting, a request is never abandoned halfway.
func (s *session) submit(ctx context.Context, name string, rows []row, received time.Time) (*job, *requestError) {
	s.waiting.Add(1)
	err := s.lock(ctx)
	s.waiting.Add(-1)
	if err != nil {
		return nil, unavailable("the source is busy (the pipeline is slow to take data): not written within ack_timeout; retry")
	}
	defer s.unlock()
	if s.ctx.Err() != nil {
		return nil, unavailable("%v; retry", errUnavailable)
	}
	st := s.streams[name]
	if st == nil {
		return nil, unavailable("stream %s is configured but not read by the running pipeline; retry later", name)
	}
	seq := s.seq.Add(1)
	// Excluded fields go before their values are even looked at: no inference, no type conflict, no message.
	if ex := s.cfg.protect.Excluded(name); len(ex) > 0 {
		for _, r := range rows {
			for _, c := range ex {
				delete(r.value, c)
			}
		}
	}
	next, batches, rerr := s.prepare(st, rows, seq, received)
	if rerr != nil {
		hideValue(s.cfg, name, rerr)
		s.flushIdle()
		return nil, rerr
	}
	defer func() {
		for _, b := range batches {
			b.Release()
		}
	}()
	j := &job{seq: seq, done: make(chan struct{})}
	if err := s.emit(st, next, batches, j, received); err != nil {
		s.cancel(fmt.Errorf("emit request %d of stream %s: %w", seq, name, err))
		return nil, unavailable("the source stopped while writing this request (%v); retry", err)
	}
	return j, nil
}

// prepare evolves the stream's schema by rows and builds their batches, touching no state. Every row's commit
// time (_skippr_committed_at) is received, when the request arrived: the moment the source accepted it.
func (s *session) prepare(st *streamState, rows []row, seq uint64, received time.Time) (*streamState, []arrow.RecordBatch, *requestError) {
	values := make([]map[string]any, len(rows))
	for i, r := range rows {
		values[i] = r.value
	}
	fields, _, err := infer.Evolve(st.fields, values, s.opt)
	if err != nil {
		return nil, nil, unprocessable(err, 0)
	}
	next, err := newState(st.name, st.keys, fields, st.initial)
	if err != nil {
		return nil, nil, &requestError{Status: http.StatusInternalServerError, Msg: err.Error()}
	}
	next.announced = st.announced && bytes.Equal(next.encoded, st.encoded)
	var batches []arrow.RecordBatch
	for off := 0; off < len(rows); off += s.cfg.MaxBatchRows {
		end := min(off+s.cfg.MaxBatchRows, len(rows))
		irows := make([]infer.Row, 0, end-off)
		for i := off; i < end; i++ {
			irows = append(irows, infer.Row{Op: rows[i].op, Pos: strconv.FormatUint(seq, 10) + ":" + strconv.Itoa(i), Committed: received, Value: rows[i].value})
		}
		b, err := infer.Build(s.mem, next.schema, irows, s.opt)
		if err != nil {
			for _, b := range batches {
				b.Release()
			}
			return nil, nil, unprocessable(err, off)
		}
		batches = append(batches, b)
	}
	return next, batches, nil
}

// hideValue rewords a refusal about a hashed field, whose message may quote the value (a number does):
// protected values appear in no message, not even in the answer to the client that sent them.
func hideValue(cfg *settings, stream string, e *requestError) {
	if e.Field == "" {
		return
	}
	top, _, _ := strings.Cut(strings.TrimPrefix(e.Field, "/"), "/")
	top = strings.NewReplacer("~1", "/", "~0", "~").Replace(top)
	if !cfg.protect.Hides(stream, top) {
		return
	}
	e.Msg = fmt.Sprintf("field %s: the value does not fit the column (not shown: the field is hashed)", e.Field)
	if e.Record != nil {
		e.Msg = fmt.Sprintf("record %d, %s", *e.Record, e.Msg)
	}
}

// unprocessable turns an inference error into a 422 naming the record (offset by the batch's first row).
func unprocessable(err error, offset int) *requestError {
	var ie *infer.Error
	if !errors.As(err, &ie) {
		return &requestError{Status: http.StatusUnprocessableEntity, Msg: err.Error()}
	}
	e := &requestError{Status: http.StatusUnprocessableEntity, Field: ie.Path}
	if ie.Record >= 0 {
		e.Record = intp(ie.Record + offset)
		e.Msg = (&infer.Error{Record: ie.Record + offset, Path: ie.Path, Reason: ie.Reason}).Error()
	} else {
		e.Msg = ie.Error()
	}
	return e
}

// emit writes a request's schema change (if any), batches and checkpoint, and registers its job before the
// checkpoint so an Ack can never overtake it. The caller holds the lock.
func (s *session) emit(st, next *streamState, batches []arrow.RecordBatch, j *job, received time.Time) error {
	if !next.announced {
		if err := s.out.SchemaChange(s.ctx, next.stream()); err != nil {
			return err
		}
		next.announced = true
	}
	var rows int64
	for _, b := range batches {
		if err := s.out.Batch(s.ctx, st.name, b); err != nil {
			return err
		}
		rows += b.NumRows()
	}
	s.streams[st.name] = next
	s.rows += rows
	s.jobsMu.Lock()
	if s.ended {
		s.jobsMu.Unlock()
		return errUnavailable
	}
	s.jobs = append(s.jobs, j)
	s.jobsMu.Unlock()
	idle := s.waiting.Load() == 0
	s.lastSeq, s.lastIdle = j.seq, idle
	return s.out.Checkpoint(s.ctx, serve.Checkpoint{Position: s.position(j.seq), Idle: idle, RowsDone: s.rows, LagMS: time.Since(received).Milliseconds()})
}

// flushIdle re-emits the last checkpoint as idle when the request that was to follow it failed and no other
// is queued, so the engine commits what came before without waiting for its delay bound. The caller holds
// the lock.
func (s *session) flushIdle() {
	if s.lastIdle || s.waiting.Load() > 0 {
		return
	}
	s.lastIdle = true
	if err := s.out.Checkpoint(s.ctx, serve.Checkpoint{Position: s.position(s.lastSeq), Idle: true, RowsDone: s.rows}); err != nil {
		s.cancel(fmt.Errorf("emit checkpoint %d: %w", s.lastSeq, err))
	}
}

// ack completes the jobs at or below seq.
func (s *session) ack(seq uint64) {
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	n := 0
	for n < len(s.jobs) && s.jobs[n].seq <= seq {
		close(s.jobs[n].done)
		n++
	}
	s.jobs = append(s.jobs[:0], s.jobs[n:]...)
}

// end fails every job still waiting: its data was emitted on a Read that is gone, and whether the engine
// made it durable is unknown, so its client gets a 503 and retries.
func (s *session) end(cause error) {
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	s.ended = true
	for _, j := range s.jobs {
		j.err = cause
		close(j.done)
	}
	s.jobs = nil
}

// Package ingest is the http source: clients POST JSON records to /v1/streams/{stream}; each request's
// records become one all-or-nothing change of the stream (schema change, batches, checkpoint), and the
// client gets its 200 only once the engine has acknowledged that checkpoint, i.e. after the WAL commit is
// durable. See plugins/http/README.md for the API and the guarantees.
package ingest

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/infer"
	"github.com/skippr-dev/skippr/plugin-sdk/protect"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

//go:embed settings.schema.json
var settingsSchema []byte

// maxSampleBytes bounds a sample file: it describes records, it is not a data load.
const maxSampleBytes = 64 << 20

// Source is the http source plugin. Its HTTP listener opens with the first Read (settings arrive with the
// calls) and stays open for the life of the process, answering 503 while no Read runs.
type Source struct {
	version string

	mu  sync.Mutex
	srv *server
	cur *session

	// seq numbers the requests whose data was emitted; checkpoints carry it.
	seq  atomic.Uint64
	idem idemStore
}

// New returns the source; version is the plugin's release version.
func New(version string) *Source { return &Source{version: version} }

func (s *Source) Spec() serve.Spec {
	return serve.Spec{
		Name: "http", Version: s.version, Kind: serve.KindSource,
		Description:    "HTTP push endpoint: JSON/NDJSON records POSTed per stream, schema inferred and evolved; a request is answered 200 only once its data is durable",
		SettingsSchema: settingsSchema,
	}
}

// Check validates the settings, reads the sample files and the TLS files, and makes sure the listen address
// can be bound.
func (s *Source) Check(_ context.Context, raw json.RawMessage) error {
	err := s.check(raw)
	// A Check answer is text only (the class does not cross the boundary with it), so the fix goes into
	// the message, where `skippr connect` shows it.
	if fix := fault.FixOf(err); fix != "" {
		return fmt.Errorf("%w; to fix: %s", err, fix)
	}
	return err
}

func (s *Source) check(raw json.RawMessage) error {
	cfg, err := parseSettings(raw)
	if err != nil {
		return err
	}
	if _, err := initialStates(cfg); err != nil {
		return err
	}
	if cfg.TLS != nil {
		if err := cfg.TLS.check(time.Now()); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil && s.srv.listen == cfg.Listen {
		return nil
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w (is another process using the port?)", cfg.Listen, err)
	}
	return ln.Close()
}

// Discover lists the configured streams with the schema the settings give them: inferred from the sample
// file if there is one, else just the key columns (typed by the first record).
func (s *Source) Discover(_ context.Context, raw json.RawMessage) ([]serve.Stream, error) {
	cfg, err := parseSettings(raw)
	if err != nil {
		return nil, err
	}
	states, err := initialStates(cfg)
	if err != nil {
		return nil, err
	}
	out := make([]serve.Stream, 0, len(states))
	for _, name := range cfg.streamNames() {
		out = append(out, cfg.protect.Stream(states[name].stream()))
	}
	return out, nil
}

// initialStates gives each configured stream the schema the settings alone give it.
func initialStates(cfg *settings) (map[string]*streamState, error) {
	states := map[string]*streamState{}
	for _, name := range cfg.streamNames() {
		sc := cfg.Streams[name]
		var fields []arrow.Field
		if sc.SampleFile != "" {
			var err error
			if fields, err = sampleFields(sc, cfg.inferOptions()); err != nil {
				return nil, fmt.Errorf("stream %s: %w", name, err)
			}
		}
		st, err := newState(name, sc.keys, fields, nil)
		if err != nil {
			return nil, err
		}
		states[name] = st
	}
	return states, nil
}

// sampleFields infers fields from a file of JSON (an object or an array of objects) or NDJSON records, with
// the same rules as requests.
func sampleFields(sc streamConfig, opt infer.Options) ([]arrow.Field, error) {
	f, err := os.Open(sc.SampleFile)
	if err != nil {
		return nil, fmt.Errorf("sample_file: %w", err)
	}
	defer f.Close()
	data, err := readAllLimit(f, maxSampleBytes)
	if err != nil {
		return nil, fmt.Errorf("sample_file %s: %w", sc.SampleFile, err)
	}
	recs, rerr := decodeRecords(data, formatJSON)
	if rerr != nil {
		var nerr *requestError
		if recs, nerr = decodeRecords(data, formatNDJSON); nerr != nil {
			return nil, fmt.Errorf("sample_file %s is neither JSON nor NDJSON: as JSON: %s; as NDJSON: %s", sc.SampleFile, rerr.Msg, nerr.Msg)
		}
	}
	rows, rerr := toRows(recs, sc.keys)
	if rerr != nil {
		return nil, fmt.Errorf("sample_file %s: %s", sc.SampleFile, rerr.Msg)
	}
	values := make([]map[string]any, len(rows))
	for i, r := range rows {
		values[i] = r.value
	}
	fields, err := infer.Infer(values, opt)
	if err != nil {
		return nil, fmt.Errorf("sample_file %s: %w", sc.SampleFile, err)
	}
	return fields, nil
}

// Read serves POSTed requests until ctx ends. A push source holds nothing to replay: a Read from an older
// checkpoint yields only what is posted from now on (data a client did not get a 200 for is re-sent by the
// client). The checkpoint's schemas are restored, so evolution continues from what the log holds.
func (s *Source) Read(ctx context.Context, req serve.ReadRequest, out serve.Emitter) error {
	cfg, err := parseSettings(req.Settings)
	if err != nil {
		return err
	}
	inner, _, err := protect.Unwrap(req.Checkpoint)
	if err != nil {
		return err
	}
	cp, err := parseCheckpoint(inner)
	if err != nil {
		return err
	}
	states, err := initialStates(cfg)
	if err != nil {
		return err
	}
	names := req.Streams
	if len(names) == 0 {
		names = cfg.streamNames()
	}
	// What was posted is gone once acknowledged: a push source cannot copy a stream again under new rules, so
	// new rules apply from the next request on, and the log says so (a refusal's only way out would be to put
	// the old rules back).
	changed, wrapped, err := cfg.protect.Changed(req.Checkpoint, names)
	if err != nil {
		return err
	}
	for _, n := range changed {
		slog.Warn("exclude_columns/hash_columns changed: the new rules apply from the next request on; rows the destination has from before keep what the old rules made of them (post them again to replace them)", "stream", n)
	}
	out = cfg.protect.Emitter(out, memory.DefaultAllocator, names, wrapped)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sess := &session{ctx: ctx, cancel: cancel, out: out, cfg: cfg, opt: cfg.inferOptions(), seq: &s.seq,
		mem: memory.DefaultAllocator, emitting: make(chan struct{}, 1), streams: map[string]*streamState{}, carried: map[string][]byte{}}
	for _, name := range names {
		st := states[name]
		if st == nil {
			return fmt.Errorf("read: stream %q is not in the settings (streams: %v)", name, cfg.streamNames())
		}
		if enc, ok := cp.Schemas[name]; ok {
			if st, err = restore(st, enc); err != nil {
				return fmt.Errorf("read from checkpoint %d: stream %s: %w", cp.Seq, name, err)
			}
		}
		sess.streams[name] = st
	}
	for name, enc := range cp.Schemas {
		if !slices.Contains(names, name) {
			sess.carried[name] = enc
		}
	}
	if err := s.serveHTTP(cfg); err != nil {
		return err
	}
	for {
		cur := s.seq.Load()
		if cp.Seq <= cur || s.seq.CompareAndSwap(cur, cp.Seq) {
			break
		}
	}
	s.install(sess)
	defer s.uninstall(sess)
	if err := sess.start(); err != nil {
		return err
	}
	<-ctx.Done()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// restore returns st evolved to the schema a checkpoint holds (what the log already carries), with the
// settings' schema merged in. Merging widens to text on a conflict whatever the policy: both schemas are
// already in use, so neither may be refused.
func restore(st *streamState, enc []byte) (*streamState, error) {
	sc, err := protocol.DecodeSchema(memory.DefaultAllocator, enc)
	if err != nil {
		return nil, err
	}
	fields, _, err := infer.Merge(change.DataFields(sc), st.fields, infer.Options{Conflict: infer.WidenToString})
	if err != nil {
		return nil, err
	}
	next, err := newState(st.name, st.keys, fields, st.initial)
	if err != nil {
		return nil, err
	}
	// The log holds the checkpoint's schema; only a schema the settings changed needs announcing again.
	next.announced = string(next.encoded) == string(enc)
	return next, nil
}

// install makes sess the Read requests go to, ending the one before it.
func (s *Source) install(sess *session) {
	s.mu.Lock()
	prev := s.cur
	s.cur = sess
	s.mu.Unlock()
	if prev != nil {
		prev.cancel(errors.New("replaced by a newer Read"))
		prev.end(errUnavailable)
	}
}

func (s *Source) uninstall(sess *session) {
	sess.end(errUnavailable)
	s.mu.Lock()
	if s.cur == sess {
		s.cur = nil
	}
	s.mu.Unlock()
}

func (s *Source) current() *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Ack releases the requests whose checkpoints are at or below the acknowledged one: their clients get 200.
func (s *Source) Ack(_ context.Context, raw []byte) error {
	inner, _, err := protect.Unwrap(raw)
	if err != nil {
		return err
	}
	cp, err := parseCheckpoint(inner)
	if err != nil {
		return err
	}
	if sess := s.current(); sess != nil {
		sess.ack(cp.Seq)
	}
	return nil
}

// serveHTTP makes sure the listener runs with cfg: a new address means a new listener.
func (s *Source) serveHTTP(cfg *settings) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil || s.srv.listen != cfg.Listen || !sameTLS(s.srv.tls, cfg.TLS) {
		if s.srv != nil {
			s.srv.close()
			s.srv = nil
		}
		srv, err := startServer(s, cfg)
		if err != nil {
			return err
		}
		s.srv = srv
		slog.Info("listening", "addr", srv.addr, "tls", cfg.TLS != nil, "client_certificates", cfg.TLS != nil && cfg.TLS.ClientCAFile != "")
		if cfg.BearerToken != "" {
			slog.Warn("settings: bearer_token is deprecated; use tokens: [{name, token}], which lets a token be rotated without downtime")
		}
	}
	s.srv.cfg.Store(cfg)
	if cfg.AddressFile != "" {
		if err := writeFileAtomic(cfg.AddressFile, []byte(s.srv.addr+"\n")); err != nil {
			return fmt.Errorf("address_file: %w", err)
		}
	}
	return nil
}

// writeFileAtomic replaces path so a reader never sees a partial address.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// plugin is a running skippr-plugin-http process, started the way the engine starts it.
type plugin struct {
	c        *client.Client
	settings []byte
	addrFile string
}

// startPlugin starts the binary with settings: stream "events" keyed by /id on a free port, plus extra
// (which replaces top-level keys).
func startPlugin(t *testing.T, bin string, extra map[string]any) *plugin {
	t.Helper()
	dir := t.TempDir()
	s := map[string]any{
		"listen":       "127.0.0.1:0",
		"address_file": filepath.Join(dir, "addr"),
		"streams":      map[string]any{"events": map[string]any{"primary_key": "/id"}},
	}
	maps.Copy(s, extra)
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return &plugin{c: startProcess(t, bin), settings: raw, addrFile: s["address_file"].(string)}
}

// startProcess starts the plugin binary; when the test fails (or a race-enabled build reports a race) the
// plugin's stderr is shown.
func startProcess(t *testing.T, bin string) *client.Client {
	t.Helper()
	c := conformance.Start(t, bin, nil)
	t.Cleanup(func() {
		tail := c.StderrTail()
		if strings.Contains(tail, "DATA RACE") {
			t.Errorf("the plugin reported a data race:\n%s", tail)
		} else if t.Failed() {
			t.Logf("plugin stderr:\n%s", tail)
		}
	})
	return c
}

// reading is a running Read as the engine would drive it, except that the test decides when to Ack.
type reading struct {
	t       *testing.T
	p       *plugin
	cancel  context.CancelFunc
	msgs    chan client.Message
	end     chan error
	base    string // http://host:port
	initial *pluginv2.Checkpoint
}

func (p *plugin) read(t *testing.T, from []byte) *reading {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rs, err := p.c.Read(ctx, p.settings, nil, from)
	if err != nil {
		cancel()
		t.Fatalf("read: %v", err)
	}
	r := &reading{t: t, p: p, cancel: cancel, msgs: make(chan client.Message, 1000), end: make(chan error, 1)}
	t.Cleanup(cancel)
	go func() {
		for {
			m, err := rs.Next()
			if err != nil {
				r.end <- err
				close(r.msgs)
				return
			}
			r.msgs <- m
		}
	}()
	first := r.next()
	if first.Checkpoint == nil || !first.Checkpoint.Idle {
		t.Fatalf("a Read must start with an idle checkpoint, got %+v", first)
	}
	r.initial = first.Checkpoint
	addr, err := os.ReadFile(p.addrFile)
	if err != nil {
		t.Fatalf("address file: %v", err)
	}
	r.base = "http://" + strings.TrimSpace(string(addr))
	return r
}

// stop cancels the Read and waits for its stream to end.
func (r *reading) stop() {
	r.t.Helper()
	r.cancel()
	for range r.msgs {
	}
	select {
	case <-r.end:
	case <-time.After(10 * time.Second):
		r.t.Fatal("read did not end after cancel")
	}
}

func (r *reading) next() client.Message {
	r.t.Helper()
	select {
	case m, ok := <-r.msgs:
		if !ok {
			r.t.Fatalf("read ended: %v", <-r.end)
		}
		return m
	case <-time.After(10 * time.Second):
		r.t.Fatal("no message from the Read within 10s")
	}
	return client.Message{}
}

// expectNone fails if the Read emits anything within d.
func (r *reading) expectNone(d time.Duration, what string) {
	r.t.Helper()
	select {
	case m, ok := <-r.msgs:
		if ok {
			r.t.Fatalf("%s: the Read emitted %s", what, describeMsg(m))
		}
	case <-time.After(d):
	}
}

func describeMsg(m client.Message) string {
	switch {
	case m.Batch != nil:
		return "a batch of " + m.Batch.Stream
	case m.Schema != nil:
		return "a schema change of " + m.Schema.Name
	case m.Checkpoint != nil:
		return "checkpoint " + string(m.Checkpoint.Position)
	}
	return "nothing"
}

// emitted is what one request emitted: an optional schema change, batches, and the checkpoint after them.
type emitted struct {
	schema     *arrow.Schema
	batches    []arrow.RecordBatch
	checkpoint *pluginv2.Checkpoint
}

// nextChange reads the messages of one request up to its checkpoint, checking their order.
func (r *reading) nextChange() emitted {
	r.t.Helper()
	var c emitted
	for {
		m := r.next()
		switch {
		case m.Schema != nil:
			if len(c.batches) > 0 || c.schema != nil {
				r.t.Fatalf("schema change after a batch or a second one within one request")
			}
			sc, err := protocol.DecodeSchema(memory.DefaultAllocator, m.Schema.ArrowSchema)
			if err != nil {
				r.t.Fatal(err)
			}
			c.schema = sc
		case m.Batch != nil:
			recs, sc, err := protocol.DecodeRecords(memory.DefaultAllocator, m.Batch.IPC)
			if err != nil {
				r.t.Fatal(err)
			}
			if c.schema != nil && !sc.Equal(c.schema) {
				r.t.Fatalf("batch schema %s differs from the schema change before it %s", sc, c.schema)
			}
			r.t.Cleanup(func() {
				for _, rec := range recs {
					rec.Release()
				}
			})
			c.batches = append(c.batches, recs...)
		case m.Checkpoint != nil:
			c.checkpoint = m.Checkpoint
			return c
		}
	}
}

func (r *reading) ack(cp *pluginv2.Checkpoint) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.p.c.Ack(ctx, cp.Position); err != nil {
		r.t.Fatalf("ack: %v", err)
	}
}

// autoAck acks every checkpoint as it arrives, as the engine does after each commit, and returns a channel
// of everything read.
func (r *reading) autoAck() <-chan client.Message {
	out := make(chan client.Message, 10000)
	go func() {
		defer close(out)
		for m := range r.msgs {
			if m.Checkpoint != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := r.p.c.Ack(ctx, m.Checkpoint.Position)
				cancel()
				if err != nil {
					return
				}
			}
			out <- m
		}
	}()
	return out
}

// roundTrip posts q, reads what it emitted, acks it and returns the response.
func (r *reading) roundTrip(q req) (emitted, response) {
	r.t.Helper()
	ch := r.postAsync(q)
	c := r.nextChange()
	r.ack(c.checkpoint)
	return c, waitResponse(r.t, ch, 10*time.Second)
}

type response struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

type req struct {
	path    string // default /v1/streams/events
	body    []byte
	ctype   string // default application/json
	headers map[string]string
}

func (r *reading) post(q req) response {
	r.t.Helper()
	res, err := doPost(r.base, q)
	if err != nil {
		r.t.Fatal(err)
	}
	return res
}

// postAsync posts in the background; the channel yields the response.
func (r *reading) postAsync(q req) <-chan response {
	ch := make(chan response, 1)
	go func() {
		res, err := doPost(r.base, q)
		if err != nil {
			res = response{status: -1, raw: err.Error()}
		}
		ch <- res
	}()
	return ch
}

func doPost(base string, q req) (response, error) {
	return doPostWith(&http.Client{Timeout: 30 * time.Second}, base, q)
}

// doPostWith posts with hc, e.g. a client with its own TLS configuration.
func doPostWith(hc *http.Client, base string, q req) (response, error) {
	if q.path == "" {
		q.path = "/v1/streams/events"
	}
	if q.ctype == "" {
		q.ctype = "application/json"
	}
	hr, err := http.NewRequest(http.MethodPost, base+q.path, bytes.NewReader(q.body))
	if err != nil {
		return response{}, err
	}
	hr.Header.Set("Content-Type", q.ctype)
	for k, v := range q.headers {
		hr.Header.Set(k, v)
	}
	resp, err := hc.Do(hr)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	out := response{status: resp.StatusCode, header: resp.Header, raw: string(b)}
	if err := json.Unmarshal(b, &out.body); err != nil {
		return out, errors.New("response body is not JSON: " + string(b))
	}
	return out, nil
}

func waitResponse(t *testing.T, ch <-chan response, within time.Duration) response {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("no HTTP response within %s", within)
	}
	return response{}
}

// column returns the values of a column as the strings Arrow prints them.
func column(t *testing.T, rec arrow.RecordBatch, name string) []string {
	t.Helper()
	idx := rec.Schema().FieldIndices(name)
	if len(idx) != 1 {
		t.Fatalf("batch has no column %q: %s", name, rec.Schema())
	}
	col := rec.Column(idx[0])
	out := make([]string, col.Len())
	for i := range out {
		out[i] = col.ValueStr(i)
	}
	return out
}

// seqOf reads the request counter of a checkpoint.
func seqOf(t *testing.T, position []byte) uint64 {
	t.Helper()
	var cp struct{ Seq uint64 }
	if err := json.Unmarshal(position, &cp); err != nil {
		t.Fatalf("checkpoint %s: %v", position, err)
	}
	return cp.Seq
}

func fieldNames(fs []arrow.Field) string {
	var names []string
	for _, f := range fs {
		names = append(names, f.Name)
	}
	return strings.Join(names, ",")
}

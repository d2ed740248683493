// Package conformance is a test kit a plugin author runs against their own plugin binary: it starts the binary
// the way the engine does (go-plugin, checksum, no host environment) and checks the protocol's promises.
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Config{Binary: "./bin/skippr-plugin-foo", Settings: []byte(`{...}`)})
//	}
package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	pluginv1 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v1"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// Config says what to test.
type Config struct {
	// Binary is the plugin to start.
	Binary string
	// Env is the plugin's environment (the host's is never passed).
	Env []string
	// Settings work: Check passes, Discover and Read (source) and Apply (destination) use them.
	Settings []byte
	// BadSettings, if set, must fail Check with a message.
	BadSettings []byte
	// Checkpoints is how many checkpoints the source read test waits for (default 3).
	Checkpoints int
	// NoReplay skips the source replay check, for sources whose data changes between reads.
	NoReplay bool
	// Timeout bounds each step (default 60s).
	Timeout time.Duration
}

// Run runs every check that applies to the plugin's kind, each as a subtest.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.Checkpoints == 0 {
		cfg.Checkpoints = 3
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 60 * time.Second
	}
	c := Start(t, cfg.Binary, cfg.Env)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	spec, err := c.Spec(ctx)
	if err != nil {
		t.Fatalf("spec: %v", err)
	}
	t.Run("spec", func(t *testing.T) { checkSpec(t, spec) })
	t.Run("check", func(t *testing.T) { checkCheck(ctx, t, c, cfg) })
	if spec.Kind == pluginv1.Kind_KIND_SOURCE || spec.Kind == pluginv1.Kind_KIND_BOTH {
		t.Run("discover", func(t *testing.T) { checkDiscover(ctx, t, c, cfg) })
		t.Run("read-ack-replay", func(t *testing.T) { checkRead(ctx, t, c, cfg) })
	}
	if spec.Kind == pluginv1.Kind_KIND_DESTINATION || spec.Kind == pluginv1.Kind_KIND_BOTH {
		t.Run("apply-replay", func(t *testing.T) { checkApply(ctx, t, c, cfg) })
	}
}

// Start starts a plugin binary with its checksum pinned, and kills it when the test ends.
func Start(t testing.TB, binary string, env []string) *client.Client {
	t.Helper()
	data, err := os.ReadFile(binary)
	if err != nil {
		t.Fatalf("read plugin binary: %v", err)
	}
	sum := sha256.Sum256(data)
	c, err := client.Start(context.Background(), client.Config{Path: binary, SHA256: sum[:], Env: env})
	if err != nil {
		t.Fatalf("start plugin: %v", err)
	}
	t.Cleanup(c.Kill)
	return c
}

func checkSpec(t *testing.T, spec *pluginv1.SpecResponse) {
	if spec.Name == "" || spec.Version == "" {
		t.Errorf("spec: name %q and version %q must both be set", spec.Name, spec.Version)
	}
	if spec.Kind == pluginv1.Kind_KIND_UNSPECIFIED {
		t.Errorf("spec: kind is unspecified")
	}
	if _, err := CompileSchema(spec.SettingsSchema); err != nil {
		t.Errorf("spec: settings schema: %v", err)
	}
}

// CompileSchema compiles a settings JSON Schema.
func CompileSchema(schema []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	comp := jsonschema.NewCompiler()
	if err := comp.AddResource("settings.json", doc); err != nil {
		return nil, err
	}
	return comp.Compile("settings.json")
}

func checkCheck(ctx context.Context, t *testing.T, c *client.Client, cfg Config) {
	if err := c.Check(ctx, cfg.Settings); err != nil {
		t.Errorf("check with good settings failed: %v", err)
	}
	if cfg.BadSettings != nil {
		err := c.Check(ctx, cfg.BadSettings)
		var ce *client.CheckError
		if !errors.As(err, &ce) || ce.Message == "" {
			t.Errorf("check with bad settings: want a failed check with a message, got %v", err)
		}
	}
}

func checkDiscover(ctx context.Context, t *testing.T, c *client.Client, cfg Config) {
	streams, err := c.Discover(ctx, cfg.Settings)
	if err != nil {
		t.Fatalf("discover: %v", err)
	}
	if len(streams) == 0 {
		t.Fatalf("discover: no streams")
	}
	for _, st := range streams {
		sc, err := protocol.DecodeSchema(memory.DefaultAllocator, st.ArrowSchema)
		if err != nil {
			t.Errorf("stream %s: %v", st.Name, err)
			continue
		}
		if idx := sc.FieldIndices(change.OpColumn); len(idx) != 1 {
			t.Errorf("stream %s: schema has no %s column", st.Name, change.OpColumn)
		}
		for _, k := range st.PrimaryKey {
			if len(sc.FieldIndices(k)) != 1 {
				t.Errorf("stream %s: primary key %q is not a column", st.Name, k)
			}
		}
	}
}

type readResult struct {
	checkpoints [][]byte
	// after[i] holds the batches read after checkpoint i.
	after map[int][]protocol.Batch
}

func read(ctx context.Context, c *client.Client, settings, from []byte, checkpoints int) (readResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rs, err := c.Read(ctx, settings, nil, from)
	if err != nil {
		return readResult{}, err
	}
	res := readResult{after: map[int][]protocol.Batch{}}
	for len(res.checkpoints) < checkpoints {
		m, err := rs.Next()
		if errors.Is(err, io.EOF) {
			return res, fmt.Errorf("read ended after %d checkpoints, want %d", len(res.checkpoints), checkpoints)
		}
		if err != nil {
			return res, err
		}
		switch {
		case m.Batch != nil:
			res.after[len(res.checkpoints)] = append(res.after[len(res.checkpoints)], *m.Batch)
		case m.Checkpoint != nil:
			res.checkpoints = append(res.checkpoints, m.Checkpoint.Position)
			if m.Checkpoint.Idle && len(res.checkpoints) < checkpoints {
				return res, nil
			}
		}
	}
	return res, nil
}

func checkRead(ctx context.Context, t *testing.T, c *client.Client, cfg Config) {
	first, err := read(ctx, c, cfg.Settings, nil, cfg.Checkpoints)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if len(first.checkpoints) == 0 {
		t.Fatalf("read: no checkpoint")
	}
	for i, bs := range first.after {
		for _, b := range bs {
			checkBatch(t, fmt.Sprintf("batch after checkpoint %d", i), b)
		}
	}
	if err := c.Ack(ctx, first.checkpoints[0]); err != nil {
		t.Errorf("ack: %v", err)
	}
	if cfg.NoReplay || len(first.checkpoints) < 2 {
		return
	}
	// Reading again from checkpoint 0 must yield what followed it the first time.
	second, err := read(ctx, c, cfg.Settings, first.checkpoints[0], 1)
	if err != nil {
		t.Fatalf("read from checkpoint %q: %v", first.checkpoints[0], err)
	}
	if !bytes.Equal(second.checkpoints[0], first.checkpoints[1]) {
		t.Errorf("replay from %q reached checkpoint %q, first read reached %q", first.checkpoints[0], second.checkpoints[0], first.checkpoints[1])
	}
	if !sameBatches(t, first.after[1], second.after[0]) {
		t.Errorf("replay from checkpoint %q returned other rows than the first read", first.checkpoints[0])
	}
}

func checkBatch(t *testing.T, what string, b protocol.Batch) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	recs, _, err := protocol.DecodeRecords(mem, b.IPC)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	var rows int64
	for _, r := range recs {
		rows += r.NumRows()
		if _, err := change.Ops(r); err != nil {
			t.Errorf("%s: %v", what, err)
		}
		r.Release()
	}
	if rows != b.Rows {
		t.Errorf("%s: batch says %d rows, holds %d", what, b.Rows, rows)
	}
}

func sameBatches(t *testing.T, a, b []protocol.Batch) bool {
	decode := func(bs []protocol.Batch) []arrow.RecordBatch {
		var out []arrow.RecordBatch
		for _, x := range bs {
			recs, _, err := protocol.DecodeRecords(memory.DefaultAllocator, x.IPC)
			if err != nil {
				t.Errorf("decode: %v", err)
			}
			out = append(out, recs...)
		}
		return out
	}
	ra, rb := decode(a), decode(b)
	if len(ra) != len(rb) {
		return false
	}
	for i := range ra {
		if !array.RecordEqual(ra[i], rb[i]) {
			return false
		}
	}
	return true
}

func checkApply(ctx context.Context, t *testing.T, c *client.Client, cfg Config) {
	caps, err := c.Capabilities(ctx, cfg.Settings)
	if err != nil {
		t.Fatalf("capabilities: %v", err)
	}
	if !caps.ExactlyOnce && caps.ExactlyOnceNote == "" {
		t.Errorf("capabilities: a destination without exactly-once must say why (exactly_once_note)")
	}
	pipeline := fmt.Sprintf("conformance-%d", time.Now().UnixNano())
	la, err := c.LastApplied(ctx, cfg.Settings, pipeline)
	if err != nil {
		t.Fatalf("last applied: %v", err)
	}
	if la.Sequence != 0 {
		t.Fatalf("last applied of a new pipeline: got %d, want 0", la.Sequence)
	}
	st, b1 := sampleBatch(t, []change.Op{change.OpInsert, change.OpInsert, change.OpInsert}, []int64{1, 2, 3})
	_, b2 := sampleBatch(t, []change.Op{change.OpUpdate, change.OpDelete}, []int64{1, 2})
	apply := func(seq uint64, items []client.ApplyItem) *pluginv1.ApplyResponse {
		r, err := c.Apply(ctx, cfg.Settings, pipeline, seq, items)
		if err != nil {
			t.Fatalf("apply %d: %v", seq, err)
		}
		return r
	}
	if r := apply(1, []client.ApplyItem{{Schema: st}, {Batch: &b1}}); r.Skipped {
		t.Errorf("apply 1: skipped on a new pipeline")
	}
	if caps.ExactlyOnce {
		if r := apply(1, []client.ApplyItem{{Schema: st}, {Batch: &b1}}); !r.Skipped {
			t.Errorf("apply 1 again: a destination offering exactly-once must skip a sequence number it holds")
		}
	}
	apply(2, []client.ApplyItem{{Batch: &b2}})
	la, err = c.LastApplied(ctx, cfg.Settings, pipeline)
	if err != nil {
		t.Fatalf("last applied: %v", err)
	}
	if caps.ExactlyOnce && la.Sequence != 2 {
		t.Errorf("last applied after applying 1 and 2: got %d", la.Sequence)
	}
}

// sampleBatch builds a change batch of stream "conformance" with columns id (key) and name.
func sampleBatch(t *testing.T, ops []change.Op, ids []int64) (*pluginv1.Stream, protocol.Batch) {
	sc := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	}, []string{"id"})
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i, op := range ops {
		b.Field(0).(*array.Int64Builder).Append(ids[i])
		if op == change.OpDelete {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("name-%d-%s", ids[i], op))
		}
		b.Row(op, "")
	}
	rec := b.NewBatch()
	defer rec.Release()
	ipcBytes, err := protocol.EncodeRecord(memory.DefaultAllocator, rec)
	if err != nil {
		t.Fatal(err)
	}
	schemaBytes, err := protocol.EncodeSchema(memory.DefaultAllocator, sc)
	if err != nil {
		t.Fatal(err)
	}
	return &pluginv1.Stream{Name: "conformance", ArrowSchema: schemaBytes, PrimaryKey: []string{"id"}, SchemaId: protocol.SchemaID(sc)},
		protocol.Batch{Stream: "conformance", SchemaID: protocol.SchemaID(sc), Rows: rec.NumRows(), IPC: ipcBytes}
}

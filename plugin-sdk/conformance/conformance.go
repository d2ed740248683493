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
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
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
	// Checkpoints is how many checkpoints the first source read waits for (default 3, at least 2); it stops
	// earlier at an idle checkpoint. The replay check reads again from the first checkpoint up to the last.
	Checkpoints int
	// ResumeSettings are used for the replay check when a read with Settings is idle after fewer than two
	// checkpoints (its whole input fits one batch): the same input with settings under which the source
	// checkpoints inside it, such as a batch size of 1. Without them such a source fails the kit.
	ResumeSettings []byte
	// NoReplay skips the source replay check, for sources that cannot read the same data twice (a push
	// source whose data lives in its clients' requests).
	NoReplay bool
	// Timeout bounds the whole run (default 60s).
	Timeout time.Duration
	// Rows, if set, reads back what a destination holds of a stream: each row's key (the id column's value as
	// text) to its data columns as text (absent when the row is gone). The truncate and resnapshot checks then
	// check the rows they leave behind, not only that the applies succeed and are skipped when replayed.
	Rows func(stream string) (map[string]map[string]string, error)
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
	if spec.Kind == pluginv2.Kind_KIND_SOURCE || spec.Kind == pluginv2.Kind_KIND_BOTH {
		t.Run("discover", func(t *testing.T) { checkDiscover(ctx, t, c, cfg) })
		t.Run("read-ack-replay", func(t *testing.T) { checkRead(ctx, t, c, cfg) })
	}
	if spec.Kind == pluginv2.Kind_KIND_DESTINATION || spec.Kind == pluginv2.Kind_KIND_BOTH {
		t.Run("apply-replay", func(t *testing.T) { checkApply(ctx, t, c, cfg) })
	}
	checkServices(ctx, t, c, spec, cfg)
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

func checkSpec(t *testing.T, spec *pluginv2.SpecResponse) {
	if spec.Name == "" || spec.Version == "" {
		t.Errorf("spec: name %q and version %q must both be set", spec.Name, spec.Version)
	}
	if spec.Kind == pluginv2.Kind_KIND_UNSPECIFIED {
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
		if err := checkStreamSchema(st, sc); err != nil {
			t.Errorf("discover: %v", err)
		}
	}
}

// checkStreamSchema checks a stream's change schema: the reserved columns' types, and that the key declared in
// Stream.PrimaryKey is the one recorded in the schema's metadata (destinations read either) and names columns.
func checkStreamSchema(st *pluginv2.Stream, sc *arrow.Schema) error {
	var errs []error
	if idx := sc.FieldIndices(change.OpColumn); len(idx) != 1 {
		errs = append(errs, fmt.Errorf("schema has no %s column: build it with change.Schema", change.OpColumn))
	} else if f := sc.Field(idx[0]); f.Type.ID() != arrow.INT8 {
		errs = append(errs, fmt.Errorf("column %s is %s, want int8 (change.OpField)", change.OpColumn, f.Type))
	}
	if idx := sc.FieldIndices(change.PosColumn); len(idx) > 1 {
		errs = append(errs, fmt.Errorf("schema has %d %s columns, want at most one", len(idx), change.PosColumn))
	} else if len(idx) == 1 && sc.Field(idx[0]).Type.ID() != arrow.STRING {
		errs = append(errs, fmt.Errorf("column %s is %s, want utf8 (change.PosField)", change.PosColumn, sc.Field(idx[0]).Type))
	}
	if idx := sc.FieldIndices(change.CommittedColumn); len(idx) > 1 {
		errs = append(errs, fmt.Errorf("schema has %d %s columns, want at most one", len(idx), change.CommittedColumn))
	} else if len(idx) == 1 && !arrow.TypeEqual(sc.Field(idx[0]).Type, change.CommittedField.Type) {
		errs = append(errs, fmt.Errorf("column %s is %s, want %s (change.CommittedField)", change.CommittedColumn, sc.Field(idx[0]).Type, change.CommittedField.Type))
	}
	if meta := change.PrimaryKey(sc); !slices.Equal(meta, st.PrimaryKey) {
		errs = append(errs, fmt.Errorf("Stream.PrimaryKey is %q but the schema's %s metadata says %q: declare the same key in both (change.Schema(fields, key) and Stream{PrimaryKey: key})",
			st.PrimaryKey, change.PrimaryKeyMeta, meta))
	}
	for _, k := range st.PrimaryKey {
		if len(sc.FieldIndices(k)) != 1 {
			errs = append(errs, fmt.Errorf("primary key %q is not a column", k))
		}
	}
	if id := protocol.SchemaID(sc); st.SchemaId != "" && st.SchemaId != id {
		errs = append(errs, fmt.Errorf("schema_id %s is not the schema's fingerprint %s", st.SchemaId, id))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stream %s: %w", st.Name, err)
	}
	return nil
}

type segment []client.Message

type readResult struct {
	checkpoints [][]byte
	// segments[i] holds what was emitted after checkpoint i-1 (segments[0]: before the first checkpoint).
	segments []segment
}

// read reads until it has seen want checkpoints or an idle one.
func read(ctx context.Context, c *client.Client, settings, from []byte, want int) (readResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rs, err := c.Read(ctx, settings, nil, from)
	if err != nil {
		return readResult{}, err
	}
	res := readResult{segments: []segment{nil}}
	for len(res.checkpoints) < want {
		m, err := rs.Next()
		if errors.Is(err, io.EOF) {
			return res, fmt.Errorf("read ended after %d checkpoints, want %d: a source's Read runs until it is cancelled (emit an idle checkpoint and wait when everything is read)", len(res.checkpoints), want)
		}
		if err != nil {
			return res, err
		}
		if m.Checkpoint == nil {
			res.segments[len(res.segments)-1] = append(res.segments[len(res.segments)-1], m)
			continue
		}
		res.checkpoints = append(res.checkpoints, m.Checkpoint.Position)
		res.segments = append(res.segments, nil)
		if m.Checkpoint.Idle {
			break
		}
	}
	return res, nil
}

func checkRead(ctx context.Context, t *testing.T, c *client.Client, cfg Config) {
	streams, err := c.Discover(ctx, cfg.Settings)
	if err != nil {
		t.Fatalf("discover: %v", err)
	}
	want := max(cfg.Checkpoints, 2)
	first := readChecked(ctx, t, c, cfg.Settings, nil, want, streams)
	if err := c.Ack(ctx, first.checkpoints[0]); err != nil {
		t.Errorf("ack: %v", err)
	}
	if cfg.NoReplay {
		return
	}
	settings := cfg.Settings
	if len(first.checkpoints) < 2 {
		// The whole input came before the first checkpoint: nothing was read after a checkpoint, so a resume
		// from one would prove nothing. Read the same input with settings that checkpoint inside it.
		if err := needResumeSettings(cfg, len(first.checkpoints)); err != nil {
			t.Fatalf("read: %v", err)
		}
		settings = cfg.ResumeSettings
		if streams, err = c.Discover(ctx, settings); err != nil {
			t.Fatalf("discover with ResumeSettings: %v", err)
		}
		first = readChecked(ctx, t, c, settings, nil, want, streams)
		if len(first.checkpoints) < 2 {
			t.Fatalf("read with ResumeSettings: the source was idle after %d checkpoint(s), want at least 2: make ResumeSettings checkpoint more often", len(first.checkpoints))
		}
	}
	// Reading again from checkpoint 0 must yield what followed it the first time, up to the last checkpoint.
	second := readChecked(ctx, t, c, settings, first.checkpoints[0], len(first.checkpoints)-1, streams)
	for i := 1; i < len(first.checkpoints); i++ {
		if i-1 >= len(second.checkpoints) {
			t.Errorf("replay from checkpoint %q was idle at checkpoint %q, the first read went on to %q", first.checkpoints[0], second.checkpoints[len(second.checkpoints)-1], first.checkpoints[i])
			return
		}
		if !bytes.Equal(second.checkpoints[i-1], first.checkpoints[i]) {
			t.Errorf("replay from checkpoint %q: checkpoint %d is %q, the first read's was %q", first.checkpoints[0], i-1, second.checkpoints[i-1], first.checkpoints[i])
		}
		if err := sameRows(first.segments[i], second.segments[i-1]); err != nil {
			t.Errorf("replay from checkpoint %q, before checkpoint %q: %v", first.checkpoints[0], first.checkpoints[i], err)
		}
	}
}

// needResumeSettings says why the replay check cannot run on a source idle after n < 2 checkpoints.
func needResumeSettings(cfg Config, n int) error {
	if cfg.ResumeSettings != nil {
		return nil
	}
	return fmt.Errorf("the source was idle after %d checkpoint(s), so a resume from a checkpoint cannot be tested: "+
		"set Config.ResumeSettings to settings that make it checkpoint at least twice (a smaller batch size), "+
		"or Config.NoReplay if it cannot read the same data twice", n)
}

// readChecked reads and checks every batch against the stream schemas Discover reported.
func readChecked(ctx context.Context, t *testing.T, c *client.Client, settings, from []byte, want int, streams []*pluginv2.Stream) readResult {
	t.Helper()
	res, err := read(ctx, c, settings, from, want)
	if err != nil {
		t.Fatalf("read from %q: %v", from, err)
	}
	if len(res.checkpoints) == 0 {
		t.Fatalf("read from %q: no checkpoint", from)
	}
	for _, err := range checkSegments(streams, res.segments) {
		t.Errorf("read from %q: %v", from, err)
	}
	return res
}

// checkSegments checks that every batch belongs to a stream, carries the stream's schema as Discover (or a
// later schema change of the same read) reported it, and is a well-formed change batch.
func checkSegments(streams []*pluginv2.Stream, segs []segment) []error {
	schemas := map[string]string{}
	for _, st := range streams {
		schemas[st.Name] = st.SchemaId
	}
	var errs []error
	for i, seg := range segs {
		for j, m := range seg {
			where := fmt.Sprintf("message %d after checkpoint %d", j, i)
			if i == 0 {
				where = fmt.Sprintf("message %d before the first checkpoint", j)
			}
			if m.Schema != nil {
				sc, err := protocol.DecodeSchema(memory.DefaultAllocator, m.Schema.ArrowSchema)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: schema change of stream %s: %w", where, m.Schema.Name, err))
					continue
				}
				if err := checkStreamSchema(m.Schema, sc); err != nil {
					errs = append(errs, fmt.Errorf("%s: schema change: %w", where, err))
				}
				schemas[m.Schema.Name] = protocol.SchemaID(sc)
				continue
			}
			if m.Batch == nil {
				continue
			}
			id, ok := schemas[m.Batch.Stream]
			if !ok {
				errs = append(errs, fmt.Errorf("%s: batch of stream %q, which Discover did not report and no schema change announced", where, m.Batch.Stream))
				continue
			}
			if err := checkBatch(*m.Batch, id); err != nil {
				errs = append(errs, fmt.Errorf("%s: batch of stream %s: %w", where, m.Batch.Stream, err))
			}
		}
	}
	return errs
}

func checkBatch(b protocol.Batch, schemaID string) error {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	recs, _, err := protocol.DecodeRecords(mem, b.IPC)
	if err != nil {
		return err
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	var rows int64
	for _, r := range recs {
		rows += r.NumRows()
		if got := protocol.SchemaID(r.Schema()); got != schemaID || b.SchemaID != schemaID {
			return fmt.Errorf("schema %s (says %s) is not the stream's schema %s: emit a schema change before the first batch with a new schema, or build batches with the schema Discover returns:\n%s",
				got, b.SchemaID, schemaID, r.Schema())
		}
		ops, err := change.Ops(r)
		if err != nil {
			return err
		}
		for i := range ops.Len() {
			if ops.IsNull(i) || ops.Value(i) < int8(change.OpRead) || ops.Value(i) > int8(change.OpDelete) {
				return fmt.Errorf("row %d: %s is %s, want 0 (read), 1 (insert), 2 (update) or 3 (delete)", i, change.OpColumn, ops.ValueStr(i))
			}
		}
	}
	if rows != b.Rows {
		return fmt.Errorf("batch says %d rows, holds %d", b.Rows, rows)
	}
	return nil
}

// sameRows compares the rows of two reads row by row, stream and every column (the position column included),
// whatever the batch boundaries.
func sameRows(a, b segment) error {
	ra, err := rowsOf(a)
	if err != nil {
		return fmt.Errorf("first read: %w", err)
	}
	defer releaseAll(ra)
	rb, err := rowsOf(b)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer releaseAll(rb)
	ca, cb := cursor{recs: ra}, cursor{recs: rb}
	for n := 0; ; n++ {
		okA, okB := ca.next(), cb.next()
		switch {
		case !okA && !okB:
			return nil
		case !okA:
			return fmt.Errorf("the replay has more rows than the first read (%d)", n)
		case !okB:
			return fmt.Errorf("the replay has %d rows, the first read had more", n)
		}
		if err := sameRow(ca, cb); err != nil {
			return fmt.Errorf("row %d: %w", n, err)
		}
	}
}

type streamRec struct {
	stream string
	rec    arrow.RecordBatch
}

func rowsOf(seg segment) ([]streamRec, error) {
	var out []streamRec
	for _, m := range seg {
		if m.Batch == nil {
			continue
		}
		recs, _, err := protocol.DecodeRecords(memory.DefaultAllocator, m.Batch.IPC)
		if err != nil {
			releaseAll(out)
			return nil, fmt.Errorf("decode batch of stream %s: %w", m.Batch.Stream, err)
		}
		for _, r := range recs {
			out = append(out, streamRec{m.Batch.Stream, r})
		}
	}
	return out, nil
}

func releaseAll(rs []streamRec) {
	for _, r := range rs {
		r.rec.Release()
	}
}

// cursor walks the rows of a list of records.
type cursor struct {
	recs []streamRec
	rec  int
	row  int64
	used bool
}

func (c *cursor) next() bool {
	if c.used {
		c.row++
	}
	c.used = true
	for c.rec < len(c.recs) && c.row >= c.recs[c.rec].rec.NumRows() {
		c.rec++
		c.row = 0
	}
	return c.rec < len(c.recs)
}

func sameRow(a, b cursor) error {
	sa, sb := a.recs[a.rec], b.recs[b.rec]
	if sa.stream != sb.stream {
		return fmt.Errorf("stream %s in the first read, %s in the replay", sa.stream, sb.stream)
	}
	if !sa.rec.Schema().Equal(sb.rec.Schema()) {
		return fmt.Errorf("stream %s: schema differs between the first read and the replay:\n%s\n%s", sa.stream, sa.rec.Schema(), sb.rec.Schema())
	}
	for c, f := range sa.rec.Schema().Fields() {
		x, y := sa.rec.Column(c), sb.rec.Column(c)
		if !array.SliceEqual(x, a.row, a.row+1, y, b.row, b.row+1) {
			return fmt.Errorf("stream %s, column %s: %q in the first read, %q in the replay", sa.stream, f.Name, x.ValueStr(int(a.row)), y.ValueStr(int(b.row)))
		}
	}
	return nil
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
	apply := func(seq uint64, items []client.ApplyItem) *pluginv2.ApplyResponse {
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
	if caps.Coalesce && caps.ExactlyOnce {
		t.Run("coalesce", func(t *testing.T) { checkCoalesce(ctx, t, c, cfg) })
	}
	checkCapabilities(ctx, t, c, cfg, caps)
}

// checkCoalesce: a destination offering coalesce applies a range of entries as one apply recording its last
// entry, skips a replay of a part of it, and of a range overlapping what it holds applies only the entries
// above its fence.
func checkCoalesce(ctx context.Context, t *testing.T, c *client.Client, cfg Config) {
	pipeline := fmt.Sprintf("conformance-coalesce-%d", time.Now().UnixNano())
	st, ins := sampleBatch(t, []change.Op{change.OpInsert, change.OpInsert, change.OpInsert}, []int64{1, 2, 3})
	_, upd := sampleBatch(t, []change.Op{change.OpUpdate, change.OpDelete}, []int64{1, 2})
	_, four := sampleBatch(t, []change.Op{change.OpInsert}, []int64{4})
	_, five := sampleBatch(t, []change.Op{change.OpInsert}, []int64{5})
	_, six := sampleBatch(t, []change.Op{change.OpUpdate}, []int64{5})
	applyRange := func(first, last uint64, items ...client.ApplyItem) *pluginv2.ApplyResponse {
		t.Helper()
		r, err := c.ApplyRange(ctx, cfg.Settings, pipeline, first, last, slices.Values(items))
		if err != nil {
			t.Fatalf("apply %d..%d: %v", first, last, err)
		}
		return r
	}
	lastApplied := func(want uint64, after string) {
		t.Helper()
		la, err := c.LastApplied(ctx, cfg.Settings, pipeline)
		if err != nil {
			t.Fatalf("last applied: %v", err)
		}
		if la.Sequence != want {
			t.Errorf("last applied after %s: got %d, want %d (the range's last entry)", after, la.Sequence, want)
		}
	}
	if r := applyRange(1, 3, client.ApplyItem{Entry: 1}, client.ApplyItem{Schema: st}, client.ApplyItem{Batch: &ins},
		client.ApplyItem{Entry: 2}, client.ApplyItem{Batch: &upd}, client.ApplyItem{Entry: 3}, client.ApplyItem{Batch: &four}); r.Skipped {
		t.Errorf("apply 1..3: skipped on a new pipeline")
	}
	lastApplied(3, "applying 1..3")
	if r := applyRange(2, 3, client.ApplyItem{Entry: 2}, client.ApplyItem{Batch: &upd}, client.ApplyItem{Entry: 3}, client.ApplyItem{Batch: &four}); !r.Skipped {
		t.Errorf("apply 2..3 after 1..3: a destination offering coalesce must skip a range it holds")
	}
	r := applyRange(3, 5, client.ApplyItem{Entry: 3}, client.ApplyItem{Batch: &four},
		client.ApplyItem{Entry: 4}, client.ApplyItem{Batch: &five}, client.ApplyItem{Entry: 5}, client.ApplyItem{Batch: &six})
	if r.Skipped {
		t.Errorf("apply 3..5 after 1..3: skipped, but entries 4 and 5 are new")
	}
	if r.Rows > 2 {
		t.Errorf("apply 3..5 after 1..3: %d rows applied; entry 3 (1 row) was applied again: items of entries at or below the fence must be skipped", r.Rows)
	}
	lastApplied(5, "applying 3..5")
}

// sampleBatch builds a change batch of stream "conformance" with columns id (key) and name.
func sampleBatch(t *testing.T, ops []change.Op, ids []int64) (*pluginv2.Stream, protocol.Batch) {
	return sampleBatchOf(t, "conformance", ops, ids)
}

// committedAt is the source commit time the sample batches carry (change.CommittedColumn), so that every
// destination meets the reserved column and must not write it as a user column or fail on it.
var committedAt = time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)

// sampleBatchOf builds a change batch of a stream with columns id (key) and name ("name-<id>-<op>").
func sampleBatchOf(t *testing.T, stream string, ops []change.Op, ids []int64) (*pluginv2.Stream, protocol.Batch) {
	return sampleBatchWith(t, stream, sampleSchema(), ops, ids)
}

// sampleSchema is the schema of sampleBatchOf's batches.
func sampleSchema() *arrow.Schema {
	return change.TimedSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	}, []string{"id"})
}

// sampleBatchWith is sampleBatchOf with sc, sampleSchema with other metadata, as the batch's schema.
func sampleBatchWith(t *testing.T, stream string, sc *arrow.Schema, ops []change.Op, ids []int64) (*pluginv2.Stream, protocol.Batch) {
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i, op := range ops {
		b.Field(0).(*array.Int64Builder).Append(ids[i])
		if op == change.OpDelete {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("name-%d-%s", ids[i], op))
		}
		b.RowAt(op, "", committedAt)
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
	return &pluginv2.Stream{Name: stream, ArrowSchema: schemaBytes, PrimaryKey: []string{"id"}, SchemaId: protocol.SchemaID(sc)},
		protocol.Batch{Stream: stream, SchemaID: protocol.SchemaID(sc), Rows: rec.NumRows(), IPC: ipcBytes}
}

// wideBatch is sampleBatchOf with a third column, extra ("extra-<id>"), added after the others.
func wideBatch(t *testing.T, stream string, ops []change.Op, ids []int64) (*pluginv2.Stream, protocol.Batch) {
	t.Helper()
	sc := change.TimedSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "extra", Type: arrow.BinaryTypes.String, Nullable: true},
	}, []string{"id"})
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i, op := range ops {
		b.Field(0).(*array.Int64Builder).Append(ids[i])
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("name-%d-%s", ids[i], op))
		b.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("extra-%d", ids[i]))
		b.RowAt(op, "", committedAt)
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
	return &pluginv2.Stream{Name: stream, ArrowSchema: schemaBytes, PrimaryKey: []string{"id"}, SchemaId: protocol.SchemaID(sc)},
		protocol.Batch{Stream: stream, SchemaID: protocol.SchemaID(sc), Rows: rec.NumRows(), IPC: ipcBytes}
}

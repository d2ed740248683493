package protect

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

const salt = "pepper-42"

func TestHashedValues(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	cases := []struct {
		name  string
		typ   arrow.DataType
		add   func(b array.Builder) // appends one value, or null
		canon string                // "" with null: the result is null
		null  bool
	}{
		{"int32", arrow.PrimitiveTypes.Int32, func(b array.Builder) { b.(*array.Int32Builder).Append(-42) }, "-42", false},
		{"int64", arrow.PrimitiveTypes.Int64, func(b array.Builder) { b.(*array.Int64Builder).Append(9007199254740993) }, "9007199254740993", false},
		{"uint64", arrow.PrimitiveTypes.Uint64, func(b array.Builder) { b.(*array.Uint64Builder).Append(18446744073709551615) }, "18446744073709551615", false},
		{"text", arrow.BinaryTypes.String, func(b array.Builder) { b.(*array.StringBuilder).Append("alice@example.com") }, "alice@example.com", false},
		{"large text", arrow.BinaryTypes.LargeString, func(b array.Builder) { b.(*array.LargeStringBuilder).Append("ünï") }, "ünï", false},
		{"bytes", arrow.BinaryTypes.Binary, func(b array.Builder) { b.(*array.BinaryBuilder).Append([]byte{0, 1, 0xff}) }, "\x00\x01\xff", false},
		{"float64", arrow.PrimitiveTypes.Float64, func(b array.Builder) { b.(*array.Float64Builder).Append(0.1) }, "0.1", false},
		{"bool", arrow.FixedWidthTypes.Boolean, func(b array.Builder) { b.(*array.BooleanBuilder).Append(true) }, "true", false},
		{"timestamptz us", &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, func(b array.Builder) {
			b.(*array.TimestampBuilder).Append(arrow.Timestamp(ts.UnixMicro()))
		}, "2026-01-02T03:04:05.123456Z", false},
		{"timestamp ns", &arrow.TimestampType{Unit: arrow.Nanosecond}, func(b array.Builder) {
			b.(*array.TimestampBuilder).Append(arrow.Timestamp(ts.UnixNano()))
		}, "2026-01-02T03:04:05.123456Z", false},
		{"null text", arrow.BinaryTypes.String, func(b array.Builder) { b.AppendNull() }, "", true},
		{"null int", arrow.PrimitiveTypes.Int64, func(b array.Builder) { b.AppendNull() }, "", true},
		{"null bytes", arrow.BinaryTypes.Binary, func(b array.Builder) { b.AppendNull() }, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			set, err := Compile("table_options", map[string]Table{"s.t": {ExcludeColumns: []string{"ssn"}, HashColumns: map[string]Hash{"v": {Salt: salt}}}})
			if err != nil {
				t.Fatal(err)
			}
			schema := change.Schema([]arrow.Field{
				{Name: "id", Type: arrow.PrimitiveTypes.Int64},
				{Name: "v", Type: tc.typ, Nullable: true, Metadata: arrow.NewMetadata([]string{"pg.type"}, []string{"whatever"})},
				{Name: "ssn", Type: arrow.BinaryTypes.String, Nullable: true},
			}, []string{"id"})
			if err := set.Check("s.t", schema, []string{"id"}, false); err != nil {
				t.Fatal(err)
			}
			b := change.NewBuilder(mem, schema)
			defer b.Release()
			for _, op := range []change.Op{change.OpRead, change.OpUpdate, change.OpDelete} {
				b.Field(0).(*array.Int64Builder).Append(1)
				tc.add(b.Field(1))
				b.Field(2).(*array.StringBuilder).Append("123-45-6789")
				b.Row(op, "0/1")
			}
			rec := b.NewBatch()
			defer rec.Release()
			out, err := set.Record(mem, "s.t", rec)
			if err != nil {
				t.Fatal(err)
			}
			defer out.Release()
			want := set.Schema("s.t", schema)
			if !out.Schema().Equal(want) {
				t.Fatalf("schema %s, want %s", out.Schema(), want)
			}
			if len(out.Schema().FieldIndices("ssn")) != 0 {
				t.Fatal("excluded column ssn is still there")
			}
			f := out.Schema().Field(1)
			if f.Name != "v" || f.Type.ID() != arrow.STRING || !f.Nullable {
				t.Fatalf("hashed field is %v", f)
			}
			if v, _ := f.Metadata.GetValue(MetaHashed); v != Algorithm || f.Metadata.Len() != 1 {
				t.Fatalf("hashed field metadata %v, want only %s", f.Metadata, MetaHashed)
			}
			col := out.Column(1).(*array.String)
			for i := range int(out.NumRows()) {
				if tc.null {
					if !col.IsNull(i) {
						t.Fatalf("row %d: null became %q", i, col.Value(i))
					}
					continue
				}
				if got, exp := col.Value(i), Digest([]byte(salt), []byte(tc.canon)); got != exp || len(got) != 64 {
					t.Fatalf("row %d: %q, want HMAC of %q = %q", i, got, tc.canon, exp)
				}
			}
			if ops, err := change.Ops(out); err != nil || ops.Value(2) != int8(change.OpDelete) {
				t.Fatalf("ops lost: %v", err)
			}
		})
	}
}

// The same value hashes alike whatever the integer width, and like its text: a hashed column joins across tables.
func TestDigestIsCanonical(t *testing.T) {
	if Digest([]byte(salt), []byte("42")) == Digest([]byte("other"), []byte("42")) {
		t.Fatal("the salt does not change the digest")
	}
}

func TestCompileAndCheckRefuse(t *testing.T) {
	schema := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "email", Type: arrow.BinaryTypes.String},
	}, []string{"id"})
	cases := []struct {
		name  string
		rules Table
		want  string // in the error
	}{
		{"empty salt", Table{HashColumns: map[string]Hash{"email": {}}}, "s.t.hash_columns.email.salt is empty"},
		{"both", Table{ExcludeColumns: []string{"email"}, HashColumns: map[string]Hash{"email": {Salt: salt}}}, "email is both excluded and hashed"},
		{"twice", Table{ExcludeColumns: []string{"email", "email"}}, "lists email twice"},
		{"missing column", Table{ExcludeColumns: []string{"ssn"}}, "table s.t has no column ssn (excluded)"},
		{"missing hashed", Table{HashColumns: map[string]Hash{"phone": {Salt: salt}}}, "table s.t has no column phone (hashed)"},
		{"reserved", Table{ExcludeColumns: []string{change.OpColumn}}, "_skippr_op is skippr's own column"},
		{"excluded key", Table{ExcludeColumns: []string{"id"}}, "key column id cannot be excluded"},
		{"hashed key", Table{HashColumns: map[string]Hash{"id": {Salt: salt}}}, "key column id cannot be hashed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set, err := Compile("table_options", map[string]Table{"s.t": tc.rules})
			if err == nil {
				err = set.Check("s.t", schema, []string{"id"}, false)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if fault.ClassOf(err) != fault.Config {
				t.Fatalf("error class %v, want config", fault.ClassOf(err))
			}
			if strings.Contains(err.Error(), salt) {
				t.Fatal("the error echoes the salt")
			}
		})
	}
	// A running pipeline's column may have been dropped since it started: no refusal. A key column still is.
	set, _ := Compile("table_options", map[string]Table{"s.t": {ExcludeColumns: []string{"gone"}}})
	if err := set.Check("s.t", schema, []string{"id"}, true); err != nil {
		t.Fatalf("a column dropped from a running pipeline's table: %v", err)
	}
	set, _ = Compile("table_options", map[string]Table{"s.t": {ExcludeColumns: []string{"id"}}})
	if err := set.Check("s.t", schema, []string{"id"}, true); err == nil {
		t.Fatal("a key column was accepted in a running pipeline")
	}
	if set, err := Compile("table_options", map[string]Table{"s.t": {}}); set != nil || err != nil {
		t.Fatalf("empty rules: %v, %v; want nil, nil", set, err)
	}
}

// _skippr_meta records an unrepresentable value in clear text: the entries of protected columns go.
func TestMetaScrubbed(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	set, err := Compile("table_options", map[string]Table{"s.t": {ExcludeColumns: []string{"a"}, HashColumns: map[string]Hash{"b": {Salt: salt}}}})
	if err != nil {
		t.Fatal(err)
	}
	schema := change.Schema(values.NullAndRecord.Fields([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "a", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "b", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "c", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	}), []string{"id"})
	b := change.NewBuilder(mem, schema)
	defer b.Release()
	metas := []string{
		`{"changes":[{"column":"a","reason":"r","value":"SECRET-A"},{"column":"c","reason":"r","value":"NaN"}]}`,
		`{"changes":[{"column":"b","reason":"r","value":"SECRET-B"}]}`,
	}
	for i, m := range metas {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		for j := 1; j <= 3; j++ {
			b.Field(j).AppendNull()
		}
		b.Field(4).(*array.StringBuilder).Append(m)
		b.Row(change.OpInsert, "")
	}
	rec := b.NewBatch()
	defer rec.Release()
	out, err := set.Record(mem, "s.t", rec)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Release()
	meta := out.Column(out.Schema().FieldIndices(change.MetaColumn)[0]).(*array.String)
	if got := meta.Value(0); got != `{"changes":[{"column":"c","reason":"r","value":"NaN"}]}` {
		t.Fatalf("row 0 meta %s", got)
	}
	if !meta.IsNull(1) {
		t.Fatalf("row 1 meta %s, want null", meta.Value(1))
	}
	if !out.Column(2).IsNull(0) {
		t.Fatal("a null hashed value is no longer null")
	}
}

type recorder struct {
	serve.Emitter
	schemas []*arrow.Schema
	batches []arrow.RecordBatch
	cps     [][]byte
}

func (r *recorder) SchemaChange(_ context.Context, s serve.Stream) error {
	r.schemas = append(r.schemas, s.Schema)
	return nil
}

func (r *recorder) Batch(_ context.Context, _ string, rec arrow.RecordBatch) error {
	rec.Retain()
	r.batches = append(r.batches, rec)
	return nil
}

func (r *recorder) Checkpoint(_ context.Context, cp serve.Checkpoint) error {
	r.cps = append(r.cps, cp.Position)
	return nil
}

// The emitter is what a source uses; checkpoints it wraps resume only under the same rules, or with a
// re-snapshot of the table whose rules changed.
func TestEmitterAndResume(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rules := func(s string) *Set {
		set, err := Compile("table_options", map[string]Table{"s.t": {HashColumns: map[string]Hash{"email": {Salt: s}}}})
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	set := rules(salt)
	rec := &recorder{}
	out := set.Emitter(rec, memory.DefaultAllocator, []string{"s.t", "s.u"}, false)
	schema := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "email", Type: arrow.BinaryTypes.String}}, []string{"id"})
	if err := out.SchemaChange(ctx, serve.Stream{Name: "s.t", Schema: schema}); err != nil {
		t.Fatal(err)
	}
	b := change.NewBuilder(memory.DefaultAllocator, schema)
	b.Field(0).(*array.Int64Builder).Append(1)
	b.Field(1).(*array.StringBuilder).Append("alice@example.com")
	b.Row(change.OpInsert, "")
	batch := b.NewBatch()
	b.Release()
	if err := out.Batch(ctx, "s.t", batch); err != nil {
		t.Fatal(err)
	}
	batch.Release()
	if err := out.Checkpoint(ctx, serve.Checkpoint{Position: []byte(`{"v":2,"lsn":"0/10"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := out.Checkpoint(ctx, serve.Checkpoint{Position: []byte("file.000001:4")}); err != nil {
		t.Fatal(err)
	}
	if got := rec.batches[0].Column(1).(*array.String).Value(0); got != Digest([]byte(salt), []byte("alice@example.com")) {
		t.Fatalf("emitted %q", got)
	}
	rec.batches[0].Release()
	if rec.schemas[0].Field(1).Type.ID() != arrow.STRING || rec.schemas[0].Field(1).Metadata.Len() != 1 {
		t.Fatalf("schema change not protected: %s", rec.schemas[0])
	}
	for i, cp := range rec.cps {
		if strings.Contains(string(cp), salt) {
			t.Fatalf("checkpoint %s holds the salt", cp)
		}
		pos, _, err := Unwrap(cp)
		if err != nil {
			t.Fatal(err)
		}
		wrapped, err := set.Resume(cp, nil, nil, log)
		if err != nil || !wrapped {
			t.Fatalf("resume %s: %v, wrapped %v", cp, err, wrapped)
		}
		if want := []string{`{"v":2,"lsn":"0/10"}`, "file.000001:4"}[i]; string(pos) != want {
			t.Fatalf("position %s, want %s", pos, want)
		}
	}
	cases := []struct {
		name       string
		set        *Set
		cp         []byte
		resnapshot []string
		refused    bool
	}{
		{"same rules", rules(salt), rec.cps[0], nil, false},
		{"other salt", rules("another"), rec.cps[0], nil, true},
		{"other salt, re-snapshot", rules("another"), rec.cps[0], []string{"s.t"}, false},
		{"rules removed", nil, rec.cps[0], nil, true},
		{"rules removed, re-snapshot", nil, rec.cps[0], []string{"s.t"}, false},
		{"rules added to a running pipeline", rules(salt), []byte(`{"v":2}`), nil, true},
		{"rules added with a re-snapshot", rules(salt), []byte(`{"v":2}`), []string{"s.t"}, false},
		{"no rules ever", nil, []byte(`{"v":2}`), nil, false},
		{"no checkpoint", rules(salt), nil, nil, false},
		{"table new to the pipeline", func() *Set {
			set, _ := Compile("table_options", map[string]Table{"s.new": {ExcludeColumns: []string{"x"}}})
			return set
		}(), []byte(`{"v":2}`), nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.set.Resume(tc.cp, []string{"s.t"}, tc.resnapshot, log)
			if tc.refused {
				if err == nil || fault.ClassOf(err) != fault.Config || !strings.Contains(err.Error(), "table s.t changed") || !strings.Contains(fault.FixOf(err), "skippr resnapshot PIPELINE s.t") {
					t.Fatalf("error %v, want a config fault naming s.t and the re-snapshot", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	if _, _, err := Unwrap([]byte(`{"skippr_protect":{`)); err == nil {
		t.Fatal("a damaged envelope was accepted")
	}
}

// TestWhereFingerprint: a row filter is part of a stream's fingerprint (a changed filter is refused like
// changed rules), and rules without one keep the fingerprint checkpoints already hold.
func TestWhereFingerprint(t *testing.T) {
	cp := func(tables map[string]Table) []byte {
		set, err := Compile("table_options", tables)
		if err != nil {
			t.Fatal(err)
		}
		b, err := wrap(map[string]string{"s.t": set.fingerprint("s.t")}, []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name     string
		old, now Table
		changed  bool
	}{
		{name: "same filter", old: Table{Where: "region = 'eu'"}, now: Table{Where: " region = 'eu' "}},
		{name: "other filter", old: Table{Where: "region = 'eu'"}, now: Table{Where: "region = 'us'"}, changed: true},
		{name: "filter added", old: Table{ExcludeColumns: []string{"a"}}, now: Table{ExcludeColumns: []string{"a"}, Where: "a > 1"}, changed: true},
		{name: "filter removed", old: Table{Where: "a > 1"}, now: Table{}, changed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now, err := Compile("table_options", map[string]Table{"s.t": tc.now})
			if err != nil {
				t.Fatal(err)
			}
			changed, _, err := now.Changed(cp(map[string]Table{"s.t": tc.old}), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(changed) > 0; got != tc.changed {
				t.Errorf("changed %v, want %v", changed, tc.changed)
			}
		})
	}
	// A filter alone protects no column: batches and schemas pass as they are.
	set, _ := Compile("table_options", map[string]Table{"s.t": {Where: "a > 1"}})
	if !set.Protects("s.t") {
		t.Error("a stream with only a filter has no fingerprint")
	}
	sc := arrow.NewSchema([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int64}}, nil)
	if got := set.Schema("s.t", sc); got != sc {
		t.Errorf("schema of a stream with only a filter changed: %s", got)
	}
	// Rules without a filter keep their fingerprint (checkpoints of running pipelines hold it).
	r := &rules{exclude: map[string]bool{"a": true}, hash: map[string][]byte{}}
	if old, _ := Compile("table_options", map[string]Table{"s.t": {ExcludeColumns: []string{"a"}}}); old.fingerprint("s.t") != r.fingerprint() {
		t.Error("the fingerprint of rules without a filter changed")
	}
}

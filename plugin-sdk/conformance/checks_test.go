package conformance

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

var (
	itemsSchema = change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	}, []string{"id"})
	// widerSchema is items with one more column, as after an ALTER TABLE.
	widerSchema = change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "price", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	}, []string{"id"})
)

type row struct {
	id   int64
	name string
	pos  string
}

// batchOf builds a change batch of stream items with the given schema (extra columns stay null).
func batchOf(t *testing.T, sc *arrow.Schema, rows ...row) client.Message {
	t.Helper()
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r.id)
		b.Field(1).(*array.StringBuilder).Append(r.name)
		for i := 2; i < len(change.DataFields(sc)); i++ {
			b.Field(i).AppendNull()
		}
		b.Row(change.OpInsert, r.pos)
	}
	rec := b.NewBatch()
	defer rec.Release()
	ipc, err := protocol.EncodeRecord(memory.DefaultAllocator, rec)
	if err != nil {
		t.Fatal(err)
	}
	return client.Message{Batch: &protocol.Batch{Stream: "items", SchemaID: protocol.SchemaID(sc), Rows: rec.NumRows(), IPC: ipc}}
}

func streamOf(t *testing.T, name string, sc *arrow.Schema, key []string) *pluginv2.Stream {
	t.Helper()
	b, err := protocol.EncodeSchema(memory.DefaultAllocator, sc)
	if err != nil {
		t.Fatal(err)
	}
	return &pluginv2.Stream{Name: name, ArrowSchema: b, PrimaryKey: key, SchemaId: protocol.SchemaID(sc)}
}

func TestSameRows(t *testing.T) {
	r1, r2, r3 := row{1, "a", "0/1"}, row{2, "b", "0/2"}, row{3, "c", "0/3"}
	for _, tc := range []struct {
		name         string
		first, again func(t *testing.T) segment
		wantErr      string
	}{
		{"same rows, other batch boundaries",
			func(t *testing.T) segment {
				return segment{batchOf(t, itemsSchema, r1, r2), batchOf(t, itemsSchema, r3)}
			},
			func(t *testing.T) segment {
				return segment{batchOf(t, itemsSchema, r1), batchOf(t, itemsSchema, r2, r3)}
			}, ""},
		{"a value differs",
			func(t *testing.T) segment { return segment{batchOf(t, itemsSchema, r1, r2)} },
			func(t *testing.T) segment { return segment{batchOf(t, itemsSchema, r1, row{2, "B", "0/2"})} },
			`row 1: stream items, column name: "b" in the first read, "B" in the replay`},
		{"the position differs",
			func(t *testing.T) segment { return segment{batchOf(t, itemsSchema, r1, r2)} },
			func(t *testing.T) segment { return segment{batchOf(t, itemsSchema, r1, row{2, "b", "0/9"})} },
			`column _skippr_pos: "0/2" in the first read, "0/9" in the replay`},
		{"the replay misses a row",
			func(t *testing.T) segment { return segment{batchOf(t, itemsSchema, r1, r2)} },
			func(t *testing.T) segment { return segment{batchOf(t, itemsSchema, r1)} },
			"the replay has 1 rows, the first read had more"},
		{"the replay has a row more",
			func(t *testing.T) segment { return segment{batchOf(t, itemsSchema, r1)} },
			func(t *testing.T) segment { return segment{batchOf(t, itemsSchema, r1), batchOf(t, itemsSchema, r2)} },
			"the replay has more rows than the first read (1)"},
		{"rows in another order",
			func(t *testing.T) segment { return segment{batchOf(t, itemsSchema, r1, r2)} },
			func(t *testing.T) segment { return segment{batchOf(t, itemsSchema, r2, r1)} },
			`row 0: stream items, column id: "1" in the first read, "2" in the replay`},
		{"another schema",
			func(t *testing.T) segment { return segment{batchOf(t, itemsSchema, r1)} },
			func(t *testing.T) segment { return segment{batchOf(t, widerSchema, r1)} },
			"schema differs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := sameRows(tc.first(t), tc.again(t))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("want no difference, got %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("want an error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

func TestCheckSegments(t *testing.T) {
	items := streamOf(t, "items", itemsSchema, []string{"id"})
	r1 := row{1, "a", ""}
	wider := func(t *testing.T) client.Message {
		return client.Message{Schema: streamOf(t, "items", widerSchema, []string{"id"})}
	}
	for _, tc := range []struct {
		name    string
		segs    func(t *testing.T) []segment
		wantErr string
	}{
		{"batches of the discovered schema", func(t *testing.T) []segment {
			return []segment{{batchOf(t, itemsSchema, r1)}, {batchOf(t, itemsSchema, r1)}}
		}, ""},
		{"a new schema announced before its first batch", func(t *testing.T) []segment {
			return []segment{{batchOf(t, itemsSchema, r1)}, {wider(t), batchOf(t, widerSchema, r1)}}
		}, ""},
		{"a new schema never announced", func(t *testing.T) []segment {
			return []segment{{batchOf(t, itemsSchema, r1)}, {batchOf(t, widerSchema, r1)}}
		}, "message 0 after checkpoint 1: batch of stream items: schema"},
		{"a schema announced after its batch", func(t *testing.T) []segment {
			return []segment{{batchOf(t, widerSchema, r1), wider(t)}}
		}, "message 0 before the first checkpoint"},
		{"a stream Discover did not report", func(t *testing.T) []segment {
			m := batchOf(t, itemsSchema, r1)
			m.Batch.Stream = "ghost"
			return []segment{{m}}
		}, `batch of stream "ghost", which Discover did not report`},
		{"a row count that lies", func(t *testing.T) []segment {
			m := batchOf(t, itemsSchema, r1)
			m.Batch.Rows = 2
			return []segment{{m}}
		}, "batch says 2 rows, holds 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := checkSegments([]*pluginv2.Stream{items}, tc.segs(t))
			if tc.wantErr == "" {
				for _, err := range errs {
					t.Errorf("want no error, got %v", err)
				}
				return
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.wantErr) {
				t.Fatalf("want one error containing %q, got %v", tc.wantErr, errs)
			}
		})
	}
}

func TestCheckStreamSchema(t *testing.T) {
	noPos := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, change.OpField}, nil)
	md := arrow.NewMetadata([]string{change.PrimaryKeyMeta}, []string{"id"})
	intPos := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, change.OpField,
		{Name: change.PosColumn, Type: arrow.PrimitiveTypes.Int64}}, &md)
	strOp := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: change.OpColumn, Type: arrow.BinaryTypes.String}}, &md)
	for _, tc := range []struct {
		name    string
		stream  *pluginv2.Stream
		sc      *arrow.Schema
		wantErr string
	}{
		{"key in both places", streamOf(t, "items", itemsSchema, []string{"id"}), itemsSchema, ""},
		{"no key anywhere, no position column", streamOf(t, "log", noPos, nil), noPos, ""},
		{"key only in Stream.PrimaryKey", streamOf(t, "log", noPos, []string{"id"}), noPos, "declare the same key in both"},
		{"key only in the metadata", streamOf(t, "items", itemsSchema, nil), itemsSchema, "declare the same key in both"},
		{"another key in each", streamOf(t, "items", itemsSchema, []string{"name"}), itemsSchema, "declare the same key in both"},
		{"a position column that is not utf8", streamOf(t, "items", intPos, []string{"id"}), intPos, "column _skippr_pos is int64, want utf8"},
		{"an op column that is not int8", streamOf(t, "items", strOp, []string{"id"}), strOp, "column _skippr_op is utf8, want int8"},
		{"a schema_id of another schema", func() *pluginv2.Stream {
			st := streamOf(t, "items", itemsSchema, []string{"id"})
			st.SchemaId = protocol.SchemaID(widerSchema)
			return st
		}(), itemsSchema, "is not the schema's fingerprint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkStreamSchema(tc.stream, tc.sc)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("want no error, got %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("want an error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

func TestNeedResumeSettings(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"without ResumeSettings", Config{Settings: []byte(`{}`)}, "set Config.ResumeSettings"},
		{"with ResumeSettings", Config{Settings: []byte(`{}`), ResumeSettings: []byte(`{"batch_size": 1}`)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := needResumeSettings(tc.cfg, 1)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("want no error, got %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("want an error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

func TestTypeLimitErrors(t *testing.T) {
	for _, tc := range []struct {
		names []string
		bad   int
	}{
		{[]string{"decimal256", "large_utf8", "dense_union", "run_end_encoded", "time64"}, 0},
		{[]string{"decimal32", "decimal64", "date64", "duration", "month_interval", "day_time_interval", // Snowflake's
			"month_day_nano_interval", "sparse_union", "list_view", "large_list_view", "string_view", "binary_view"}, 0},
		{[]string{"DECIMAL256"}, 1},                // arrow.DECIMAL256.String(), not the name
		{[]string{"string", "utf8", "varchar"}, 2}, // SQL's words are not Arrow's
	} {
		if errs := typeLimitErrors(tc.names); len(errs) != tc.bad {
			t.Errorf("%v: %d errors %v, want %d", tc.names, len(errs), errs, tc.bad)
		}
	}
}

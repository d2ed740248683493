package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

var allCompressions = []Compression{CompressionS2, CompressionZstd, CompressionNone}

func TestSegmentRoundTrip(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	tests := []struct {
		name   string
		frames []Frame
	}{
		{"no frames", nil},
		{"one batch", []Frame{batchFrame(t, "public.orders", 100, 1)}},
		{"schema then batches on two streams", []Frame{
			{Kind: FrameSchema, Stream: "public.orders", Data: schemaIPC(t, ordersSchema)},
			batchFrame(t, "public.orders", 10, 2),
			batchFrame(t, "public.customers", 5, 3),
			batchFrame(t, "public.orders", 0, 4),
		}},
		{"a truncate between batches of one stream", []Frame{
			batchFrame(t, "public.orders", 10, 1),
			{Kind: FrameTruncate, Stream: "public.orders"},
			batchFrame(t, "public.orders", 3, 2),
		}},
		{"a re-snapshot's marks around a batch", []Frame{
			{Kind: FrameResnapshot, Stream: "public.orders", Data: []byte{ResnapshotBegin}},
			batchFrame(t, "public.orders", 10, 1),
			{Kind: FrameResnapshot, Stream: "public.orders", Data: []byte{ResnapshotEnd}},
		}},
		{"unicode stream name and empty data", []Frame{{Kind: FrameBatch, Stream: "sales.überweisungen", Rows: 0, Data: nil}}},
		{"1 MiB of data", []Frame{{Kind: FrameBatch, Stream: "s", Rows: 1, Data: big}}},
	}
	for _, comp := range allCompressions {
		for _, tt := range tests {
			t.Run(comp.String()+"/"+tt.name, func(t *testing.T) {
				b, err := EncodeSegmentWith(comp, tt.frames)
				if err != nil {
					t.Fatal(err)
				}
				if string(b[:4]) != segmentMagic || Compression(b[5]) != comp {
					t.Fatalf("segment starts with %q, codec byte %d (want %d)", b[:4], b[5], comp)
				}
				got, err := DecodeSegment(b)
				if err != nil {
					t.Fatal(err)
				}
				if !framesEqual(got, tt.frames) {
					t.Fatalf("round trip changed frames: got %d frames, want %d", len(got), len(tt.frames))
				}
			})
		}
	}
}

// A codec's encode reuses its buffers: a segment must come out the same whatever was encoded before it, and
// the header of a reused buffer must not keep bytes of the previous segment.
func TestCodecReuse(t *testing.T) {
	small := []Frame{batchFrame(t, "a", 3, 1)}
	large := []Frame{batchFrame(t, "a", 3000, 2), batchFrame(t, "b", 500, 3)}
	for _, comp := range allCompressions {
		t.Run(comp.String(), func(t *testing.T) {
			c, err := newCodec(comp, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			for i, frames := range [][]Frame{large, small, large, small} {
				want, err := EncodeSegmentWith(comp, frames)
				if err != nil {
					t.Fatal(err)
				}
				got, err := c.encode(frames)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("segment %d: a reused codec wrote %d bytes that differ from a fresh one's %d", i, len(got), len(want))
				}
				back, err := c.decode(got)
				if err != nil || !framesEqual(back, frames) {
					t.Fatalf("segment %d: decode: %v", i, err)
				}
			}
		})
	}
}

// A segment written before S2 existed (zstd, by the code of commit a9f0b25) still reads.
func TestDecodeSegmentWrittenBeforeS2(t *testing.T) {
	b, err := os.ReadFile("testdata/zstd-before-s2.seg")
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSegment(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []Frame{
		{Kind: FrameBatch, Stream: "public.orders", Rows: 3, Data: bytes.Repeat([]byte("written before s2 "), 100)},
		{Kind: FrameTruncate, Stream: "public.orders"},
		{Kind: FrameResnapshot, Stream: "public.lines", Data: []byte{1}},
	}
	if Compression(b[5]) != CompressionZstd || !framesEqual(got, want) {
		t.Fatalf("codec %d, frames %+v", b[5], got)
	}
}

func TestDecodeSegmentDamage(t *testing.T) {
	for _, comp := range allCompressions {
		t.Run(comp.String(), func(t *testing.T) {
			good, err := EncodeSegmentWith(comp, []Frame{batchFrame(t, "public.orders", 200, 7), batchFrame(t, "public.lines", 50, 8)})
			if err != nil {
				t.Fatal(err)
			}
			mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
			// What a damaged body reports differs by codec: zstd and S2 fail to decompress, a stored block is
			// simply shorter than its header says.
			bodyErr := map[Compression]string{CompressionZstd: "decompress zstd", CompressionS2: "decompress s2", CompressionNone: "decompressed"}[comp]
			headerOnly := "decompressed 0 bytes"
			if comp == CompressionS2 {
				headerOnly = "decompress s2" // an S2 block starts with its length, absent here
			}
			tests := []struct {
				name string
				b    []byte
				want string
			}{
				{"empty", nil, "shorter than its 24-byte header"},
				{"header only", good[:headerSize], headerOnly},
				{"truncated body", good[:len(good)-10], bodyErr},
				{"bad magic", mutate(func(b []byte) []byte { b[0] = 'X'; return b }), "bad magic"},
				{"future version", mutate(func(b []byte) []byte { b[4] = 9; return b }), "unsupported segment version 9"},
				{"unknown codec", mutate(func(b []byte) []byte { b[5] = 7; return b }), "unknown compression codec 7"},
				{"wrong block crc", mutate(func(b []byte) []byte { b[16] ^= 1; return b }), "frame block crc mismatch"},
				{"huge length", mutate(func(b []byte) []byte { binary.LittleEndian.PutUint64(b[8:], 1<<40); return b }), "limit"},
				{"too many frames", mutate(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[20:], 1<<30); return b }), "frames in"},
				{"one frame missing from count", mutate(func(b []byte) []byte { b[20]--; return b }), "after the last of 1 frames"},
				{"flipped body byte", mutate(func(b []byte) []byte { b[headerSize+(len(b)-headerSize)/2] ^= 0x40; return b }), ""},
				{"flipped last byte", mutate(func(b []byte) []byte { b[len(b)-1] ^= 0x01; return b }), ""},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					_, err := DecodeSegment(tt.b)
					wantErr(t, err, ErrCorrupt, tt.want)
				})
			}
		})
	}
}

func TestParseCompression(t *testing.T) {
	for _, name := range CompressionNames() {
		c, err := ParseCompression(name)
		if err != nil || c.String() != name {
			t.Errorf("ParseCompression(%q) = %v, %v", name, c, err)
		}
	}
	if _, err := ParseCompression("lz4"); err == nil || !strings.Contains(err.Error(), `"lz4" (want one of s2, zstd, none)`) {
		t.Fatalf("lz4: %v", err)
	}
}

func TestEncodeSegmentRejectsBadFrames(t *testing.T) {
	tests := []struct {
		name  string
		frame Frame
		want  string
	}{
		{"unknown kind", Frame{Kind: 9, Stream: "s"}, "unknown kind 9"},
		{"empty stream", Frame{Kind: FrameBatch}, "empty stream name"},
		{"schema with rows", Frame{Kind: FrameSchema, Stream: "s", Rows: 3}, "schema frame with 3 rows"},
		{"truncate with rows", Frame{Kind: FrameTruncate, Stream: "s", Rows: 2}, "truncate frame with 2 rows"},
		{"truncate with data", Frame{Kind: FrameTruncate, Stream: "s", Data: []byte("x")}, "truncate frame with 0 rows and 1 data bytes"},
		{"resnapshot without data", Frame{Kind: FrameResnapshot, Stream: "s"}, "resnapshot frame with 0 rows and data"},
		{"resnapshot with a bad mark", Frame{Kind: FrameResnapshot, Stream: "s", Data: []byte{2}}, "resnapshot frame with 0 rows and data 02"},
		{"resnapshot with rows", Frame{Kind: FrameResnapshot, Stream: "s", Rows: 1, Data: []byte{0}}, "resnapshot frame with 1 rows"},
		{"negative rows", Frame{Kind: FrameBatch, Stream: "s", Rows: -1}, "negative row count"},
		{"long stream name", Frame{Kind: FrameBatch, Stream: strings.Repeat("x", 70000)}, "stream name of 70000 bytes"},
		{"invalid utf-8", Frame{Kind: FrameBatch, Stream: "\xff"}, "not UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := EncodeSegment([]Frame{batchFrame(t, "ok", 1, 1), tt.frame})
			if err == nil || !strings.Contains(err.Error(), "frame 1") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error about frame 1 mentioning %q", err, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	withMeta := arrow.NewSchema(ordersSchema.Fields(), func() *arrow.Metadata { m := arrow.NewMetadata([]string{"pk"}, []string{"id"}); return &m }())
	narrower := arrow.NewSchema(ordersSchema.Fields()[:2], nil)
	rows, ids, err := summarize([]Frame{
		batchFrame(t, "a", 10, 1),
		batchFrame(t, "a", 5, 2),
		{Kind: FrameSchema, Stream: "b", Data: schemaIPC(t, withMeta)},
		{Kind: FrameBatch, Stream: "c", Rows: 3, Data: batchIPC(t, narrower, 3, 1)},
		{Kind: FrameTruncate, Stream: "a"},
		{Kind: FrameTruncate, Stream: "d"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A truncate keeps the stream's schema id and counts no rows; a stream with only a truncate appears.
	if rows["a"] != 15 || rows["b"] != 0 || rows["c"] != 3 || rows["d"] != 0 || len(rows) != 4 {
		t.Fatalf("rows = %v", rows)
	}
	if ids["a"] != SchemaID(ordersSchema) {
		t.Fatalf("stream a id %s, want the orders schema's %s", ids["a"], SchemaID(ordersSchema))
	}
	if ids["a"] == ids["b"] || ids["a"] == ids["c"] || ids["b"] == ids["c"] {
		t.Fatalf("distinct schemas (metadata, fewer fields) share an id: %v", ids)
	}
	if !strings.HasPrefix(ids["a"], "s1-") || len(ids["a"]) != 35 {
		t.Fatalf("id %q is not s1- and 32 hex digits", ids["a"])
	}

	_, _, err = summarize([]Frame{batchFrame(t, "a", 1, 1), {Kind: FrameBatch, Stream: "bad", Rows: 1, Data: []byte("not arrow at all")}})
	if err == nil || !strings.Contains(err.Error(), `frame 1 (stream "bad", batch): not an Arrow IPC stream`) {
		t.Fatalf("got %v", err)
	}
}

func TestRecordEnvelope(t *testing.T) {
	rec := CommitRecord{Seq: 7, Segment: segmentName(7, 2), Epoch: 2, Checkpoint: []byte{0, 1, 2}}
	b, err := sealRecord(kindCommit, rec)
	if err != nil {
		t.Fatal(err)
	}
	var back CommitRecord
	if err := openRecord(kindCommit, b, &back); err != nil || back.Seq != 7 || !bytes.Equal(back.Checkpoint, rec.Checkpoint) {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	tampered := bytes.Replace(b, []byte(`"seq":7`), []byte(`"seq":8`), 1)
	wantErr(t, openRecord(kindCommit, tampered, &back), ErrCorrupt, "record crc mismatch")
	wantErr(t, openRecord(kindCheckpoint, b, &back), ErrCorrupt, `record kind "commit", want "checkpoint"`)
	wantErr(t, openRecord(kindCommit, b[:len(b)/2], &back), ErrCorrupt, "not a record envelope")
	if !errors.Is(openRecord(kindCommit, []byte("{}"), &back), ErrCorrupt) {
		t.Fatal("empty envelope accepted")
	}
}

func TestObjectNames(t *testing.T) {
	if a, b := segmentName(9, 1), segmentName(10, 1); a >= b {
		t.Fatalf("%s sorts after %s", a, b)
	}
	if a, b := commitName(99), commitName(100); a >= b {
		t.Fatalf("%s sorts after %s", a, b)
	}
	seq, ep, ok := parseSegmentName(segmentName(42, 3))
	if !ok || seq != 42 || ep != 3 {
		t.Fatalf("parse %s: %d %d %v", segmentName(42, 3), seq, ep, ok)
	}
	for _, bad := range []string{"segments/42-3.seg", "segments/../../etc/passwd", "commits/" + pad(1) + ".json", segmentName(1, 1) + ".tmp"} {
		if _, _, ok := parseSegmentName(bad); ok {
			t.Errorf("parseSegmentName accepted %q", bad)
		}
	}
	if s, ok := parseSeqName(commitsDir, commitName(18446744073709551615)); !ok || s != 18446744073709551615 {
		t.Fatalf("max seq: %d %v", s, ok)
	}
}

package wal

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"math"
	"sort"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/klauspost/compress/zstd"
)

// FrameKind says what a frame's Data holds.
type FrameKind uint8

const (
	// FrameBatch holds the Arrow IPC stream bytes of one change batch.
	FrameBatch FrameKind = 1
	// FrameSchema holds the Arrow IPC stream bytes of a schema alone: a schema change.
	FrameSchema FrameKind = 2
	// FrameTruncate holds nothing: the stream was emptied at this point of the entry.
	FrameTruncate FrameKind = 3
	// FrameResnapshot marks the begin (Data = ResnapshotBegin) or the end (ResnapshotEnd) of a re-snapshot of
	// the stream.
	FrameResnapshot FrameKind = 4
)

// The one data byte of a FrameResnapshot.
const (
	ResnapshotBegin byte = 0
	ResnapshotEnd   byte = 1
)

func (k FrameKind) String() string {
	switch k {
	case FrameBatch:
		return "batch"
	case FrameSchema:
		return "schema"
	case FrameTruncate:
		return "truncate"
	case FrameResnapshot:
		return "resnapshot"
	}
	return fmt.Sprintf("FrameKind(%d)", uint8(k))
}

// Frame is one unit inside a segment.
type Frame struct {
	Kind   FrameKind
	Stream string
	Rows   int64
	Data   []byte
}

// Segment layout constants; doc.go describes them.
const (
	segmentMagic   = "SKWL"
	segmentVersion = 1
	codecZstd      = 1
	headerSize     = 24
	// maxRawSegment bounds the decompressed frame block, so a damaged header
	// cannot make the reader allocate without limit.
	maxRawSegment = 4 << 30
	// frameFixed is the per-frame overhead: kind(1) streamLen(2) rows(8) dataLen(8).
	frameFixed = 1 + 2 + 8 + 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// codec holds a zstd encoder and decoder. A Log keeps one for its life because
// building them allocates; the package functions build a fresh one per call.
type codec struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
	// block is encode's frame buffer, kept between segments: a fresh multi-MiB buffer per segment cost the
	// engine a fifth of its snapshot CPU in page faults (BENCHMARKS.md). encode runs under the Log's lock.
	block []byte
}

func newCodec(decoders int) (*codec, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(decoders), zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		enc.Close()
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return &codec{enc: enc, dec: dec}, nil
}

func (c *codec) close() {
	c.enc.Close()
	c.dec.Close()
}

// EncodeSegment frames and compresses frames into the segment format described
// in the package documentation.
func EncodeSegment(frames []Frame) ([]byte, error) {
	c, err := newCodec(1)
	if err != nil {
		return nil, err
	}
	defer c.close()
	return c.encode(frames)
}

// DecodeSegment checks and decodes a segment produced by EncodeSegment. Any
// damage is reported as ErrCorrupt. The returned frames' Data share one buffer.
func DecodeSegment(b []byte) ([]Frame, error) {
	c, err := newCodec(1)
	if err != nil {
		return nil, err
	}
	defer c.close()
	return c.decode(b)
}

func checkFrame(i int, f Frame) error {
	switch f.Kind {
	case FrameBatch:
	case FrameSchema:
		if f.Rows != 0 {
			return fmt.Errorf("frame %d (stream %q): schema frame with %d rows", i, f.Stream, f.Rows)
		}
	case FrameTruncate:
		if f.Rows != 0 || len(f.Data) != 0 {
			return fmt.Errorf("frame %d (stream %q): truncate frame with %d rows and %d data bytes", i, f.Stream, f.Rows, len(f.Data))
		}
	case FrameResnapshot:
		if f.Rows != 0 || len(f.Data) != 1 || f.Data[0] > ResnapshotEnd {
			return fmt.Errorf("frame %d (stream %q): resnapshot frame with %d rows and data %x (want 0 rows and one byte, 0 or 1)", i, f.Stream, f.Rows, f.Data)
		}
	default:
		return fmt.Errorf("frame %d (stream %q): unknown kind %d", i, f.Stream, uint8(f.Kind))
	}
	if f.Stream == "" {
		return fmt.Errorf("frame %d: empty stream name", i)
	}
	if len(f.Stream) > math.MaxUint16 {
		return fmt.Errorf("frame %d: stream name of %d bytes (max %d)", i, len(f.Stream), math.MaxUint16)
	}
	if !utf8.ValidString(f.Stream) {
		return fmt.Errorf("frame %d: stream name %q is not UTF-8", i, f.Stream)
	}
	if f.Rows < 0 {
		return fmt.Errorf("frame %d (stream %q): negative row count %d", i, f.Stream, f.Rows)
	}
	return nil
}

func (c *codec) encode(frames []Frame) ([]byte, error) {
	raw := 0
	for i, f := range frames {
		if err := checkFrame(i, f); err != nil {
			return nil, fmt.Errorf("encode segment: %w", err)
		}
		raw += frameFixed + len(f.Stream) + len(f.Data)
	}
	if raw > maxRawSegment {
		return nil, fmt.Errorf("encode segment: %d bytes of frames exceed the %d-byte segment limit", raw, maxRawSegment)
	}
	if cap(c.block) < raw {
		c.block = make([]byte, 0, raw)
	}
	block := c.block[:0]
	for _, f := range frames {
		block = append(block, byte(f.Kind))
		block = binary.LittleEndian.AppendUint16(block, uint16(len(f.Stream)))
		block = append(block, f.Stream...)
		block = binary.LittleEndian.AppendUint64(block, uint64(f.Rows))
		block = binary.LittleEndian.AppendUint64(block, uint64(len(f.Data)))
		block = append(block, f.Data...)
	}
	out := make([]byte, headerSize, headerSize+raw/2+64)
	copy(out, segmentMagic)
	out[4] = segmentVersion
	out[5] = codecZstd
	binary.LittleEndian.PutUint64(out[8:], uint64(len(block)))
	binary.LittleEndian.PutUint32(out[16:], crc32c(block))
	binary.LittleEndian.PutUint32(out[20:], uint32(len(frames)))
	return c.enc.EncodeAll(block, out), nil
}

func (c *codec) decode(b []byte) ([]Frame, error) {
	if len(b) < headerSize {
		return nil, corrupt(fmt.Sprintf("segment of %d bytes is shorter than its %d-byte header", len(b), headerSize))
	}
	if string(b[:4]) != segmentMagic {
		return nil, corrupt(fmt.Sprintf("bad magic %q (want %q)", b[:4], segmentMagic))
	}
	if b[4] != segmentVersion {
		return nil, corrupt(fmt.Sprintf("unsupported segment version %d (want %d)", b[4], segmentVersion))
	}
	if b[5] != codecZstd {
		return nil, corrupt(fmt.Sprintf("unknown compression codec %d", b[5]))
	}
	rawLen := binary.LittleEndian.Uint64(b[8:])
	wantCRC := binary.LittleEndian.Uint32(b[16:])
	count := binary.LittleEndian.Uint32(b[20:])
	if rawLen > maxRawSegment {
		return nil, corrupt(fmt.Sprintf("header claims %d decompressed bytes (limit %d)", rawLen, maxRawSegment))
	}
	if uint64(count)*frameFixed > rawLen {
		return nil, corrupt(fmt.Sprintf("header claims %d frames in %d bytes", count, rawLen))
	}
	block, err := c.dec.DecodeAll(b[headerSize:], make([]byte, 0, rawLen))
	if err != nil {
		return nil, corrupt(fmt.Sprintf("decompress: %v", err))
	}
	if uint64(len(block)) != rawLen {
		return nil, corrupt(fmt.Sprintf("decompressed %d bytes, header says %d", len(block), rawLen))
	}
	if got := crc32c(block); got != wantCRC {
		return nil, corrupt(fmt.Sprintf("frame block crc mismatch: want %d got %d", wantCRC, got))
	}
	frames := make([]Frame, 0, count)
	p := block
	for i := uint32(0); i < count; i++ {
		if len(p) < 3 {
			return nil, corrupt(fmt.Sprintf("frame %d: truncated header", i))
		}
		kind := FrameKind(p[0])
		n := int(binary.LittleEndian.Uint16(p[1:]))
		p = p[3:]
		if len(p) < n+16 {
			return nil, corrupt(fmt.Sprintf("frame %d: truncated stream name", i))
		}
		stream := string(p[:n])
		p = p[n:]
		rows := int64(binary.LittleEndian.Uint64(p))
		dataLen := binary.LittleEndian.Uint64(p[8:])
		p = p[16:]
		if dataLen > uint64(len(p)) {
			return nil, corrupt(fmt.Sprintf("frame %d (stream %q): %d data bytes, %d left", i, stream, dataLen, len(p)))
		}
		f := Frame{Kind: kind, Stream: stream, Rows: rows, Data: p[:dataLen:dataLen]}
		if err := checkFrame(int(i), f); err != nil {
			return nil, corrupt(err.Error())
		}
		frames = append(frames, f)
		p = p[dataLen:]
	}
	if len(p) != 0 {
		return nil, corrupt(fmt.Sprintf("%d bytes after the last of %d frames", len(p), count))
	}
	return frames, nil
}

// summarize validates every frame's Arrow IPC bytes and returns the row count
// per stream (schema-only streams appear with 0) and the schema id per stream:
// the id of the last frame of that stream, i.e. the schema in force after the entry.
func summarize(frames []Frame) (map[string]int64, map[string]string, error) {
	rows := make(map[string]int64)
	ids := make(map[string]string)
	for i, f := range frames {
		if err := checkFrame(i, f); err != nil {
			return nil, nil, err
		}
		if f.Kind == FrameTruncate || f.Kind == FrameResnapshot {
			rows[f.Stream] += 0 // the stream appears, its schema is unchanged
			continue
		}
		sc, err := ipcSchema(f.Data)
		if err != nil {
			return nil, nil, fmt.Errorf("frame %d (stream %q, %s): not an Arrow IPC stream: %w", i, f.Stream, f.Kind, err)
		}
		rows[f.Stream] += f.Rows
		ids[f.Stream] = SchemaID(sc)
	}
	return rows, ids, nil
}

// ipcSchema reads only the schema message at the head of an Arrow IPC stream.
func ipcSchema(data []byte) (*arrow.Schema, error) {
	r, err := ipc.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	defer r.Release()
	return r.Schema(), nil
}

// SchemaID is the opaque id recorded per stream in commit records: a hash of
// the schema's fields, types, nullability and metadata. Equal schemas give
// equal ids; any change to a field or to metadata gives a new one.
func SchemaID(sc *arrow.Schema) string {
	h := sha256.New()
	writeMeta := func(tag string, m arrow.Metadata) {
		keys := append([]string(nil), m.Keys()...)
		vals := m.Values()
		idx := make([]int, len(keys))
		for i := range idx {
			idx[i] = i
		}
		sort.Slice(idx, func(a, b int) bool { return keys[idx[a]] < keys[idx[b]] })
		for _, i := range idx {
			fmt.Fprintf(h, "%s%d:%s=%d:%s;", tag, len(keys[i]), keys[i], len(vals[i]), vals[i])
		}
	}
	fp := sc.Fingerprint()
	if fp == "" { // types without a fingerprint (some extension types)
		fp = sc.String()
	}
	h.Write([]byte(fp))
	writeMeta("S", sc.Metadata())
	var walk func(prefix string, fields []arrow.Field)
	walk = func(prefix string, fields []arrow.Field) {
		for _, f := range fields {
			name := prefix + "/" + f.Name
			writeMeta("F"+name, f.Metadata)
			if nt, ok := f.Type.(arrow.NestedType); ok {
				walk(name, nt.Fields())
			}
		}
	}
	walk("", sc.Fields())
	return "s1-" + hex.EncodeToString(h.Sum(nil)[:16])
}

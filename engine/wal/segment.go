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
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/klauspost/compress/s2"
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
	headerSize     = 24
	// maxRawSegment bounds the decompressed frame block, so a damaged header
	// cannot make the reader allocate without limit.
	maxRawSegment = 4 << 30
	// frameFixed is the per-frame overhead: kind(1) streamLen(2) rows(8) dataLen(8).
	frameFixed = 1 + 2 + 8 + 8
)

// Compression is a segment codec: the codec byte of the segment header. A Log writes with the one
// Options.Compression names and reads every one, so a log may mix them (doc.go, Segment).
type Compression uint8

const (
	// CompressionNone stores the frame block as it is.
	CompressionNone Compression = 0
	// CompressionZstd is one zstd stream (SpeedFastest, with its content checksum); the only codec before S2.
	CompressionZstd Compression = 1
	// CompressionS2 is one S2 block (github.com/klauspost/compress/s2): the default, see DefaultCompression.
	CompressionS2 Compression = 2
)

// DefaultCompression is what a Log writes when Options.Compression is unset. On the snapshot benchmarks' data S2
// encodes in a fifth to a quarter of zstd's CPU per row and decodes in half, and stores 1.6-3.5 times zstd's
// bytes (BENCHMARKS.md, The WAL): a WAL entry lives only until every destination applied it, so CPU on the
// ingest and apply paths matters more than the bytes a short-lived object occupies. "none" is not cheaper end
// to end: writing and fsyncing 4-5 times S2's bytes cost the engine more than S2's encode.
const DefaultCompression = CompressionS2

// CompressionNames lists the names ParseCompression accepts, in the order messages show them.
func CompressionNames() []string { return []string{"s2", "zstd", "none"} }

// ParseCompression maps a configuration name (s2, zstd or none) to its codec.
func ParseCompression(name string) (Compression, error) {
	switch name {
	case "s2":
		return CompressionS2, nil
	case "zstd":
		return CompressionZstd, nil
	case "none":
		return CompressionNone, nil
	}
	return 0, fmt.Errorf("unknown WAL compression %q (want one of %s)", name, strings.Join(CompressionNames(), ", "))
}

func (c Compression) String() string {
	switch c {
	case CompressionNone:
		return "none"
	case CompressionZstd:
		return "zstd"
	case CompressionS2:
		return "s2"
	}
	return fmt.Sprintf("Compression(%d)", uint8(c))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// codec writes segments with one Compression and reads all of them. A Log keeps one for its life because
// building the zstd encoder and decoder allocates; the package functions build a fresh one per call.
type codec struct {
	write Compression
	enc   *zstd.Encoder // nil unless write is CompressionZstd
	dec   *zstd.Decoder // built at the first zstd segment read
	// decoders is the zstd decoder's concurrency.
	decoders int
	decMu    sync.Mutex
	// block is encode's frame buffer and out its segment buffer, kept between segments: a fresh multi-MiB
	// buffer per segment cost the engine a fifth of its snapshot CPU in page faults (BENCHMARKS.md). encode
	// runs under the Log's lock, and the segment it returns is used only until the next encode.
	block, out []byte
}

func newCodec(write Compression, decoders int) (*codec, error) {
	c := &codec{write: write, decoders: decoders}
	switch write {
	case CompressionNone, CompressionS2:
	case CompressionZstd:
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))
		if err != nil {
			return nil, fmt.Errorf("zstd encoder: %w", err)
		}
		c.enc = enc
	default:
		return nil, fmt.Errorf("unknown WAL compression %s", write)
	}
	return c, nil
}

// zstdDecoder returns the codec's zstd decoder, building it at first use: a log written with S2 or none
// never pays for one.
func (c *codec) zstdDecoder() (*zstd.Decoder, error) {
	c.decMu.Lock()
	defer c.decMu.Unlock()
	if c.dec == nil {
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(c.decoders), zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			return nil, fmt.Errorf("zstd decoder: %w", err)
		}
		c.dec = dec
	}
	return c.dec, nil
}

func (c *codec) close() {
	if c.enc != nil {
		c.enc.Close()
	}
	c.decMu.Lock()
	defer c.decMu.Unlock()
	if c.dec != nil {
		c.dec.Close()
	}
}

// EncodeSegment frames and compresses frames into the segment format described
// in the package documentation.
func EncodeSegment(frames []Frame) ([]byte, error) {
	return EncodeSegmentWith(DefaultCompression, frames)
}

// EncodeSegmentWith is EncodeSegment with a chosen codec.
func EncodeSegmentWith(comp Compression, frames []Frame) ([]byte, error) {
	c, err := newCodec(comp, 1)
	if err != nil {
		return nil, err
	}
	defer c.close()
	return c.encode(frames)
}

// DecodeSegment checks and decodes a segment of any codec. Any damage is
// reported as ErrCorrupt. The returned frames' Data share one buffer, which
// for an uncompressed segment is b itself.
func DecodeSegment(b []byte) ([]Frame, error) {
	c, err := newCodec(CompressionNone, 1)
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
	if c.write == CompressionNone {
		// The frame block is the body: frame it straight after the header, saving a copy of every byte.
		out := grow(&c.out, headerSize+raw)[:headerSize]
		out = appendFrames(out, frames)
		putHeader(out, c.write, out[headerSize:], len(frames))
		return out, nil
	}
	block := appendFrames(grow(&c.block, raw)[:0], frames)
	var out []byte
	switch c.write {
	case CompressionZstd:
		out = c.enc.EncodeAll(block, grow(&c.out, headerSize+raw/2+64)[:headerSize])
	case CompressionS2:
		n := s2.MaxEncodedLen(len(block))
		if n < 0 {
			return nil, fmt.Errorf("encode segment: %d bytes of frames are too many for one S2 block", len(block))
		}
		buf := grow(&c.out, headerSize+n)
		// s2.Encode writes into its dst from index 0 and returns a prefix of it when dst is large enough.
		body := s2.Encode(buf[headerSize:headerSize+n], block)
		out = buf[:headerSize+len(body)]
	}
	c.out = out[:0]
	putHeader(out, c.write, block, len(frames))
	return out, nil
}

// grow returns *buf with capacity for at least n bytes (reallocating it when short) and length n.
func grow(buf *[]byte, n int) []byte {
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	return (*buf)[:n]
}

func appendFrames(block []byte, frames []Frame) []byte {
	for _, f := range frames {
		block = append(block, byte(f.Kind))
		block = binary.LittleEndian.AppendUint16(block, uint16(len(f.Stream)))
		block = append(block, f.Stream...)
		block = binary.LittleEndian.AppendUint64(block, uint64(f.Rows))
		block = binary.LittleEndian.AppendUint64(block, uint64(len(f.Data)))
		block = append(block, f.Data...)
	}
	return block
}

func putHeader(out []byte, comp Compression, block []byte, frames int) {
	copy(out, segmentMagic)
	out[4] = segmentVersion
	out[5] = byte(comp)
	out[6], out[7] = 0, 0
	binary.LittleEndian.PutUint64(out[8:], uint64(len(block)))
	binary.LittleEndian.PutUint32(out[16:], crc32c(block))
	binary.LittleEndian.PutUint32(out[20:], uint32(frames))
}

// decode reads a segment of any codec. The frames' Data share one buffer, which for CompressionNone is b itself.
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
	comp := Compression(b[5])
	rawLen := binary.LittleEndian.Uint64(b[8:])
	wantCRC := binary.LittleEndian.Uint32(b[16:])
	count := binary.LittleEndian.Uint32(b[20:])
	if rawLen > maxRawSegment {
		return nil, corrupt(fmt.Sprintf("header claims %d decompressed bytes (limit %d)", rawLen, maxRawSegment))
	}
	if uint64(count)*frameFixed > rawLen {
		return nil, corrupt(fmt.Sprintf("header claims %d frames in %d bytes", count, rawLen))
	}
	body := b[headerSize:]
	var block []byte
	switch comp {
	case CompressionNone:
		block = body
	case CompressionZstd:
		dec, err := c.zstdDecoder()
		if err != nil {
			return nil, err
		}
		if block, err = dec.DecodeAll(body, make([]byte, 0, rawLen)); err != nil {
			return nil, corrupt(fmt.Sprintf("decompress zstd: %v", err))
		}
	case CompressionS2:
		// The block states its own length first: check it against the header before allocating.
		n, err := s2.DecodedLen(body)
		if err != nil {
			return nil, corrupt(fmt.Sprintf("decompress s2: %v", err))
		}
		if uint64(n) != rawLen {
			return nil, corrupt(fmt.Sprintf("decompressed %d bytes, header says %d", n, rawLen))
		}
		if block, err = s2.Decode(make([]byte, n), body); err != nil {
			return nil, corrupt(fmt.Sprintf("decompress s2: %v", err))
		}
	default:
		return nil, corrupt(fmt.Sprintf("unknown compression codec %d", b[5]))
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

package protocol

import (
	"fmt"

	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
)

// Batch is one change batch as it crosses the boundary and as the engine stores it: Arrow IPC stream bytes
// (schema message, then record batches) of one stream.
type Batch struct {
	Stream   string
	SchemaID string
	Rows     int64
	IPC      []byte
}

// Chunks cuts a batch into messages of at most ChunkSize data bytes. The chunks alias b.IPC.
func Chunks(b Batch) []*pluginv2.Chunk {
	n := (len(b.IPC) + ChunkSize - 1) / ChunkSize
	if n == 0 {
		n = 1
	}
	out := make([]*pluginv2.Chunk, 0, n)
	for i := 0; i < n; i++ {
		lo, hi := i*ChunkSize, min((i+1)*ChunkSize, len(b.IPC))
		c := &pluginv2.Chunk{Stream: b.Stream, Data: b.IPC[lo:hi]}
		if i == n-1 {
			c.Last, c.Rows, c.SchemaId = true, b.Rows, b.SchemaID
		}
		out = append(out, c)
	}
	return out
}

// Assembler joins chunks back into batches. Chunks of one batch arrive in order and are never interleaved
// with another batch's.
type Assembler struct {
	stream string
	buf    []byte
	open   bool
}

// Add takes a chunk and returns the completed batch once its last chunk arrives.
func (a *Assembler) Add(c *pluginv2.Chunk) (Batch, bool, error) {
	if a.open && c.Stream != a.stream {
		return Batch{}, false, fmt.Errorf("chunk of stream %q arrived inside a batch of stream %q", c.Stream, a.stream)
	}
	if !a.open {
		a.stream, a.open = c.Stream, true
		if c.Last {
			// The common case, one chunk: keep the message's own buffer instead of copying it.
			a.open = false
			return Batch{Stream: c.Stream, SchemaID: c.SchemaId, Rows: c.Rows, IPC: c.Data}, true, nil
		}
		a.buf = nil
	}
	a.buf = append(a.buf, c.Data...)
	if !c.Last {
		return Batch{}, false, nil
	}
	b := Batch{Stream: a.stream, SchemaID: c.SchemaId, Rows: c.Rows, IPC: a.buf}
	a.buf, a.open = nil, false
	return b, true, nil
}

// Pending reports whether a batch was started and not finished: a stream that ends here was cut short.
func (a *Assembler) Pending() bool { return a.open }

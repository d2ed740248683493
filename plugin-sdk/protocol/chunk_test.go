package protocol

import (
	"bytes"
	"strings"
	"testing"

	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
)

func TestChunksRoundTrip(t *testing.T) {
	for _, size := range []int{0, 1, ChunkSize - 1, ChunkSize, ChunkSize + 1, 5*ChunkSize + 17} {
		data := bytes.Repeat([]byte{'x'}, size)
		for i := range data {
			data[i] = byte(i * 7)
		}
		chunks := Chunks(Batch{Stream: "s", SchemaID: "id1", Rows: 42, IPC: data})
		var asm Assembler
		var got []Batch
		for i, c := range chunks {
			if len(c.Data) > ChunkSize {
				t.Fatalf("size %d: chunk %d has %d bytes", size, i, len(c.Data))
			}
			b, done, err := asm.Add(c)
			if err != nil {
				t.Fatal(err)
			}
			if done != (i == len(chunks)-1) {
				t.Fatalf("size %d: chunk %d done=%v", size, i, done)
			}
			if done {
				got = append(got, b)
			}
		}
		if len(got) != 1 || got[0].Rows != 42 || got[0].SchemaID != "id1" || got[0].Stream != "s" || !bytes.Equal(got[0].IPC, data) {
			t.Fatalf("size %d: round trip lost data", size)
		}
		if asm.Pending() {
			t.Fatalf("size %d: assembler still pending", size)
		}
	}
}

func TestAssemblerRejectsInterleaving(t *testing.T) {
	var asm Assembler
	if _, _, err := asm.Add(&pluginv2.Chunk{Stream: "a", Data: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if !asm.Pending() {
		t.Fatal("want pending after a non-last chunk")
	}
	_, _, err := asm.Add(&pluginv2.Chunk{Stream: "b", Data: []byte("2"), Last: true})
	if err == nil || !strings.Contains(err.Error(), `stream "b"`) {
		t.Fatalf("err = %v, want interleaving error", err)
	}
}

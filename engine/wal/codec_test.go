package wal

import (
	"fmt"
	"testing"
)

// A log written under one compression setting and continued under others reads whole, whatever the reader's
// setting: the codec is per segment.
func TestLogMixingCodecs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		url, opts := b.fresh(t)
		var want [][]Frame
		var codecs []Compression
		for i, name := range []string{"zstd", "s2", "none", ""} {
			o := opts
			o.Compression = name
			l := mustAcquire(t, url, o)
			for j := range 2 {
				frames := []Frame{batchFrame(t, "public.orders", 300, uint64(10*i+j)), {Kind: FrameTruncate, Stream: "public.lines"}}
				mustCommit(t, l, frames, fmt.Sprint(i, j))
				want = append(want, frames)
				comp := DefaultCompression
				if name != "" {
					comp, _ = ParseCompression(name)
				}
				codecs = append(codecs, comp)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range []string{"", "zstd", "none"} {
			o := opts
			o.Compression = name
			ro := mustOpen(t, url, o)
			recs := mustEntries(t, ro, 0)
			if len(recs) != len(want) {
				t.Fatalf("reader %q: %d entries, want %d", name, len(recs), len(want))
			}
			for i, rec := range recs {
				stored, err := ro.st.get(ctxT(t), rec.Segment)
				if err != nil {
					t.Fatal(err)
				}
				if got := Compression(stored[5]); got != codecs[i] {
					t.Fatalf("entry %d written with %s, want %s", rec.Seq, got, codecs[i])
				}
				frames, err := ro.ReadSegment(ctxT(t), rec)
				if err != nil {
					t.Fatalf("reader %q: %v", name, err)
				}
				if !framesEqual(frames, want[i]) {
					t.Fatalf("reader %q: entry %d (%s) read back different frames", name, rec.Seq, codecs[i])
				}
			}
		}
	})
}

// Damage inside a segment is ErrCorrupt naming the entry and the object, for every codec: once where the stored
// object's CRC-32C (commit record) catches it, once where the commit record was rewritten to match the damaged
// object (damage before the CRC was taken), so that only the codec and the frame block's CRC-32C can.
func TestReadSegmentCorruptPerCodec(t *testing.T) {
	for _, comp := range allCompressions {
		t.Run(comp.String(), func(t *testing.T) {
			url, opts := localBackend().fresh(t)
			opts.Compression = comp.String()
			l := mustAcquire(t, url, opts)
			var recs []CommitRecord
			for i := range 3 {
				recs = append(recs, mustCommit(t, l, []Frame{batchFrame(t, "s", 400, uint64(i))}, fmt.Sprint(i)))
			}
			damage := func(rec CommitRecord) []byte {
				data, err := l.st.get(ctxT(t), rec.Segment)
				if err != nil {
					t.Fatal(err)
				}
				data[headerSize+(len(data)-headerSize)/2] ^= 0x10
				if err := l.st.put(ctxT(t), rec.Segment, data); err != nil {
					t.Fatal(err)
				}
				return data
			}
			where := func(rec CommitRecord) string {
				return fmt.Sprintf("wal entry %d: segment %s: ", rec.Seq, l.st.url(rec.Segment))
			}

			damage(recs[0])
			_, err := l.ReadSegment(ctxT(t), recs[0])
			wantErr(t, err, ErrCorrupt, where(recs[0])+fmt.Sprintf("crc mismatch: want %d got ", recs[0].CRC32C))

			data := damage(recs[1])
			forged := recs[1]
			forged.CRC32C, forged.Size = crc32c(data), int64(len(data))
			_, err = l.ReadSegment(ctxT(t), forged)
			wantErr(t, err, ErrCorrupt, where(recs[1]))

			if _, err := l.ReadSegment(ctxT(t), recs[2]); err != nil {
				t.Fatalf("undamaged entry: %v", err)
			}
		})
	}
}

func TestOpenRejectsUnknownCompression(t *testing.T) {
	url, opts := localBackend().fresh(t)
	opts.Compression = "lz4"
	_, err := Open(ctxT(t), url, opts)
	wantErr(t, err, nil, `unknown WAL compression "lz4" (want one of s2, zstd, none)`)
}

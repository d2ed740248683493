package dest

import (
	"bufio"
	"bytes"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// keyRuns is the key index of a spilled table once it outgrew its share of the memory budget (keyIndex.limit):
// from then on nothing is looked up while the chunks arrive. Each chunk appends records instead — one per key
// it touches (any op: the chunk holds a newer version of that key) and one per row it writes (key → file,
// position) — to a buffer that is sorted by key and written to a run file in the spill directory whenever it
// fills its share. The commit merges the runs (resolve): for each key, every row written by a chunk before the
// last chunk that touched the key is dead, a position delete; the row the last chunk wrote, if any, stays. That
// is what the in-memory index's take/put computes one chunk at a time, so the rows committed are the same.
//
// Memory: the buffer (limit/2), and at the commit one read buffer per run; runs are merged into one whenever
// there are maxRuns of them (rows found dead handed over, one record kept per key), so that bound holds for a
// range of any size. Disk: about 4 to 12 bytes plus the key per record, twice while runs are merged. The dead
// rows themselves are a bit each (posSet).
//
// The directory is removed when the table's part commits or fails; one left by a killed process is removed by
// the next spill of any process (its name carries the pid: sweepSpills).
type keyRuns struct {
	parent string // spill_dir
	log    *slog.Logger
	limit  int64            // bytes the buffer may take
	dead   func(loc uint64) // takes the rows found dead (position deletes)

	dir   string   // made on the first run
	runs  []string // run files, each sorted by key
	recs  []keyRec
	arena []byte // the buffered records' keys
	chunk uint32 // the chunk being added; records of the in-memory index it replaced carry 0
	seq   int    // names run files
}

// keyRec is one buffered record: its key is arena[off:off+n].
type keyRec struct {
	off, n uint32
	chunk  uint32
	loc    uint64 // file<<posBits | position, or noLoc: the chunk touched the key without writing it
}

const (
	noLoc = ^uint64(0)
	// keyRecBytes is a keyRec's size in the buffer.
	keyRecBytes = 24
	// maxRuns bounds the run files merged at once: each takes a read buffer of runReadBuf at the commit.
	maxRuns    = 32
	runReadBuf = 64 << 10
	// indexSpillPrefix names the run directories: indexSpillPrefix + pid + "-" + random (see sweepSpills).
	indexSpillPrefix = "skippr-iceberg-keys-"
)

func newKeyRuns(parent string, limit int64, log *slog.Logger, dead func(loc uint64)) *keyRuns {
	if parent == "" {
		parent = os.TempDir()
	}
	return &keyRuns{parent: parent, limit: max(limit, 1), log: log, dead: dead, chunk: 1}
}

// bytes is what the buffer takes.
func (kr *keyRuns) bytes() int64 { return int64(cap(kr.recs))*keyRecBytes + int64(cap(kr.arena)) }

// add buffers a record, writing the buffer out as a run once it holds its share.
func (kr *keyRuns) add(key []byte, chunk uint32, loc uint64) error {
	if int64(len(kr.recs))*keyRecBytes+int64(len(kr.arena))+int64(len(key)) > kr.limit/2 && len(kr.recs) > 0 {
		if err := kr.flush(); err != nil {
			return err
		}
	}
	if len(kr.arena)+len(key) > 1<<32-1 {
		return fmt.Errorf("key index: a key of %d bytes does not fit the run buffer", len(key))
	}
	kr.recs = append(kr.recs, keyRec{off: uint32(len(kr.arena)), n: uint32(len(key)), chunk: chunk, loc: loc})
	kr.arena = append(kr.arena, key...)
	return nil
}

func (kr *keyRuns) key(r keyRec) []byte { return kr.arena[r.off : r.off+r.n] }

// flush sorts the buffer by key and writes it out as a run; with maxRuns runs it merges them into one.
func (kr *keyRuns) flush() error {
	if len(kr.recs) == 0 {
		return nil
	}
	if kr.dir == "" {
		sweepSpills(kr.parent, kr.log)
		dir, err := os.MkdirTemp(kr.parent, indexSpillPrefix+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			return indexSpillErr(err)
		}
		kr.dir = dir
		kr.log.Info("iceberg apply: the key index outgrew its share of memory_limit, spilling it to disk", "dir", dir, "limit_bytes", kr.limit)
	}
	slices.SortFunc(kr.recs, func(a, b keyRec) int { return bytes.Compare(kr.key(a), kr.key(b)) })
	w, err := kr.create()
	if err != nil {
		return err
	}
	for _, r := range kr.recs {
		if err := w.put(kr.key(r), r.chunk, r.loc); err != nil {
			w.abort()
			return err
		}
	}
	if err := w.close(); err != nil {
		return err
	}
	kr.runs = append(kr.runs, w.f.Name())
	kr.recs, kr.arena = kr.recs[:0], kr.arena[:0]
	if len(kr.runs) >= maxRuns {
		return kr.compact()
	}
	return nil
}

// compact merges the runs into one, handing dead the rows that are dead already (a later chunk touched their
// key) and keeping of each key only what resolve still needs: the record of the last chunk that touched it so
// far (its row, or its touch when it wrote none).
func (kr *keyRuns) compact() error {
	w, err := kr.create()
	if err != nil {
		return err
	}
	err = kr.merge(func(key []byte, group []keyRec) error {
		last := group[len(group)-1]
		for _, r := range group {
			if r.loc != noLoc && r.chunk < last.chunk {
				kr.dead(r.loc)
			}
			if r.chunk == last.chunk && r.loc != noLoc {
				last = r // the chunk's row says more than its touch
			}
		}
		return w.put(key, last.chunk, last.loc)
	})
	if err != nil {
		w.abort()
		return err
	}
	if err := w.close(); err != nil {
		return err
	}
	for _, r := range kr.runs {
		os.Remove(r)
	}
	kr.runs = []string{w.f.Name()}
	return nil
}

// resolve merges the runs and the buffer: dead gets each written row that a later chunk replaced, live each
// key's surviving row. The runs are removed.
func (kr *keyRuns) resolve(live func(key []byte, loc uint64) error) error {
	if err := kr.flush(); err != nil {
		return err
	}
	kr.recs, kr.arena = nil, nil // the merge reads the runs alone: the buffer's memory is the commit's now
	err := kr.merge(func(key []byte, group []keyRec) error {
		last := group[len(group)-1].chunk
		for _, r := range group {
			switch {
			case r.loc == noLoc:
			case r.chunk < last:
				kr.dead(r.loc)
			case live != nil:
				if err := live(key, r.loc); err != nil {
					return err
				}
			}
		}
		return nil
	})
	kr.close()
	return err
}

// merge hands fn each key's records from every run, in chunk order.
// fn must not keep key or group.
func (kr *keyRuns) merge(fn func(key []byte, group []keyRec) error) error {
	h := &runHeap{}
	defer func() {
		for _, r := range h.rs {
			r.f.Close()
		}
	}()
	for _, name := range kr.runs {
		f, err := os.Open(name)
		if err != nil {
			return indexSpillErr(err)
		}
		r := &runReader{f: f, r: bufio.NewReaderSize(f, runReadBuf)}
		ok, err := r.next()
		if err != nil {
			f.Close()
			return err
		}
		if !ok {
			f.Close()
			continue
		}
		h.rs = append(h.rs, r)
	}
	heap.Init(h)
	var (
		key   []byte
		group []keyRec
	)
	for h.Len() > 0 {
		r := h.rs[0]
		if len(group) > 0 && !bytes.Equal(r.key, key) {
			slices.SortStableFunc(group, func(a, b keyRec) int { return cmpChunk(a.chunk, b.chunk) })
			if err := fn(key, group); err != nil {
				return err
			}
			group = group[:0]
		}
		if len(group) == 0 {
			key = append(key[:0], r.key...)
		}
		group = append(group, keyRec{chunk: r.chunk, loc: r.loc})
		ok, err := r.next()
		if err != nil {
			return err
		}
		if ok {
			heap.Fix(h, 0)
		} else {
			r.f.Close()
			heap.Pop(h)
		}
	}
	if len(group) > 0 {
		slices.SortStableFunc(group, func(a, b keyRec) int { return cmpChunk(a.chunk, b.chunk) })
		return fn(key, group)
	}
	return nil
}

func cmpChunk(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// close removes the run files and the directory.
func (kr *keyRuns) close() {
	kr.recs, kr.arena, kr.runs = nil, nil, nil
	if kr.dir == "" {
		return
	}
	if err := os.RemoveAll(kr.dir); err != nil {
		kr.log.Warn("iceberg: could not remove a key index spill directory", "dir", kr.dir, "err", err)
	}
	kr.dir = ""
}

// runWriter writes one run: records of uvarint key length, key, uvarint chunk, uvarint loc+1 (0: noLoc).
type runWriter struct {
	f *os.File
	w *bufio.Writer
	b [3 * binary.MaxVarintLen64]byte
}

func (kr *keyRuns) create() (*runWriter, error) {
	kr.seq++
	f, err := os.Create(filepath.Join(kr.dir, fmt.Sprintf("run-%d", kr.seq)))
	if err != nil {
		return nil, indexSpillErr(err)
	}
	return &runWriter{f: f, w: bufio.NewWriterSize(f, spillFileBuf)}, nil
}

func (w *runWriter) put(key []byte, chunk uint32, loc uint64) error {
	n := binary.PutUvarint(w.b[:], uint64(len(key)))
	if _, err := w.w.Write(w.b[:n]); err != nil {
		return indexSpillErr(err)
	}
	if _, err := w.w.Write(key); err != nil {
		return indexSpillErr(err)
	}
	n = binary.PutUvarint(w.b[:], uint64(chunk))
	n += binary.PutUvarint(w.b[n:], loc+1)
	if _, err := w.w.Write(w.b[:n]); err != nil {
		return indexSpillErr(err)
	}
	return nil
}

func (w *runWriter) close() error {
	if err := w.w.Flush(); err != nil {
		w.abort()
		return indexSpillErr(err)
	}
	if err := w.f.Close(); err != nil {
		os.Remove(w.f.Name())
		return indexSpillErr(err)
	}
	return nil
}

func (w *runWriter) abort() {
	w.f.Close()
	os.Remove(w.f.Name())
}

// runReader reads a run one record at a time.
type runReader struct {
	f     *os.File
	r     *bufio.Reader
	key   []byte
	chunk uint32
	loc   uint64
}

func (r *runReader) next() (bool, error) {
	n, err := binary.ReadUvarint(r.r)
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("key index spill: read %s: %w", r.f.Name(), err)
	}
	if uint64(cap(r.key)) < n {
		r.key = make([]byte, n)
	}
	r.key = r.key[:n]
	if _, err := io.ReadFull(r.r, r.key); err != nil {
		return false, fmt.Errorf("key index spill: read %s: %w", r.f.Name(), err)
	}
	chunk, err := binary.ReadUvarint(r.r)
	if err != nil {
		return false, fmt.Errorf("key index spill: read %s: %w", r.f.Name(), err)
	}
	loc, err := binary.ReadUvarint(r.r)
	if err != nil {
		return false, fmt.Errorf("key index spill: read %s: %w", r.f.Name(), err)
	}
	r.chunk, r.loc = uint32(chunk), loc-1
	return true, nil
}

// runHeap orders the run readers by their current key.
type runHeap struct{ rs []*runReader }

func (h *runHeap) Len() int           { return len(h.rs) }
func (h *runHeap) Less(i, j int) bool { return bytes.Compare(h.rs[i].key, h.rs[j].key) < 0 }
func (h *runHeap) Swap(i, j int)      { h.rs[i], h.rs[j] = h.rs[j], h.rs[i] }
func (h *runHeap) Push(x any)         { h.rs = append(h.rs, x.(*runReader)) }
func (h *runHeap) Pop() any {
	r := h.rs[len(h.rs)-1]
	h.rs = h.rs[:len(h.rs)-1]
	return r
}

// indexSpillErr is a failure to create or write the key index's run files (no such directory, no permission,
// disk full): the apply cannot finish until the operator gives it room, so it is a configuration fault naming
// the setting.
func indexSpillErr(err error) error {
	return fault.ConfigErr(fmt.Errorf("apply: spill the key index to disk: %w", err),
		"set the iceberg destination's spill_dir to a writable local directory with room for the apply's keys (about 20 bytes plus the key per row), or raise memory_limit")
}

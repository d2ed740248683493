package dest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// keyDiff finds the live keys of a table that a re-snapshot did not receive, within the destination's memory
// budget (memory_limit, the share an apply buffers: Settings.bufferBudget).
//
// The received keys of each re-snapshot ending in the apply (keySet) are kept in a map while they fit the
// budget, as before: small tables pay nothing. Once they outgrow it (the keys of a 100M-row table take GBs at
// 40–60 bytes each), every key, received and live, goes to one of `parts` files by a hash of its encoding,
// under a directory of its own in the spill directory; then partition p's received keys are loaded into a map
// and partition p's live keys streamed past it, one partition at a time, so that memory holds one partition's
// received keys. The live side keeps the key columns (Arrow IPC) so the unreceived rows become the delete
// batches directly. The set of keys found is the same either way: a key hashes to one partition on both sides.
//
// The directory goes when the diff is done, whatever the outcome; one left by a process that was killed is
// removed by the next diff of any process (its name carries the pid, which is no longer alive).
type keyDiff struct {
	budget int64  // bytes the received sets may take in memory; 0: no limit
	dir    string // where the spill directory is made
	log    *slog.Logger
	mem    memory.Allocator
	schema *arrow.Schema // the key columns
	est    int64         // the table's live rows, to size the partitions

	sets  []*keySet
	bytes int64 // estimated bytes of the sets' maps

	spill string // the spill directory; "" while everything is in memory
	parts int
	seed  maphash.Seed
	buf   []byte
}

// keySet is the received keys of one re-snapshot: those of the apply itself (base, the bracket's map, only
// read), and those read from the data files added since its begin, in added or, once spilled, in files.
type keySet struct {
	base  map[string]struct{}
	added map[string]struct{}
	files []*keyFile // by partition, once spilled
}

// keyFile is a partition's file of encoded keys, each prefixed by its length as a uvarint.
type keyFile struct {
	f *os.File
	w *bufio.Writer
}

// spillPrefix names the spill directories of re-snapshot ends: spillPrefix + pid + "-" + random.
const spillPrefix = "skippr-iceberg-resnap-"

// maxParts bounds the open files of a spilled diff (one per partition and set, one per partition of live keys).
const maxParts = 128

// spillFileBuf is the write buffer of each partition file: maxParts of them stay small.
const spillFileBuf = 16 << 10

func newKeyDiff(budget int64, dir string, log *slog.Logger, mem memory.Allocator, schema *arrow.Schema, est int64) *keyDiff {
	if dir == "" {
		dir = os.TempDir()
	}
	return &keyDiff{budget: budget, dir: dir, log: log, mem: mem, schema: schema, est: est, seed: maphash.MakeSeed()}
}

// newSet adds a received set seeded with base (not modified).
func (kd *keyDiff) newSet(base map[string]struct{}) *keySet {
	s := &keySet{base: base, added: map[string]struct{}{}}
	for k := range base {
		kd.bytes += encEntryBytes + int64(len(k))
	}
	kd.sets = append(kd.sets, s)
	return s
}

// drop forgets a set, with its files.
func (kd *keyDiff) drop(s *keySet) {
	for _, f := range s.files {
		f.f.Close()
		os.Remove(f.f.Name())
	}
	kd.sets = slices.DeleteFunc(kd.sets, func(o *keySet) bool { return o == s })
}

// add notes the keys of rec's rows as received by s.
func (kd *keyDiff) add(s *keySet, rec arrow.RecordBatch) error {
	k := change.NewKey(rec.Columns(), nil)
	for i := range int(rec.NumRows()) {
		var err error
		if kd.buf, err = k.Append(kd.buf[:0], i); err != nil {
			return err
		}
		if _, ok := s.base[string(kd.buf)]; ok {
			continue
		}
		if kd.spill != "" {
			if err := s.files[kd.part(kd.buf)].put(kd.buf); err != nil {
				return err
			}
			continue
		}
		if _, ok := s.added[string(kd.buf)]; ok {
			continue
		}
		s.added[string(kd.buf)] = struct{}{}
		kd.bytes += encEntryBytes + int64(len(kd.buf))
		if kd.budget > 0 && kd.bytes > kd.budget {
			if err := kd.startSpill(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (kd *keyDiff) part(enc []byte) int { return int(maphash.Bytes(kd.seed, enc) % uint64(kd.parts)) }

// startSpill moves the added keys to partition files. The partitions are sized so that one partition of
// every set takes half the budget, by the larger of what was read so far and the table's live rows.
func (kd *keyDiff) startSpill() error {
	entries := int64(0)
	for _, s := range kd.sets {
		entries += int64(len(s.base) + len(s.added))
	}
	perKey := kd.bytes / max(entries, 1)
	want := max(2*kd.bytes, kd.est*perKey*int64(len(kd.sets)))
	half := max(kd.budget/2, 1)
	kd.parts = int(min(max((want+half-1)/half, 2), maxParts))
	sweepSpills(kd.dir, kd.log)
	dir, err := os.MkdirTemp(kd.dir, spillPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return spillErr(err)
	}
	kd.spill = dir
	for si, s := range kd.sets {
		s.files = make([]*keyFile, kd.parts)
		for p := range s.files {
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("received-%d-%d", si, p)))
			if err != nil {
				return spillErr(err)
			}
			s.files[p] = &keyFile{f: f, w: bufio.NewWriterSize(f, spillFileBuf)}
		}
		for k := range s.added {
			if err := s.files[kd.part([]byte(k))].put([]byte(k)); err != nil {
				return err
			}
		}
		s.added = nil
	}
	kd.log.Info("iceberg re-snapshot end: received keys outgrew the memory budget, diffing by partition on disk", "dir", dir, "partitions", kd.parts, "budget_bytes", kd.budget, "bytes_in_memory", kd.bytes)
	kd.bytes = 0
	return nil
}

func (f *keyFile) put(enc []byte) error {
	var n [binary.MaxVarintLen64]byte
	if _, err := f.w.Write(n[:binary.PutUvarint(n[:], uint64(len(enc)))]); err != nil {
		return spillErr(err)
	}
	if _, err := f.w.Write(enc); err != nil {
		return spillErr(err)
	}
	return nil
}

// load reads a partition file back into a map.
func (f *keyFile) load() (map[string]struct{}, error) {
	if err := f.w.Flush(); err != nil {
		return nil, spillErr(err)
	}
	if _, err := f.f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("spill: %w", err)
	}
	r := bufio.NewReaderSize(f.f, 64<<10)
	set := map[string]struct{}{}
	var buf []byte
	for {
		n, err := binary.ReadUvarint(r)
		if errors.Is(err, io.EOF) {
			return set, nil
		}
		if err != nil {
			return nil, fmt.Errorf("spill: read %s: %w", f.f.Name(), err)
		}
		if uint64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("spill: read %s: %w", f.f.Name(), err)
		}
		set[string(buf)] = struct{}{}
	}
}

// has says whether s holds enc; part is its partition map when spilled, nil otherwise.
func (s *keySet) has(enc []byte, part map[string]struct{}) bool {
	if _, ok := s.base[string(enc)]; ok {
		return true
	}
	if part != nil {
		_, ok := part[string(enc)]
		return ok
	}
	_, ok := s.added[string(enc)]
	return ok
}

// unreceivedRows returns the rows of a batch of live keys that a set lacks; parts are the sets' partition maps
// when spilled (nil otherwise).
func (kd *keyDiff) unreceivedRows(rec arrow.RecordBatch, parts []map[string]struct{}) ([]int64, error) {
	k := change.NewKey(rec.Columns(), nil)
	var rows []int64
	for i := range int(rec.NumRows()) {
		var err error
		if kd.buf, err = k.Append(kd.buf[:0], i); err != nil {
			return nil, err
		}
		for si, s := range kd.sets {
			var part map[string]struct{}
			if parts != nil {
				part = parts[si]
			}
			if !s.has(kd.buf, part) {
				rows = append(rows, int64(i))
				break
			}
		}
	}
	return rows, nil
}

// liveSpill holds the table's live keys partitioned into Arrow IPC files, once the received keys spilled.
type liveSpill struct {
	kd    *keyDiff
	files []*os.File
	bufs  []*bufio.Writer
	ws    []*ipc.Writer
}

func (kd *keyDiff) newLiveSpill() (*liveSpill, error) {
	ls := &liveSpill{kd: kd}
	for p := range kd.parts {
		f, err := os.Create(filepath.Join(kd.spill, fmt.Sprintf("live-%d", p)))
		if err != nil {
			return nil, spillErr(err)
		}
		bw := bufio.NewWriterSize(f, spillFileBuf)
		ls.files, ls.bufs = append(ls.files, f), append(ls.bufs, bw)
		ls.ws = append(ls.ws, ipc.NewWriter(bw, ipc.WithSchema(kd.schema), ipc.WithAllocator(kd.mem)))
	}
	return ls, nil
}

// add writes each row of a batch of live keys to its partition.
func (ls *liveSpill) add(ctx context.Context, rec arrow.RecordBatch) error {
	kd := ls.kd
	k := change.NewKey(rec.Columns(), nil)
	rows := make([][]int64, kd.parts)
	for i := range int(rec.NumRows()) {
		var err error
		if kd.buf, err = k.Append(kd.buf[:0], i); err != nil {
			return err
		}
		p := kd.part(kd.buf)
		rows[p] = append(rows[p], int64(i))
	}
	for p, idx := range rows {
		if len(idx) == 0 {
			continue
		}
		t, err := take(ctx, kd.mem, rec, idx)
		if err != nil {
			return err
		}
		err = ls.ws[p].Write(t)
		t.Release()
		if err != nil {
			return spillErr(err)
		}
	}
	return nil
}

// diff calls emit with the unreceived rows of each partition's live keys, one partition at a time.
func (ls *liveSpill) diff(ctx context.Context, emit func(arrow.RecordBatch) error) error {
	kd := ls.kd
	for p := range kd.parts {
		if err := ls.ws[p].Close(); err != nil {
			return spillErr(err)
		}
		if err := ls.bufs[p].Flush(); err != nil {
			return spillErr(err)
		}
	}
	for p := range kd.parts {
		if err := ctx.Err(); err != nil {
			return err
		}
		parts := make([]map[string]struct{}, len(kd.sets))
		for si, s := range kd.sets {
			m, err := s.files[p].load()
			if err != nil {
				return err
			}
			parts[si] = m
			// The partition's file is read: its disk space can go now.
			s.files[p].f.Close()
			os.Remove(s.files[p].f.Name())
		}
		if err := ls.diffPart(ctx, p, parts, emit); err != nil {
			return err
		}
	}
	return nil
}

func (ls *liveSpill) diffPart(ctx context.Context, p int, parts []map[string]struct{}, emit func(arrow.RecordBatch) error) error {
	kd := ls.kd
	f := ls.files[p]
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	rd, err := ipc.NewReader(bufio.NewReaderSize(f, 64<<10), ipc.WithSchema(kd.schema), ipc.WithAllocator(kd.mem))
	if err != nil {
		return fmt.Errorf("spill: read %s: %w", f.Name(), err)
	}
	defer rd.Release()
	for rd.Next() {
		rec := rd.RecordBatch()
		rows, err := kd.unreceivedRows(rec, parts)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			continue
		}
		t, err := take(ctx, kd.mem, rec, rows)
		if err != nil {
			return err
		}
		if err := emit(t); err != nil {
			return err
		}
	}
	if err := rd.Err(); err != nil {
		return fmt.Errorf("spill: read %s: %w", f.Name(), err)
	}
	return nil
}

// close removes the spill directory, if any.
func (kd *keyDiff) close() {
	if kd.spill == "" {
		return
	}
	for _, s := range kd.sets {
		for _, f := range s.files {
			if f != nil {
				f.f.Close()
			}
		}
	}
	if err := os.RemoveAll(kd.spill); err != nil {
		kd.log.Warn("iceberg: could not remove a re-snapshot spill directory", "dir", kd.spill, "err", err)
	}
}

func (ls *liveSpill) close() {
	for _, f := range ls.files {
		f.Close()
	}
}

// spillErr is a failure to create or write the spill files (no such directory, no permission, disk full): the
// end cannot finish until the operator gives it room, so it is a configuration fault naming the setting.
func spillErr(err error) error {
	return fault.ConfigErr(fmt.Errorf("re-snapshot end: spill keys to disk: %w", err),
		"set the iceberg destination's spill_dir to a writable local directory with room for the table's key columns (about twice their size), or raise memory_limit")
}

// sweepSpills removes the spill directories in dir of processes that are gone (killed during an end, or during
// an apply whose key index was on disk: keyruns.go).
func sweepSpills(dir string, log *slog.Logger) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), spillPrefix)
		if !ok {
			rest, ok = strings.CutPrefix(e.Name(), indexSpillPrefix)
		}
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || pid <= 0 || alive(pid) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Warn("iceberg: could not remove the spill directory of a dead process", "dir", e.Name(), "err", err)
		}
	}
}

// alive says whether a process with that id exists (EPERM: it exists, owned by another user).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Package filedest is a destination for tests: it keeps every apply in an append-only log file, so that a test
// can check exactly-once delivery without a database. It runs as a real plugin process (plugins/testdest), and
// it is the SDK's reference destination: it streams a range of any size to disk in constant memory and finds
// its fence without reading its log.
//
// # Files
//
// DIR/applied.log is a sequence of frames:
//
//	uint32 length | uint32 CRC-32C (Castagnoli) of the payload | payload (JSON of Frame)
//
// both integers little-endian. An apply writes one Frame with Apply set (pipeline, first and last entry), then
// frames of rows (each at most about 1 MiB of JSON, so a range of any size is written batch by batch and never
// held whole), and a frame per schema change.
//
// DIR/applied.state is the commit record (JSON of Commit): how many bytes of the log are committed, and per
// pipeline the last entry applied and the last entry per stream, which is what LastApplied returns. Only bytes
// below Commit.Size are part of the log; anything after them is an apply that did not commit.
//
// # Commit protocol
//
// Under an exclusive flock of DIR/applied.lock (so two processes naming one directory take turns), an apply:
//
//  1. reads applied.state: its fence is the pipeline's entry there, its write offset is Size;
//  2. truncates the log to Size (cutting an apply that did not commit) and writes its frames from there,
//     streaming the range's batches as they arrive;
//  3. fsyncs the log;
//  4. writes the new Commit to applied.state.tmp, fsyncs it, renames it over applied.state and fsyncs DIR.
//
// The rename in step 4 is the commit: the data and the fence become visible together. A SIGKILL (or power loss)
// before it leaves the old state, which neither counts the new frames nor moves the fence, so the engine's
// replay of the range writes it again over the cut tail; a SIGKILL after it leaves both, and the replay finds
// the range covered and skips it. Step 3 comes first so that a committed state never points past data that a
// power loss could take back; the directory fsync makes the rename itself durable before Apply returns.
//
// The one invariant: no apply changes a byte below the committed Size, so Load (which reads the commit record,
// then the log up to its Size) may run beside an apply. Finding the fence costs one read of a file of a few
// hundred bytes, whatever the log's length. A frame that fails its CRC below Size is corruption, not a torn
// write, and Load reports it with its offset.
//
// Why a separate commit record rather than a trailer frame at the end of each apply: after a crash the log's
// end is a torn apply, and the last good trailer behind it could only be found by scanning the log, which is
// what this design removes. The price is a second fsync and a rename per apply. Why frames of about 1 MiB:
// before, an apply built the whole range as Go values and wrote one record; TestApplyStreamsRange measured
// 109 MiB of live heap for a 200k-row range (32 MiB of log) then, under 2 MiB now.
package filedest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

const logName = "applied.log"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Settings of the destination.
type Settings struct {
	Dir string `json:"dir"`
	// AtLeastOnce makes the destination declare that it cannot honour exactly-once (to test the engine's refusal).
	AtLeastOnce bool `json:"at_least_once"`
	// NoTruncate makes the destination declare that it cannot apply a truncate (to test the engine's refusal).
	NoTruncate bool `json:"no_truncate"`
	// NoCoalesce makes the destination take one WAL entry per apply, as a destination without coalesce does.
	NoCoalesce bool `json:"no_coalesce"`
	// NoResnapshot makes the destination declare that it cannot apply resnapshot marks (to test the refusal).
	NoResnapshot bool `json:"no_resnapshot"`
	// NoRenamedStream makes the destination declare that it does not follow a renamed stream, as a plugin built
	// before the capability existed (to test the engine's refusal); it still follows one it is sent.
	NoRenamedStream bool `json:"no_renamed_stream"`
	// ProposeMaxInterval (a Go duration, "1h") makes the destination propose that apply max_interval, as a
	// warehouse does (to test the engine's apply defaults).
	ProposeMaxInterval string `json:"propose_max_interval"`
}

// SettingsSchema is the JSON Schema of Settings.
const SettingsSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "required": ["dir"],
  "properties": {
    "dir": {"type": "string", "minLength": 1, "description": "directory of the apply log"},
    "at_least_once": {"type": "boolean"},
    "no_truncate": {"type": "boolean"},
    "no_coalesce": {"type": "boolean", "description": "take one WAL entry per apply"},
    "no_resnapshot": {"type": "boolean"},
    "no_renamed_stream": {"type": "boolean"},
    "propose_max_interval": {"type": "string", "description": "apply max_interval to propose (a Go duration)"}
  }
}`

// Row is one change as stored.
type Row struct {
	Stream string         `json:"stream"`
	Op     change.Op      `json:"op"`
	Key    string         `json:"key"`
	Values map[string]any `json:"values,omitempty"`
	// Truncate marks a truncate of the stream at this point instead of a row: every earlier row is gone.
	Truncate bool `json:"truncate,omitempty"`
	// Resnapshot marks the begin ("begin") or the end ("end") of a re-snapshot of the stream. The log itself is
	// the durable "rows seen since begin": Load replays it, and at an end removes the keys not seen since the begin.
	Resnapshot string `json:"resnapshot,omitempty"`
	// RenamedFrom marks the stream's first schema after the source renamed it (change.RenamedFromTableMeta):
	// the former stream's rows become the stream's, unless the stream holds rows already (a replay).
	RenamedFrom string `json:"renamed_from,omitempty"`
}

// Record opens one apply in the log: of the entries First..Sequence (a coalesced range), or of Sequence alone
// (First 0). The apply's rows and schema changes follow it in frames of their own.
type Record struct {
	Pipeline string `json:"pipeline"`
	First    uint64 `json:"first,omitempty"`
	Sequence uint64 `json:"sequence"`
}

// Frame is the payload of one log frame: exactly one of its fields is set.
type Frame struct {
	Apply  *Record `json:"apply,omitempty"`  // an apply begins
	Rows   []Row   `json:"rows,omitempty"`   // rows of the current apply, in log order
	Schema string  `json:"schema,omitempty"` // the stream's schema changed in the current apply
}

// Commit is the content of applied.state: the committed extent of the log and what it holds per pipeline.
type Commit struct {
	Size    int64                    `json:"size"`
	Applied map[string]serve.Applied `json:"applied"`
}

const (
	stateName = "applied.state"
	lockName  = "applied.lock"
	// frameTarget is the size at which a frame of rows is closed: it bounds what an apply holds in memory
	// besides the batch the SDK lends it.
	frameTarget = 1 << 20
)

// Destination implements serve.SessionDestination.
type Destination struct {
	Version string
	// mu serialises this process's applies (the flock serialises processes; taking it twice in one process
	// would only make the second apply poll).
	mu sync.Mutex
}

var _ serve.SessionDestination = (*Destination)(nil)

func (d *Destination) Spec() serve.Spec {
	return serve.Spec{Name: "testdest", Version: d.Version, Kind: serve.KindDestination,
		Description: "append-only apply log for tests", SettingsSchema: json.RawMessage(SettingsSchema)}
}

func parse(raw json.RawMessage) (Settings, error) {
	var s Settings
	if err := serve.DecodeSettings(raw, &s); err != nil {
		return s, err
	}
	if s.Dir == "" {
		return s, errors.New("settings: dir is required")
	}
	if s.ProposeMaxInterval != "" {
		if _, err := time.ParseDuration(s.ProposeMaxInterval); err != nil {
			return s, fault.ConfigErr(fmt.Errorf("settings: propose_max_interval: %w", err), `write a Go duration such as "1h"`)
		}
	}
	return s, nil
}

func (d *Destination) Check(_ context.Context, raw json.RawMessage) error {
	s, err := parse(raw)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return dirErr(s.Dir, err)
	}
	return nil
}

func (d *Destination) Capabilities(_ context.Context, raw json.RawMessage) (serve.Capabilities, error) {
	s, err := parse(raw)
	if err != nil {
		return serve.Capabilities{}, err
	}
	var proposal serve.ApplyDefaults
	if s.ProposeMaxInterval != "" {
		proposal.MaxInterval, _ = time.ParseDuration(s.ProposeMaxInterval) // parse checked it
	}
	if s.AtLeastOnce {
		return serve.Capabilities{Deletes: true, Truncate: !s.NoTruncate, Coalesce: !s.NoCoalesce, Resnapshot: !s.NoResnapshot, RenamedStream: !s.NoRenamedStream, ApplyDefaults: proposal, ExactlyOnceNote: "at_least_once is set: the destination does not record applied sequence numbers"}, nil
	}
	return serve.Capabilities{ExactlyOnce: true, Deletes: true, SchemaEvolution: true, Truncate: !s.NoTruncate, Coalesce: !s.NoCoalesce, Resnapshot: !s.NoResnapshot, RenamedStream: !s.NoRenamedStream, ApplyDefaults: proposal}, nil
}

// Open parses the settings. The session keeps nothing of the directory in memory: every call reads the commit
// record, as another process (or another settings value naming the same directory) may have moved it.
func (d *Destination) Open(_ context.Context, raw json.RawMessage) (serve.Session, error) {
	s, err := parse(raw)
	if err != nil {
		return nil, err
	}
	return &session{d: d, s: s}, nil
}

// session is the destination open for one settings value.
type session struct {
	d *Destination
	s Settings
	// beforeCommit, when set (by tests), runs after the log is synced and before the commit record is
	// written: an error there leaves the directory exactly as a SIGKILL at that point would.
	beforeCommit func() error
}

func (x *session) Close() error { return nil }

func (x *session) LastApplied(_ context.Context, pipeline string) (serve.Applied, error) {
	c, err := readCommit(x.s.Dir)
	if err != nil {
		return serve.Applied{}, err
	}
	a := c.Applied[pipeline]
	if a.Streams == nil {
		a.Streams = map[string]uint64{}
	}
	return a, nil
}

func (x *session) Apply(ctx context.Context, r *serve.Range) (serve.ApplyResult, error) {
	s := x.s
	x.d.mu.Lock()
	defer x.d.mu.Unlock()
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return serve.ApplyResult{}, dirErr(s.Dir, err)
	}
	unlock, err := lockDir(ctx, s.Dir)
	if err != nil {
		return serve.ApplyResult{}, err
	}
	defer unlock()
	c, err := readCommit(s.Dir)
	if err != nil {
		return serve.ApplyResult{}, err
	}
	var fence uint64
	if !s.AtLeastOnce {
		fence = c.Applied[r.Pipeline].Sequence
	}
	if r.Covers(fence) {
		return serve.ApplyResult{Skipped: true}, nil
	}
	w, err := openLog(s.Dir, c.Size)
	if err != nil {
		return serve.ApplyResult{}, fmt.Errorf("apply %d: %w", r.Sequence, err)
	}
	defer w.f.Close()
	head := Record{Pipeline: r.Pipeline, Sequence: r.Sequence}
	// A replay of part of a range it holds: only the entries after the fence are new.
	if first := max(r.FirstSequence, fence+1); first < r.Sequence {
		head.First = first
	}
	if err := w.frame(Frame{Apply: &head}); err != nil {
		return serve.ApplyResult{}, fmt.Errorf("apply %d: %w", r.Sequence, err)
	}
	a := c.Applied[r.Pipeline]
	a.Sequence = max(a.Sequence, r.Sequence)
	if a.Streams == nil {
		a.Streams = map[string]uint64{}
	}
	touch := func(stream string) { a.Streams[stream] = max(a.Streams[stream], r.Sequence) }
	rows := int64(0)
	for st, err := range r.Entries(fence) {
		if err != nil {
			return serve.ApplyResult{}, err
		}
		it := st.Item
		switch {
		case st.End:
		case it.Schema != nil:
			if from := change.RenamedFromTable(it.Schema.Schema); from != "" && from != it.Stream {
				if _, ok := a.Streams[from]; ok {
					a.Streams[it.Stream] = max(a.Streams[it.Stream], a.Streams[from])
					delete(a.Streams, from)
				}
				if err = w.row(Row{Stream: it.Stream, RenamedFrom: from}); err != nil {
					break
				}
			}
			err = w.frame(Frame{Schema: it.Stream})
		case it.Truncate:
			touch(it.Stream)
			err = w.row(Row{Stream: it.Stream, Truncate: true})
		case it.Resnapshot == serve.ResnapshotBegin:
			touch(it.Stream)
			err = w.row(Row{Stream: it.Stream, Resnapshot: "begin"})
		case it.Resnapshot == serve.ResnapshotEnd:
			if s.NoResnapshot {
				return serve.ApplyResult{}, fault.ConfigErr(fmt.Errorf("apply %d: resnapshot mark of %s, but no_resnapshot is set", r.Sequence, it.Stream), "unset no_resnapshot")
			}
			touch(it.Stream)
			err = w.row(Row{Stream: it.Stream, Resnapshot: "end"})
		default:
			touch(it.Stream)
			err = eachRow(it.Stream, it.Record, func(row Row) error {
				rows++
				return w.row(row)
			})
		}
		if err != nil {
			return serve.ApplyResult{}, fmt.Errorf("apply %d: %w", r.Sequence, err)
		}
	}
	if err := w.sync(); err != nil {
		return serve.ApplyResult{}, fmt.Errorf("apply %d: %w", r.Sequence, err)
	}
	if x.beforeCommit != nil {
		if err := x.beforeCommit(); err != nil {
			return serve.ApplyResult{}, err
		}
	}
	c.Size = w.off
	c.Applied[r.Pipeline] = a
	if err := writeCommit(s.Dir, c); err != nil {
		return serve.ApplyResult{}, fmt.Errorf("apply %d: %w", r.Sequence, err)
	}
	return serve.ApplyResult{Rows: rows}, ctx.Err()
}

// logWriter appends frames to the log from a committed offset. Rows are gathered into one frame until it
// reaches frameTarget, so the writer holds at most about a frame, whatever the range.
type logWriter struct {
	f    *os.File
	bw   *bufio.Writer
	off  int64        // end of what was handed to bw
	rows bytes.Buffer // the open rows frame's payload, `{"rows":[` and the rows so far
}

func openLog(dir string, size int64) (*logWriter, error) {
	path := filepath.Join(dir, logName)
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, dirErr(dir, err)
	}
	if errors.Is(statErr, os.ErrNotExist) {
		if err := syncDir(dir); err != nil { // the new file's name must survive a power loss too
			f.Close()
			return nil, err
		}
	}
	// Cut what an apply that did not commit left after the committed bytes.
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("cut %s to its committed %d bytes: %w", path, size, err)
	}
	if _, err := f.Seek(size, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return &logWriter{f: f, bw: bufio.NewWriterSize(f, 256<<10), off: size}, nil
}

func (w *logWriter) row(r Row) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if w.rows.Len() == 0 {
		w.rows.WriteString(`{"rows":[`)
	} else {
		w.rows.WriteByte(',')
	}
	w.rows.Write(b)
	if w.rows.Len() >= frameTarget {
		return w.flushRows()
	}
	return nil
}

func (w *logWriter) flushRows() error {
	if w.rows.Len() == 0 {
		return nil
	}
	w.rows.WriteString(`]}`)
	err := w.write(w.rows.Bytes())
	w.rows.Reset()
	if w.rows.Cap() > 4*frameTarget { // one huge row must not keep its buffer for the rest of the range
		w.rows = bytes.Buffer{}
	}
	return err
}

// frame closes the open rows frame, keeping log order, and writes f.
func (w *logWriter) frame(f Frame) error {
	if err := w.flushRows(); err != nil {
		return err
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return w.write(b)
}

func (w *logWriter) write(payload []byte) error {
	if len(payload) > math.MaxUint32 {
		return fmt.Errorf("a frame of %d bytes is over the format's 4 GiB", len(payload))
	}
	var hdr [8]byte
	putFrameHeader(hdr[:], payload)
	if _, err := w.bw.Write(hdr[:]); err != nil {
		return fmt.Errorf("append to %s: %w", w.f.Name(), err)
	}
	if _, err := w.bw.Write(payload); err != nil {
		return fmt.Errorf("append to %s: %w", w.f.Name(), err)
	}
	w.off += int64(len(hdr) + len(payload))
	return nil
}

// putFrameHeader writes the 8-byte header of a frame of payload into hdr.
func putFrameHeader(hdr, payload []byte) {
	binary.LittleEndian.PutUint32(hdr[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(hdr[4:], crc32.Checksum(payload, castagnoli))
}

func (w *logWriter) sync() error {
	if err := w.flushRows(); err != nil {
		return err
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("append to %s: %w", w.f.Name(), err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", w.f.Name(), err)
	}
	return nil
}

// readCommit reads DIR/applied.state; a directory without one holds nothing committed.
func readCommit(dir string) (Commit, error) {
	c := Commit{Applied: map[string]serve.Applied{}}
	path := filepath.Join(dir, stateName)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return c, checkNotLegacy(dir)
	case errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.ENOTDIR):
		return c, dirErr(dir, err)
	case err != nil:
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fault.DataErr(fmt.Errorf("%s: %w", path, err), "the commit record is damaged: restore the directory or start a new one")
	}
	if c.Applied == nil {
		c.Applied = map[string]serve.Applied{}
	}
	return c, nil
}

// checkNotLegacy refuses a log written before the commit record existed (an older testdest: one record per apply
// and no applied.state): read as this format it would look uncommitted and be cut.
func checkNotLegacy(dir string) error {
	f, err := os.Open(filepath.Join(dir, logName))
	if err != nil {
		return nil // no log: a new directory
	}
	defer f.Close()
	fr, _, err := nextFrame(bufio.NewReader(f))
	if err != nil || fr.Apply != nil {
		return nil // empty, torn, or this format's uncommitted first apply
	}
	return fault.ConfigErr(fmt.Errorf("%s was written by an older testdest (no %s beside it)", filepath.Join(dir, logName), stateName),
		"set dir to a new directory, or remove the old one")
}

// writeCommit replaces DIR/applied.state atomically and durably: the commit point of an apply.
func writeCommit(dir string, c Commit) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, stateName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return dirErr(dir, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("commit %s: %w", path, err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// lockDir takes the exclusive flock of DIR/applied.lock, polling so that ctx can end the wait (flock itself
// cannot be interrupted), and returns its release.
func lockDir(ctx context.Context, dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, dirErr(dir, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing the file releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s: another apply holds it: %w", f.Name(), ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ToRows converts a change batch to stored rows; tests use it to build the state they expect.
func ToRows(stream string, rec arrow.RecordBatch) ([]Row, error) {
	rows := make([]Row, 0, rec.NumRows())
	err := eachRow(stream, rec, func(r Row) error {
		rows = append(rows, r)
		return nil
	})
	return rows, err
}

// eachRow calls fn with each row of a change batch in turn, so a caller that writes them out holds one.
func eachRow(stream string, rec arrow.RecordBatch, fn func(Row) error) error {
	ops, err := change.Ops(rec)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	sc := rec.Schema()
	pk := change.PrimaryKey(sc)
	var pkIdx []int
	for _, k := range pk {
		idx := sc.FieldIndices(k)
		if len(idx) != 1 {
			return fmt.Errorf("stream %s: primary key column %q not in schema", stream, k)
		}
		pkIdx = append(pkIdx, idx[0])
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		r := Row{Stream: stream, Op: change.Op(ops.Value(i))}
		var key []string
		for _, j := range pkIdx {
			b, _ := json.Marshal(rec.Column(j).GetOneForMarshal(i))
			key = append(key, string(b))
		}
		r.Key = strings.Join(key, "|")
		if r.Op != change.OpDelete {
			r.Values = map[string]any{}
			for j, f := range sc.Fields() {
				if change.Reserved(f.Name) {
					continue
				}
				r.Values[f.Name] = rec.Column(j).GetOneForMarshal(i)
			}
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// nextFrame reads one frame; a short read or a CRC mismatch is errTorn.
func nextFrame(br *bufio.Reader) (Frame, int64, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		if err == io.EOF {
			return Frame{}, 0, io.EOF
		}
		return Frame{}, 0, errTorn
	}
	n := binary.LittleEndian.Uint32(hdr[0:])
	payload := make([]byte, n)
	if _, err := io.ReadFull(br, payload); err != nil {
		return Frame{}, 0, errTorn
	}
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(hdr[4:]) {
		return Frame{}, 0, errTorn
	}
	var f Frame
	if err := json.Unmarshal(payload, &f); err != nil {
		return Frame{}, 0, err
	}
	return f, 8 + int64(n), nil
}

var errTorn = errors.New("short frame or CRC mismatch")

// Scan calls fn with each committed frame of the log in dir, in order, reading one frame at a time: for a
// check over a log too large to Load.
func Scan(dir string, fn func(Frame) error) error { return readLog(dir, fn) }

// readLog calls fn with each committed frame of the log in dir, in order, reading one frame at a time.
func readLog(dir string, fn func(Frame) error) error {
	c, err := readCommit(dir)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, logName)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) && c.Size == 0 {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	for off := int64(0); off < c.Size; {
		fr, n, err := nextFrame(br)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("%s at offset %d, below its committed %d bytes: %w", path, off, c.Size, err)
		}
		if err := fn(fr); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// State is what a destination directory holds after replaying its log: per stream, per key, the row's values.
type State struct {
	Tables map[string]map[string]map[string]any
	// Sequences lists the applied sequence numbers per pipeline in log order, each entry of a range on its
	// own; a duplicate is a bug.
	Sequences map[string][]uint64
	// Applies counts the applies (commits) per pipeline: fewer than len(Sequences) when ranges were coalesced.
	Applies map[string]int
	Rows    int64 // change rows applied in all
}

// Load replays the committed part of the log in dir into the table state a database would hold. It may run
// beside an apply: it reads the commit record first, and no apply changes bytes below it.
func Load(dir string) (State, error) {
	st := State{Tables: map[string]map[string]map[string]any{}, Sequences: map[string][]uint64{}, Applies: map[string]int{}}
	f := folder{tables: st.Tables}
	err := readLog(dir, func(fr Frame) error {
		if r := fr.Apply; r != nil {
			st.Applies[r.Pipeline]++
			for seq := max(r.First, 1); seq < r.Sequence && r.First != 0; seq++ {
				st.Sequences[r.Pipeline] = append(st.Sequences[r.Pipeline], seq)
			}
			st.Sequences[r.Pipeline] = append(st.Sequences[r.Pipeline], r.Sequence)
		}
		for _, row := range fr.Rows {
			if !row.Truncate && row.Resnapshot == "" && row.RenamedFrom == "" {
				st.Rows++
			}
			f.add(row)
		}
		return nil
	})
	if err != nil {
		return State{}, err
	}
	return st, nil
}

// folder folds rows into tables: newest wins, deletes remove, a truncate empties the stream, and a resnapshot
// end removes the keys not seen since its begin.
type folder struct {
	tables map[string]map[string]map[string]any
	seen   map[string]map[string]bool // per stream being re-snapshot: keys received since the begin
}

func (f *folder) add(row Row) {
	if row.RenamedFrom != "" {
		if old, ok := f.tables[row.RenamedFrom]; ok && f.tables[row.Stream] == nil {
			f.tables[row.Stream] = old
			delete(f.tables, row.RenamedFrom)
			if seen, ok := f.seen[row.RenamedFrom]; ok {
				f.seen[row.Stream] = seen
				delete(f.seen, row.RenamedFrom)
			}
		}
		return
	}
	t := f.tables[row.Stream]
	if t == nil || row.Truncate {
		t = map[string]map[string]any{}
		f.tables[row.Stream] = t
	}
	switch {
	case row.Truncate:
		return
	case row.Resnapshot == "begin":
		if f.seen == nil {
			f.seen = map[string]map[string]bool{}
		}
		if f.seen[row.Stream] == nil { // a second begin (a resumed request) keeps what the first saw
			f.seen[row.Stream] = map[string]bool{}
		}
		return
	case row.Resnapshot == "end":
		if seen, ok := f.seen[row.Stream]; ok {
			for k := range t {
				if !seen[k] {
					delete(t, k)
				}
			}
			delete(f.seen, row.Stream)
		}
		return
	}
	if seen := f.seen[row.Stream]; seen != nil {
		seen[row.Key] = true
	}
	if row.Op == change.OpDelete {
		delete(t, row.Key)
	} else {
		t[row.Key] = row.Values
	}
}

// Replay folds rows into tables the way Load does, so a test can compute the state it expects from a source's
// own output. Values go through JSON, as they do in the log, so both sides compare alike.
func Replay(tables map[string]map[string]map[string]any, rows []Row) error {
	b, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	var norm []Row
	if err := json.Unmarshal(b, &norm); err != nil {
		return err
	}
	f := folder{tables: tables}
	for _, row := range norm {
		f.add(row)
	}
	return nil
}

// dirErr: a directory that cannot be created needs a person, not a retry.
func dirErr(dir string, err error) error {
	return fault.ConfigErr(fmt.Errorf("directory %s is not writable: %w", dir, err),
		"set the connection's dir to a directory the plugin can create and write")
}

// Package filedest is a destination for tests: it keeps every apply in an append-only log file, so that a test
// can check exactly-once delivery without a database. It runs as a real plugin process (plugins/testdest).
//
// On disk, DIR/applied.log is a sequence of records:
//
//	uint32 length | uint32 CRC-32C of the payload | payload (JSON of Record)
//
// An apply appends one record and fsyncs: that is the commit. A torn record at the end (a crash during the
// write) fails its length or CRC check and is cut off when the log is next opened, so an apply is all or
// nothing, and LastApplied is the highest sequence number of the records that survive.
package filedest

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
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
}

// Record is one apply: of the entries First..Sequence (a coalesced range), or of Sequence alone (First 0).
type Record struct {
	Pipeline string   `json:"pipeline"`
	First    uint64   `json:"first,omitempty"`
	Sequence uint64   `json:"sequence"`
	Schemas  []string `json:"schemas,omitempty"` // streams whose schema changed in this apply
	Rows     []Row    `json:"rows"`
}

// Destination implements serve.SessionDestination.
type Destination struct {
	Version string
	mu      sync.Mutex
	// logs caches what each log file holds, keyed by path, so an apply reads the file only when another
	// process may have changed it (its size differs from what this process last wrote or read).
	logs map[string]*logSummary
}

// logSummary is what Apply and LastApplied need of a log: where its intact records end and, per pipeline,
// the applied sequence numbers.
type logSummary struct {
	size    int64
	applied map[string]serve.Applied
}

func (s *logSummary) add(r Record) {
	a := s.applied[r.Pipeline]
	if a.Streams == nil {
		a.Streams = map[string]uint64{}
	}
	a.Sequence = max(a.Sequence, r.Sequence)
	for _, row := range r.Rows {
		a.Streams[row.Stream] = max(a.Streams[row.Stream], r.Sequence)
	}
	s.applied[r.Pipeline] = a
}

// summary returns the cached summary of the log at path, re-reading the file if its size changed. Callers
// hold d.mu.
func (d *Destination) summary(path string) (*logSummary, error) {
	if d.logs == nil {
		d.logs = map[string]*logSummary{}
	}
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		fi, err = nil, nil
	}
	if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.ENOTDIR) {
		return nil, dirErr(filepath.Dir(path), err)
	}
	if err != nil {
		return nil, err
	}
	if s, ok := d.logs[path]; ok && fi != nil && fi.Size() == s.size {
		return s, nil
	}
	recs, good, err := readLog(path)
	if err != nil {
		return nil, err
	}
	s := &logSummary{size: good, applied: map[string]serve.Applied{}}
	for _, r := range recs {
		s.add(r)
	}
	d.logs[path] = s
	return s, nil
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
		return serve.Capabilities{Deletes: true, Truncate: !s.NoTruncate, Coalesce: !s.NoCoalesce, Resnapshot: !s.NoResnapshot, ApplyDefaults: proposal, ExactlyOnceNote: "at_least_once is set: the destination does not record applied sequence numbers"}, nil
	}
	return serve.Capabilities{ExactlyOnce: true, Deletes: true, SchemaEvolution: true, Truncate: !s.NoTruncate, Coalesce: !s.NoCoalesce, Resnapshot: !s.NoResnapshot, ApplyDefaults: proposal}, nil
}

// Open parses the settings; the session shares the destination's lock and log summaries with the other
// sessions, as two settings may name one directory.
func (d *Destination) Open(_ context.Context, raw json.RawMessage) (serve.Session, error) {
	s, err := parse(raw)
	if err != nil {
		return nil, err
	}
	return &session{d: d, s: s, path: filepath.Join(s.Dir, logName)}, nil
}

// session is the destination open for one settings value.
type session struct {
	d    *Destination
	s    Settings
	path string
}

func (x *session) Close() error { return nil }

func (x *session) LastApplied(_ context.Context, pipeline string) (serve.Applied, error) {
	x.d.mu.Lock()
	defer x.d.mu.Unlock()
	sum, err := x.d.summary(x.path)
	if err != nil {
		return serve.Applied{}, err
	}
	a := sum.applied[pipeline]
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
	sum, err := x.d.summary(x.path)
	if err != nil {
		return serve.ApplyResult{}, err
	}
	good := sum.size
	var fence uint64
	if !s.AtLeastOnce {
		fence = sum.applied[r.Pipeline].Sequence
	}
	if r.Covers(fence) {
		return serve.ApplyResult{Skipped: true}, nil
	}
	rec := Record{Pipeline: r.Pipeline, Sequence: r.Sequence, Rows: []Row{}}
	// A replay of part of a range it holds: only the entries after the fence are new.
	if first := max(r.FirstSequence, fence+1); first < r.Sequence {
		rec.First = first
	}
	rows := int64(0)
	for st, err := range r.Entries(fence) {
		if err != nil {
			return serve.ApplyResult{}, err
		}
		it := st.Item
		switch {
		case st.End:
		case it.Schema != nil:
			rec.Schemas = append(rec.Schemas, it.Stream)
		case it.Truncate:
			rec.Rows = append(rec.Rows, Row{Stream: it.Stream, Truncate: true})
		case it.Resnapshot == serve.ResnapshotBegin:
			rec.Rows = append(rec.Rows, Row{Stream: it.Stream, Resnapshot: "begin"})
		case it.Resnapshot == serve.ResnapshotEnd:
			if s.NoResnapshot {
				return serve.ApplyResult{}, fault.ConfigErr(fmt.Errorf("apply %d: resnapshot mark of %s, but no_resnapshot is set", r.Sequence, it.Stream), "unset no_resnapshot")
			}
			rec.Rows = append(rec.Rows, Row{Stream: it.Stream, Resnapshot: "end"})
		default:
			recRows, err := ToRows(it.Stream, it.Record)
			if err != nil {
				return serve.ApplyResult{}, err
			}
			rec.Rows = append(rec.Rows, recRows...)
			rows += int64(len(recRows))
		}
	}
	payload, err := json.Marshal(rec)
	if err != nil {
		return serve.ApplyResult{}, err
	}
	f, err := os.OpenFile(x.path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return serve.ApplyResult{}, err
	}
	defer f.Close()
	// Cut a torn tail left by a crash before appending after it.
	if err := f.Truncate(good); err != nil {
		return serve.ApplyResult{}, err
	}
	var hdr [8]byte
	binary.LittleEndian.PutUint32(hdr[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(hdr[4:], crc32.Checksum(payload, castagnoli))
	if _, err := f.WriteAt(append(hdr[:], payload...), good); err != nil {
		return serve.ApplyResult{}, fmt.Errorf("append apply %d: %w", r.Sequence, err)
	}
	if err := f.Sync(); err != nil {
		return serve.ApplyResult{}, fmt.Errorf("sync apply %d: %w", r.Sequence, err)
	}
	sum.size = good + int64(len(hdr)+len(payload))
	sum.add(rec)
	return serve.ApplyResult{Rows: rows}, ctx.Err()
}

// ToRows converts a change batch to stored rows; tests use it to build the state they expect.
func ToRows(stream string, rec arrow.RecordBatch) ([]Row, error) {
	ops, err := change.Ops(rec)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	sc := rec.Schema()
	pk := change.PrimaryKey(sc)
	var pkIdx []int
	for _, k := range pk {
		idx := sc.FieldIndices(k)
		if len(idx) != 1 {
			return nil, fmt.Errorf("stream %s: primary key column %q not in schema", stream, k)
		}
		pkIdx = append(pkIdx, idx[0])
	}
	rows := make([]Row, 0, rec.NumRows())
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
		rows = append(rows, r)
	}
	return rows, nil
}

// readLog returns the intact records and the offset where they end.
func readLog(path string) ([]Record, int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	var (
		out []Record
		off int64
		hdr [8]byte
	)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return out, off, nil // end, or a torn header
		}
		n := binary.LittleEndian.Uint32(hdr[0:])
		payload := make([]byte, n)
		if _, err := io.ReadFull(br, payload); err != nil {
			return out, off, nil
		}
		if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(hdr[4:]) {
			return out, off, nil
		}
		var r Record
		if err := json.Unmarshal(payload, &r); err != nil {
			return nil, 0, fmt.Errorf("%s at offset %d: %w", path, off, err)
		}
		out = append(out, r)
		off += 8 + int64(n)
	}
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

// Load replays the log in dir into the table state a database would hold.
func Load(dir string) (State, error) {
	recs, _, err := readLog(filepath.Join(dir, logName))
	if err != nil {
		return State{}, err
	}
	st := State{Tables: map[string]map[string]map[string]any{}, Sequences: map[string][]uint64{}, Applies: map[string]int{}}
	f := folder{tables: st.Tables}
	for _, r := range recs {
		st.Applies[r.Pipeline]++
		for seq := max(r.First, 1); seq < r.Sequence && r.First != 0; seq++ {
			st.Sequences[r.Pipeline] = append(st.Sequences[r.Pipeline], seq)
		}
		st.Sequences[r.Pipeline] = append(st.Sequences[r.Pipeline], r.Sequence)
		for _, row := range r.Rows {
			if !row.Truncate && row.Resnapshot == "" {
				st.Rows++
			}
			f.add(row)
		}
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

package source

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jackc/pglogrepl"
)

// Phases of a position.
const (
	PhaseSnapshot = "snapshot"
	PhaseStream   = "stream"
)

// positionVersion changes when the format does; a position of another version is refused, not guessed at.
// Version 1 (one table copied at a time: tables before Table done, Table copied up to Key) is still read.
const positionVersion = 2

// Position is a checkpoint's content, as JSON (readable in `skippr status`).
//
// In the snapshot phase, LSN is the slot's consistent point (where streaming will start), Progress each
// started table's state (the text form of the last key copied, or done) and Table the table of the last
// chunk, where the round of tables resumes (snapshot.go). In the stream phase, LSN is the end of the last
// transaction delivered (or a position the server reported with nothing undelivered before it): streaming
// resumes there.
type Position struct {
	V        int                      `json:"v"`
	Phase    string                   `json:"phase"`
	Slot     string                   `json:"slot"`
	LSN      string                   `json:"lsn"`
	Tables   []string                 `json:"tables"`
	Table    string                   `json:"table,omitempty"`
	Progress map[string]TableProgress `json:"progress,omitempty"`
	// Key is version 1's last key of Table; DecodePosition moves it into Progress.
	Key []string `json:"key,omitempty"`
	// Rows counts the rows delivered so far: the snapshot's, then the stream's on top.
	Rows int64 `json:"rows,omitempty"`
	// Overlap is set when the snapshot was copied (or resumed) under a fresh snapshot rather than the slot's
	// exported one: a transaction committed before this LSN may already be in the copy, so streaming sends its
	// inserts as updates (upserts by key). An append-only destination (a lake) would otherwise hold such a row
	// twice: once from the copy, once from the stream. Dropped once streaming has passed it.
	Overlap string `json:"overlap,omitempty"`
	// Resnapshot holds the tables being copied again while streaming (resnapshot.go), by stream name.
	Resnapshot map[string]ResnapshotProgress `json:"resnapshot,omitempty"`
	// Copied holds, by stream name, the tables in mode: append whose copy was taken under a snapshot of its own
	// (exact.go) rather than the slot's: the LSN of that snapshot's consistent point. The copy holds every
	// transaction committed before it, so streaming drops the table's changes of those transactions and keeps
	// the later ones. An entry goes once streaming has passed its LSN.
	Copied map[string]string `json:"copied,omitempty"`
	// Recopy holds the tables in mode: append to be copied while streaming (added to the tables, or asked to be
	// re-snapshotted), by stream name; exact.go.
	Recopy map[string]RecopyProgress `json:"recopy,omitempty"`
	// Columns holds, by stream name, each table's columns at the last Relation message streamed: the first
	// Relation message of a restarted Read is compared with them (renamedColumns), so a RENAME COLUMN made while
	// no Read ran is still carried as a rename. Absent in checkpoints of earlier versions.
	Columns map[string][]RelationColumn `json:"columns,omitempty"`
	// OIDs holds, by stream name, each captured table's oid: a table the checkpoint names that the catalog has
	// under another name at a restart was renamed while no Read ran, and is followed as a rename (rename.go).
	// Absent in checkpoints of earlier versions.
	OIDs map[string]uint32 `json:"oids,omitempty"`
}

// RelationColumn is one column of a Relation message as a checkpoint keeps it.
type RelationColumn struct {
	Name    string `json:"n"`
	TypeOID uint32 `json:"t"`
	Attnum  int16  `json:"a,omitempty"`
}

// RecopyProgress is a table in mode: append being copied while streaming.
type RecopyProgress struct {
	Rows int64 `json:"rows,omitempty"` // rows of the copy in progress
	// Truncate: the destinations may hold rows of the table that the copy carries again (a re-snapshot, or a copy
	// interrupted by a crash), so the copy starts with a truncate.
	Truncate bool `json:"truncate,omitempty"`
}

// TableProgress is how far the snapshot copied one table.
type TableProgress struct {
	Key  []string `json:"key,omitempty"`
	Done bool     `json:"done,omitempty"`
	Rows int64    `json:"rows,omitempty"` // rows copied of this table (of this copy, when version 1 started it)
}

// copiedAll says every table of a snapshot-phase position is copied: what is left of the snapshot is its closing
// checkpoint, which may never have become durable (the engine commits a checkpoint with the rows it covers, and
// the closing one covers none).
func (p Position) copiedAll() bool {
	for _, name := range p.Tables {
		if !p.Progress[name].Done {
			return false
		}
	}
	return true
}

// streamPhase is the position at which streaming follows a finished snapshot: the slot's start, with what the
// copy left for the stream to honour (Overlap, Copied) and the copies still due (Resnapshot, Recopy).
func (p Position) streamPhase() Position {
	return Position{V: positionVersion, Phase: PhaseStream, Slot: p.Slot, LSN: p.LSN, Tables: p.Tables, Overlap: p.Overlap, Rows: p.Rows, Resnapshot: p.Resnapshot, Copied: p.Copied, Recopy: p.Recopy, OIDs: p.OIDs}
}

// OverlapValue is the Overlap LSN, parsed (0 when there is none).
func (p Position) OverlapValue() pglogrepl.LSN {
	l, _ := pglogrepl.ParseLSN(p.Overlap)
	return l
}

// Encode is the checkpoint bytes: deterministic, so a replayed read reaches byte-identical checkpoints.
func (p Position) Encode() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err) // a struct of strings and ints always marshals
	}
	return b
}

// LSNValue is the position's LSN, parsed.
func (p Position) LSNValue() pglogrepl.LSN {
	l, _ := pglogrepl.ParseLSN(p.LSN)
	return l
}

// DecodePosition parses checkpoint bytes; nil for an empty checkpoint (read from the beginning).
func DecodePosition(b []byte) (*Position, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var p Position
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("checkpoint %q is not a postgres source position: %w", b, err)
	}
	if p.V != positionVersion && p.V != 1 {
		return nil, fmt.Errorf("checkpoint %q has format version %d, this plugin reads versions 1 and %d", b, p.V, positionVersion)
	}
	if p.Phase != PhaseSnapshot && p.Phase != PhaseStream {
		return nil, fmt.Errorf("checkpoint %q: unknown phase %q", b, p.Phase)
	}
	if _, err := pglogrepl.ParseLSN(p.LSN); err != nil {
		return nil, fmt.Errorf("checkpoint %q: bad lsn %q: %w", b, p.LSN, err)
	}
	if p.Overlap != "" {
		if _, err := pglogrepl.ParseLSN(p.Overlap); err != nil {
			return nil, fmt.Errorf("checkpoint %q: bad overlap lsn %q: %w", b, p.Overlap, err)
		}
	}
	for t, l := range p.Copied {
		if !slices.Contains(p.Tables, t) {
			return nil, fmt.Errorf("checkpoint %q: copy of table %q, which is not among its tables", b, t)
		}
		if _, err := pglogrepl.ParseLSN(l); err != nil {
			return nil, fmt.Errorf("checkpoint %q: bad copy lsn %q of table %q: %w", b, l, t, err)
		}
	}
	for t := range p.Recopy {
		if !slices.Contains(p.Tables, t) {
			return nil, fmt.Errorf("checkpoint %q: copy of table %q, which is not among its tables", b, t)
		}
	}
	for t := range p.Resnapshot {
		if !slices.Contains(p.Tables, t) {
			return nil, fmt.Errorf("checkpoint %q: re-snapshot of table %q, which is not among its tables", b, t)
		}
	}
	if p.Phase != PhaseSnapshot {
		return &p, nil
	}
	if p.Table != "" && !slices.Contains(p.Tables, p.Table) {
		return nil, fmt.Errorf("checkpoint %q: table %q is not among its tables", b, p.Table)
	}
	if p.V == 1 {
		// One table at a time: the ones before Table are done, Table is copied up to Key.
		i := slices.Index(p.Tables, p.Table)
		if i < 0 {
			return nil, fmt.Errorf("checkpoint %q: no table being copied", b)
		}
		p.Progress = map[string]TableProgress{}
		for _, t := range p.Tables[:i] {
			p.Progress[t] = TableProgress{Done: true}
		}
		if p.Key != nil {
			p.Progress[p.Table] = TableProgress{Key: p.Key}
		}
		p.V, p.Key = positionVersion, nil
	}
	for t := range p.Progress {
		if !slices.Contains(p.Tables, t) {
			return nil, fmt.Errorf("checkpoint %q: progress of table %q, which is not among its tables", b, t)
		}
	}
	return &p, nil
}

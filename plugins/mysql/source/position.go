package source

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Phases of a position.
const (
	PhaseSnapshot = "snapshot"
	PhaseStream   = "stream"
)

// positionVersion changes when the format does; a position of another version is refused, not guessed at.
const positionVersion = 1

// Position is a checkpoint's content, as JSON (readable in `skippr status`).
//
// File and Pos are a binary log coordinate, GTID the server's GTID position at that coordinate (MariaDB
// "domain-server-seq,..." or MySQL "uuid:1-5,..."; empty when the server has none). In the snapshot phase
// they are the snapshot's own position, where streaming will start; Progress is each started table's state
// and Table the table of the last chunk. In the stream phase they are the end of the last transaction
// delivered: streaming resumes after it.
type Position struct {
	V        int                      `json:"v"`
	Phase    string                   `json:"phase"`
	Flavor   string                   `json:"flavor"` // "mariadb" or "mysql"
	File     string                   `json:"file"`
	Pos      uint64                   `json:"pos"`
	GTID     string                   `json:"gtid,omitempty"`
	Tables   []string                 `json:"tables"`
	Table    string                   `json:"table,omitempty"`
	Progress map[string]TableProgress `json:"progress,omitempty"`
	Rows     int64                    `json:"rows,omitempty"`
	// OverlapFile/OverlapPos are set when a snapshot was resumed under a fresh snapshot (the first one did not
	// survive the crash): a transaction committed before this coordinate may already be in the copy, so
	// streaming sends its inserts as updates (upserts by key), and an append-only destination does not hold
	// such a row twice. Dropped once streaming has passed it.
	OverlapFile string `json:"overlap_file,omitempty"`
	OverlapPos  uint64 `json:"overlap_pos,omitempty"`
	// Schemas are the captured tables' definitions at File/Pos (schema.go): a restart decodes what follows
	// with them, not with the server's newest ones. Absent in checkpoints of earlier versions: then the
	// server's catalog at the restart is taken.
	Schemas map[string]TableDef `json:"schemas,omitempty"`
	// Shadows are the definitions of online schema change tools' shadow tables at File/Pos (cutover.go): a
	// cut-over after a restart still knows the columns the captured table gets. Stream phase only.
	Shadows map[string]TableDef `json:"shadows,omitempty"`
	// Resnapshot holds the tables being copied again while streaming (resnapshot.go), by stream name; a
	// request that arrives during the snapshot phase waits here for the stream phase.
	Resnapshot map[string]ResnapshotProgress `json:"resnapshot,omitempty"`
	// Patterns are the patterns of tables that Tables was expanded with (patterns.go): a pattern added to the
	// settings since is expanded against the catalog at the restart, the others follow the binary log.
	Patterns []string `json:"patterns,omitempty"`
	// Copied are the copy points of full_row tables (fullrow.go), by table name: streaming drops such a table's
	// changes up to its point, which its copy holds. Stream phase only; dropped once streaming has passed it.
	Copied map[string]Coord `json:"copied,omitempty"`
}

// TableProgress is how far the snapshot copied one table.
type TableProgress struct {
	// Key is the last key copied, one text form per key column (binary key columns hex-encoded).
	Key  []string `json:"key,omitempty"`
	Done bool     `json:"done,omitempty"`
	Rows int64    `json:"rows,omitempty"`
	// From is the binlog coordinate of the snapshot a full_row table is copied under (fullrow.go).
	From *Coord `json:"from,omitempty"`
}

// copiedAll says every table of a snapshot-phase position is copied: what is left of the snapshot is its closing
// checkpoint, which may never have become durable (the engine commits a checkpoint with the rows it covers, and
// the closing one covers none).
func (p *Position) copiedAll() bool {
	for _, name := range p.Tables {
		if !p.Progress[name].Done {
			return false
		}
	}
	return true
}

// streamPhase is the position at which streaming follows a finished snapshot.
func (p *Position) streamPhase() *Position {
	return &Position{V: positionVersion, Phase: PhaseStream, Flavor: p.Flavor, File: p.File, Pos: p.Pos, GTID: p.GTID,
		Tables: p.Tables, OverlapFile: p.OverlapFile, OverlapPos: p.OverlapPos, Schemas: p.Schemas, Shadows: p.Shadows, Resnapshot: p.Resnapshot, Patterns: p.Patterns, Copied: p.copied()}
}

// Encode is the checkpoint bytes: deterministic, so a replayed read reaches byte-identical checkpoints.
func (p Position) Encode() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err) // a struct of strings and ints always marshals
	}
	return b
}

// before reports whether binlog coordinate (file, pos) comes before (of, op). Binlog file names share a base
// and differ in a zero-padded sequence number, so they order as strings.
func before(file string, pos uint64, of string, op uint64) bool {
	if file != of {
		return strings.Compare(file, of) < 0
	}
	return pos < op
}

// DecodePosition parses checkpoint bytes; nil for an empty checkpoint (read from the beginning).
func DecodePosition(b []byte) (*Position, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var p Position
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("checkpoint %q is not a mysql source position: %w", b, err)
	}
	if p.V != positionVersion {
		return nil, fmt.Errorf("checkpoint %q has format version %d, this plugin reads version %d", b, p.V, positionVersion)
	}
	if p.Phase != PhaseSnapshot && p.Phase != PhaseStream {
		return nil, fmt.Errorf("checkpoint %q: unknown phase %q", b, p.Phase)
	}
	if p.File == "" {
		return nil, fmt.Errorf("checkpoint %q: no binlog file", b)
	}
	if p.Flavor != flavorMariaDB && p.Flavor != flavorMySQL {
		return nil, fmt.Errorf("checkpoint %q: unknown flavor %q", b, p.Flavor)
	}
	if p.Table != "" && !slices.Contains(p.Tables, p.Table) {
		return nil, fmt.Errorf("checkpoint %q: table %q is not among its tables", b, p.Table)
	}
	for t := range p.Schemas {
		if !slices.Contains(p.Tables, t) {
			return nil, fmt.Errorf("checkpoint %q: schema of table %q, which is not among its tables", b, t)
		}
	}
	for t := range p.Progress {
		if !slices.Contains(p.Tables, t) {
			return nil, fmt.Errorf("checkpoint %q: progress of table %q, which is not among its tables", b, t)
		}
	}
	return &p, nil
}

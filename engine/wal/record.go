package wal

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// CommitRecord is one committed WAL entry. Segment is the object name relative
// to the log root ("segments/…"); it is empty only for a fence entry, which
// Acquire writes after taking over an expired lease and which carries no frames.
type CommitRecord struct {
	Seq        uint64            `json:"seq"`
	Segment    string            `json:"segment"`
	CRC32C     uint32            `json:"crc32c"`
	Size       int64             `json:"size"`
	Rows       map[string]int64  `json:"rows,omitempty"`
	SchemaIDs  map[string]string `json:"schema_ids,omitempty"`
	Checkpoint []byte            `json:"checkpoint,omitempty"`
	Epoch      uint64            `json:"epoch"`
	Time       time.Time         `json:"time"`
}

// checkpointRecord survives Reclaim: the last reclaimed seq and its source checkpoint.
type checkpointRecord struct {
	Seq        uint64    `json:"seq"`
	Checkpoint []byte    `json:"checkpoint,omitempty"`
	Epoch      uint64    `json:"epoch"`
	Time       time.Time `json:"time"`
}

// envelope wraps every JSON record so it carries the CRC-32C of its own exact bytes.
type envelope struct {
	Kind   string          `json:"kind"`
	CRC32C uint32          `json:"crc32c"`
	Body   json.RawMessage `json:"body"`
}

const (
	kindCommit     = "commit"
	kindCheckpoint = "checkpoint"
	kindLease      = "lease"
	kindEpoch      = "epoch"
)

func sealRecord(kind string, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s record: %w", kind, err)
	}
	b, err := json.Marshal(envelope{Kind: kind, CRC32C: crc32c(body), Body: body})
	if err != nil {
		return nil, fmt.Errorf("encode %s record: %w", kind, err)
	}
	return append(b, '\n'), nil
}

// openRecord verifies the envelope's kind and CRC, then decodes the body into v.
// Errors wrap ErrCorrupt.
func openRecord(kind string, b []byte, v any) error {
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return corrupt(fmt.Sprintf("not a record envelope: %v", err))
	}
	if e.Kind != kind {
		return corrupt(fmt.Sprintf("record kind %q, want %q", e.Kind, kind))
	}
	if got := crc32c(e.Body); got != e.CRC32C {
		return corrupt(fmt.Sprintf("record crc mismatch: want %d got %d", e.CRC32C, got))
	}
	if err := json.Unmarshal(e.Body, v); err != nil {
		return corrupt(fmt.Sprintf("record body: %v", err))
	}
	return nil
}

// Object names. Sequence numbers and epochs are 20-digit zero-padded decimals
// (the width of the largest uint64), so lexical order equals numeric order.
const (
	segmentsDir    = "segments"
	commitsDir     = "commits"
	checkpointsDir = "checkpoints"
	segmentExt     = ".seg"
	recordExt      = ".json"
	leaseName      = "lease.json"
	lockName       = "LOCK"
	epochName      = "EPOCH"
	reserveName    = "RESERVE" // local only: space set aside for Reclaim (localStore.reserve)
)

func pad(n uint64) string { return fmt.Sprintf("%020d", n) }

func segmentName(seq, epoch uint64) string {
	return segmentsDir + "/" + pad(seq) + "-" + pad(epoch) + segmentExt
}

func commitName(seq uint64) string     { return commitsDir + "/" + pad(seq) + recordExt }
func checkpointName(seq uint64) string { return checkpointsDir + "/" + pad(seq) + recordExt }

func parseNum(s string) (uint64, bool) {
	if len(s) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// parseSegmentName accepts "segments/<seq>-<epoch>.seg" only.
func parseSegmentName(name string) (seq, epoch uint64, ok bool) {
	base, found := strings.CutPrefix(name, segmentsDir+"/")
	if !found {
		return 0, 0, false
	}
	base, found = strings.CutSuffix(base, segmentExt)
	if !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(base, "-")
	if !found {
		return 0, 0, false
	}
	seq, ok1 := parseNum(a)
	epoch, ok2 := parseNum(b)
	return seq, epoch, ok1 && ok2
}

// parseSeqName accepts "<dir>/<seq>.json" only.
func parseSeqName(dir, name string) (uint64, bool) {
	base, found := strings.CutPrefix(name, dir+"/")
	if !found {
		return 0, false
	}
	base, found = strings.CutSuffix(base, recordExt)
	if !found {
		return 0, false
	}
	return parseNum(base)
}

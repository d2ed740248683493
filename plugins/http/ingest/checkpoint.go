package ingest

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// checkpoint is the source position the engine stores with each WAL entry and hands back to Read after a
// restart. Seq counts the requests whose data was emitted (it only grows, also across Reads of one process,
// and a Read from a checkpoint continues above its Seq). Schemas holds, per stream, the Arrow IPC schema its
// data has evolved to by this point, for every stream whose schema differs from the one the settings give:
// the WAL already holds those schemas, so a restarted plugin keeps widening from them instead of starting
// over (which could narrow a column a destination has already widened).
type checkpoint struct {
	Seq     uint64            `json:"seq"`
	Schemas map[string][]byte `json:"schemas,omitempty"`
}

func (c checkpoint) encode() []byte {
	b, err := json.Marshal(c)
	if err != nil {
		// A struct of a number and byte slices always marshals.
		panic(fmt.Sprintf("encode checkpoint: %v", err))
	}
	return b
}

func parseCheckpoint(b []byte) (checkpoint, error) {
	var c checkpoint
	if len(b) == 0 {
		return c, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("checkpoint %.80q is not an http source checkpoint: %w", b, err)
	}
	return c, nil
}

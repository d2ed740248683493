package protect

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// Stream returns st as it is downstream (its schema through Schema). Sources call it in Discover.
func (s *Set) Stream(st serve.Stream) serve.Stream {
	st.Schema = s.Schema(st.Name, st.Schema)
	return st
}

// Emitter wraps a source's emitter: schema changes and batches leave through Stream and Record, and
// checkpoints carry the fingerprint of each of streams' rules (see Resume). It is the one place a source's
// output passes through, so a source wraps the emitter Read was given and uses only the result. Checkpoints are
// left as they are when s is nil and the pipeline never had rules, so a pipeline without rules keeps its
// checkpoint format.
func (s *Set) Emitter(out serve.Emitter, mem memory.Allocator, streams []string, wrapped bool) serve.Emitter {
	if s == nil && !wrapped {
		return out
	}
	fps := map[string]string{}
	for _, n := range streams {
		fps[n] = s.fingerprint(n)
	}
	return &emitter{Emitter: out, set: s, mem: mem, fps: fps}
}

func (s *Set) fingerprint(stream string) string {
	if r := s.rule(stream); r != nil {
		return r.fp
	}
	return ""
}

type emitter struct {
	serve.Emitter
	set *Set
	mem memory.Allocator
	fps map[string]string
}

func (e *emitter) SchemaChange(ctx context.Context, st serve.Stream) error {
	return e.Emitter.SchemaChange(ctx, e.set.Stream(st))
}

func (e *emitter) Batch(ctx context.Context, stream string, rec arrow.RecordBatch) error {
	out, err := e.set.Record(e.mem, stream, rec)
	if err != nil {
		return err
	}
	defer out.Release()
	return e.Emitter.Batch(ctx, stream, out)
}

func (e *emitter) Checkpoint(ctx context.Context, cp serve.Checkpoint) error {
	b, err := wrap(e.fps, cp.Position)
	if err != nil {
		return err
	}
	cp.Position = b
	return e.Emitter.Checkpoint(ctx, cp)
}

// envelope is a checkpoint of a pipeline with rules: the fingerprint of every stream's rules ("" for a stream
// without any) around the source's own position. The prefix tells it from a source position, which never
// starts with it.
type envelope struct {
	Protect  map[string]string `json:"skippr_protect"`
	Position json.RawMessage   `json:"position"`
}

var envelopePrefix = []byte(`{"skippr_protect":`)

func wrap(fps map[string]string, pos []byte) ([]byte, error) {
	inner := pos
	if !json.Valid(pos) {
		// A position that is not JSON travels as a JSON string of its bytes.
		q, err := json.Marshal(string(pos))
		if err != nil {
			return nil, err
		}
		inner = q
	}
	return json.Marshal(envelope{Protect: fps, Position: inner})
}

// Unwrap returns the source's own position inside a checkpoint, and the rules' fingerprints it recorded
// (nil: a checkpoint from before the pipeline had rules). Sources call it on every checkpoint they are given
// (Read, Ack).
func Unwrap(checkpoint []byte) (pos []byte, fps map[string]string, err error) {
	if !bytes.HasPrefix(checkpoint, envelopePrefix) {
		return checkpoint, nil, nil
	}
	var e envelope
	if err := json.Unmarshal(checkpoint, &e); err != nil {
		return nil, nil, fmt.Errorf("checkpoint with protected columns is damaged: %w", err)
	}
	if e.Protect == nil {
		e.Protect = map[string]string{}
	}
	if len(e.Position) > 0 && e.Position[0] == '"' {
		var s string
		if err := json.Unmarshal(e.Position, &s); err != nil {
			return nil, nil, fmt.Errorf("checkpoint with protected columns is damaged: %w", err)
		}
		return []byte(s), e.Protect, nil
	}
	return e.Position, e.Protect, nil
}

// Changed returns, sorted, the streams whose rules differ from those the checkpoint recorded, and whether the
// checkpoint was wrapped (Emitter's last argument); known is as for Resume. A source that cannot copy a stream
// again (a push source: what was posted is gone) decides itself what a change means, where Resume would refuse
// with a re-snapshot as the fix.
func (s *Set) Changed(checkpoint []byte, known []string) (changed []string, wrapped bool, err error) {
	_, fps, err := Unwrap(checkpoint)
	if err != nil || len(checkpoint) == 0 {
		return nil, false, err
	}
	wrapped = fps != nil
	if !wrapped {
		// A pipeline that ran without rules: every stream it had was unprotected.
		fps = map[string]string{}
		for _, n := range known {
			fps[n] = ""
		}
	}
	for n, fp := range fps {
		if fp != s.fingerprint(n) {
			changed = append(changed, n)
		}
	}
	sort.Strings(changed)
	return changed, wrapped, nil
}

// Resume checks the rules against those a checkpoint recorded, and says whether the checkpoint was wrapped
// (Emitter's last argument). known is the streams the source's own position covers (what the pipeline carried
// before it had rules, when the checkpoint is not wrapped). A stream whose rules changed is refused with a config
// fault naming it and the fix, unless resnapshot names it (a copy the source starts now, not one it resumes):
// the copy made with the new rules replaces what the old ones wrote, and the log says the new rules apply from
// it. A stream the checkpoint does not know is new to the pipeline and takes the rules as they are.
func (s *Set) Resume(checkpoint []byte, known, resnapshot []string, log *slog.Logger) (wrapped bool, err error) {
	differ, wrapped, err := s.Changed(checkpoint, known)
	if err != nil {
		return false, err
	}
	var changed []string
	for _, n := range differ {
		if slices.Contains(resnapshot, n) {
			log.Warn("exclude_columns/hash_columns/where changed: the new rules apply from this re-snapshot of the table on; rows the destination has from before are replaced by the copy", "table", n)
			continue
		}
		changed = append(changed, n)
	}
	if len(changed) > 0 {
		return false, fault.ConfigErr(fmt.Errorf("exclude_columns, hash_columns or where of table %s changed since the pipeline last ran: rows already sent were protected or chosen by the old rules, and mixing both in one destination table would be wrong", strings.Join(changed, ", ")),
			fmt.Sprintf("put the old rules back, or re-snapshot the table so it is copied again under the new ones: skippr resnapshot PIPELINE %s", strings.Join(changed, " ")))
	}
	return wrapped, nil
}

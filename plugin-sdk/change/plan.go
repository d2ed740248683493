package change

import (
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// Plan is one stream's changes of an apply, or of one WAL entry of a range, as a destination writes them: its
// batches, retained and folded per key (Fold), and the schemas they came in. A destination writes
// Fold.Last()'s rows, Batches[l.Batch] row l.Row, after bringing the table up to every schema in Schemas.
type Plan struct {
	Stream string
	Fold   *Fold
	// Schemas in order of appearance, each once (equal fields and metadata): the batches' schemas and those
	// of schema items (AddSchema).
	Schemas []*arrow.Schema
	// Batches are Fold's batches by number, retained until Release.
	Batches []arrow.RecordBatch
	// Keyed says, per batch, whether its schema declares a key (a stream without one appends every row).
	Keyed []bool
}

// NewPlan starts an empty plan of stream.
func NewPlan(stream string, opt FoldOptions) *Plan {
	return &Plan{Stream: stream, Fold: NewFold(opt)}
}

// AddSchema records s unless the plan holds the same schema already. When s renames columns
// (RenamedFromMeta), the schemas and batches before it are relabeled to the new names (RelabelRenamed), so
// the rows written before the rename land in the renamed column, which by then has no other name.
func (p *Plan) AddSchema(s *arrow.Schema) {
	for _, x := range p.Schemas {
		if SameSchema(x, s) {
			return
		}
	}
	p.FollowRenames(s)
	p.Schemas = append(p.Schemas, s)
}

// FollowRenames relabels what the plan holds to the names s, a schema that comes after it, gives renamed
// columns. AddSchema calls it; a destination that writes a plan out before it adds s (to write the rows
// before a schema change first) calls it before that write, so the rows go into the renamed column.
func (p *Plan) FollowRenames(s *arrow.Schema) {
	if !slices.ContainsFunc(s.Fields(), func(f arrow.Field) bool { return RenamedFrom(f) != "" }) {
		return
	}
	done := map[*arrow.Schema]*arrow.Schema{}
	relabel := func(x *arrow.Schema) *arrow.Schema {
		if y, ok := done[x]; ok {
			return y
		}
		y := RelabelRenamed(x, s)
		done[x] = y
		return y
	}
	for i, x := range p.Schemas {
		p.Schemas[i] = relabel(x)
	}
	for i, rec := range p.Batches {
		y := relabel(rec.Schema())
		if y == rec.Schema() {
			continue
		}
		p.Batches[i] = array.NewRecordBatch(y, rec.Columns(), rec.NumRows())
		rec.Release()
	}
}

// SameSchema: x and y have equal fields and equal metadata (the key, the source's types), so one table shape
// and one statement serve both. (The text holds the metadata, which Equal does not compare; protocol.SchemaID
// is a hash of the same text.)
func SameSchema(x, y *arrow.Schema) bool {
	return x == y || (x.Equal(y) && x.String() == y.String())
}

// Add folds rec into the plan (the last change of a key wins; see Fold.Add for the errors) and retains it: a
// streamed item's batch is released by the SDK once the next item is asked for.
func (p *Plan) Add(rec arrow.RecordBatch) error {
	ops, err := OpValues(rec)
	if err != nil {
		return err
	}
	key, err := KeyOf(rec)
	if err != nil {
		return err
	}
	if FullRow(rec.Schema()) {
		if key.Len() > 0 {
			return fault.DataErr(fmt.Errorf("the batch is matched by full row (%s %s) but declares a primary key", MatchMeta, MatchFullRow),
				"the source must send a stream matched by full row without "+PrimaryKeyMeta)
		}
		err = p.Fold.AddFullRow(ImageOf(rec), ops)
	} else {
		err = p.Fold.Add(key, ops)
	}
	if err != nil {
		return err
	}
	p.AddSchema(rec.Schema())
	rec.Retain()
	p.Batches = append(p.Batches, rec)
	p.Keyed = append(p.Keyed, key.Len() > 0)
	return nil
}

// Release gives back the batches the plan retained.
func (p *Plan) Release() {
	for _, rec := range p.Batches {
		rec.Release()
	}
	p.Batches = nil
}

// Plans are the plans of an apply (or of one entry), one per stream, in the order the streams first appear,
// so that what a destination writes, and in which order, is deterministic.
type Plans struct {
	opt    FoldOptions
	list   []*Plan
	byName map[string]*Plan
}

// NewPlans starts an empty set whose plans fold with opt.
func NewPlans(opt FoldOptions) *Plans {
	return &Plans{opt: opt, byName: map[string]*Plan{}}
}

// Get returns stream's plan, started empty on first use.
func (ps *Plans) Get(stream string) *Plan {
	p := ps.byName[stream]
	if p == nil {
		p = NewPlan(stream, ps.opt)
		ps.byName[stream] = p
		ps.list = append(ps.list, p)
	}
	return p
}

// Lookup returns stream's plan, or nil when it has none.
func (ps *Plans) Lookup(stream string) *Plan { return ps.byName[stream] }

// List is the plans in the order their streams first appeared.
func (ps *Plans) List() []*Plan { return ps.list }

// Release gives back every plan's batches and forgets the plans: the next Get starts afresh (the next entry).
func (ps *Plans) Release() {
	for _, p := range ps.list {
		p.Release()
	}
	ps.list, ps.byName = nil, map[string]*Plan{}
}

package dest

import (
	"slices"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// laterRenames relabels a schema of the items to the names the schemas of later items give the columns they
// rename (change.RelabelRenamed): rows of a batch before a rename are written into the renamed column, and an
// old schema met again by a replay adds back no column the rename took away.
type laterRenames struct {
	marks []renameMark // the items' schemas that rename a column, in item order, consecutive repeats once
	done  map[relabelKey]*arrow.Schema
}

type renameMark struct {
	item   int
	schema *arrow.Schema
}

type relabelKey struct {
	s    *arrow.Schema
	from int // the first mark applied
}

func newLaterRenames(items []serve.Item) *laterRenames {
	lr := &laterRenames{done: map[relabelKey]*arrow.Schema{}}
	for i, it := range items {
		var s *arrow.Schema
		switch {
		case it.Resnapshot != serve.ResnapshotNone:
			continue
		case it.Schema != nil:
			s = it.Schema.Schema
		case it.Record != nil:
			s = it.Record.Schema()
		}
		if s == nil || !slices.ContainsFunc(s.Fields(), func(f arrow.Field) bool { return change.RenamedFrom(f) != "" }) {
			continue
		}
		if n := len(lr.marks); n > 0 && change.SameSchema(lr.marks[n-1].schema, s) {
			continue
		}
		lr.marks = append(lr.marks, renameMark{item: i, schema: s})
	}
	return lr
}

// of is s, the schema of item i, relabeled by every renaming schema after it.
func (lr *laterRenames) of(i int, s *arrow.Schema) *arrow.Schema {
	from := slices.IndexFunc(lr.marks, func(m renameMark) bool { return m.item > i })
	if from < 0 {
		return s
	}
	k := relabelKey{s, from}
	if r, ok := lr.done[k]; ok {
		return r
	}
	r := s
	for _, m := range lr.marks[from:] {
		r = change.RelabelRenamed(r, m.schema)
	}
	lr.done[k] = r
	return r
}

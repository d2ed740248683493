package change

import (
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// RenamedFromMeta is field metadata: the column's name before a RENAME COLUMN at the source. A source sets it
// (MarkRenamed) on the field of every schema it announces after the rename; a destination that still has a
// column by the former name and none by the new one renames that column instead of adding a new one, so the
// rows written before the rename keep their values under the new name.
//
// The marker says what happened, not what to do: the destination decides from its own current columns
// (Renames), which makes it safe to apply twice. A range replayed after a crash finds the column already
// renamed and does nothing; a later schema that still carries the marker does nothing either; a table created
// from such a schema simply gets the new name.
const RenamedFromMeta = "skippr.renamed_from"

// MarkRenamed returns f with its former name recorded (RenamedFromMeta), other metadata kept. Several renames
// in a row keep the first name the destination knew: pass the marker of the field being renamed, if any.
func MarkRenamed(f arrow.Field, from string) arrow.Field {
	if from == "" || from == f.Name {
		return f
	}
	keys, vals := []string{}, []string{}
	for i, k := range f.Metadata.Keys() {
		if k != RenamedFromMeta {
			keys, vals = append(keys, k), append(vals, f.Metadata.Values()[i])
		}
	}
	f.Metadata = arrow.NewMetadata(append(keys, RenamedFromMeta), append(vals, from))
	return f
}

// RenamedFrom is the field's former name, "" when the source recorded none.
func RenamedFrom(f arrow.Field) string {
	v, _ := f.Metadata.GetValue(RenamedFromMeta)
	return v
}

// Rename is one column a destination renames: From is its current name there, To the stream's name for it.
type Rename struct {
	From, To string
}

// Renames lists the renames a destination applies before it adds missing columns, given the data fields of an
// incoming schema and has, which says whether the destination's table has a column by that name (matching
// names as the destination does: case-insensitively where it folds case). A field is renamed when the table
// has its former name and not its new one (a schema may also hold a new column under the former name: RENAME
// COLUMN a TO b, ADD COLUMN a; the rename comes first, then the add). A former name claimed by two fields is
// left alone (the new columns are added, as without the marker) rather than guessed at.
func Renames(fields []arrow.Field, has func(name string) bool) []Rename {
	claims := map[string]int{}
	for _, f := range fields {
		if from := RenamedFrom(f); from != "" {
			claims[strings.ToLower(from)]++
		}
	}
	var out []Rename
	for _, f := range fields {
		from := RenamedFrom(f)
		if from == "" || claims[strings.ToLower(from)] != 1 || has(f.Name) || !has(from) {
			continue
		}
		out = append(out, Rename{From: from, To: f.Name})
	}
	return out
}

// RelabelRenamed returns earlier, a schema that came before later, with the columns later renamed under their
// new names (each marked as renamed from its name in earlier), the primary key metadata following; earlier
// itself when later renames none of its columns. A destination that writes a batch of the old schema after it
// renamed the column (both in one apply) writes it through the relabeled schema: same columns, new names.
func RelabelRenamed(earlier, later *arrow.Schema) *arrow.Schema {
	renames := Renames(DataFields(later), func(n string) bool { return len(earlier.FieldIndices(n)) > 0 })
	if len(renames) == 0 {
		return earlier
	}
	fields := slices.Clone(earlier.Fields())
	to := map[string]string{}
	for _, r := range renames {
		to[r.From] = r.To
	}
	for i, f := range fields {
		if n, ok := to[f.Name]; ok {
			from := f.Name
			f.Name = n
			fields[i] = MarkRenamed(f, from)
		}
	}
	md := earlier.Metadata()
	keys, vals := slices.Clone(md.Keys()), slices.Clone(md.Values())
	for i, k := range keys {
		if k != PrimaryKeyMeta || vals[i] == "" {
			continue
		}
		cols := strings.Split(vals[i], ",")
		for j, c := range cols {
			if n, ok := to[c]; ok {
				cols[j] = n
			}
		}
		vals[i] = strings.Join(cols, ",")
	}
	nmd := arrow.NewMetadata(keys, vals)
	return arrow.NewSchema(fields, &nmd)
}

// RenamedFromTableMeta is schema metadata: the stream's name before a RENAME TABLE at the source. After a captured
// table is renamed to a name the pipeline also captures, the source goes on under the new stream name and sets
// it (MarkRenamedTable) on every schema it announces for that stream until the table's next schema change.
//
// As with RenamedFromMeta, the marker says what happened and the destination decides from what it holds, which
// makes it safe to apply twice: when it has no table for the new stream and has one for the former, it renames
// that table (and whatever it keeps per stream) to the new name, so the rows written before the rename stay
// and the changes after it land beside them; when it has the new one already (a replay after a crash, or a
// later schema still marked) it does nothing; when it has neither, it creates the new one as for any stream.
const RenamedFromTableMeta = "skippr.renamed_from_table"

// MarkRenamedTable returns s with its stream's former name recorded (RenamedFromTableMeta), other metadata
// kept; s itself when from is "".
func MarkRenamedTable(s *arrow.Schema, from string) *arrow.Schema {
	if from == "" {
		return s
	}
	md := s.Metadata()
	keys, vals := []string{}, []string{}
	for i, k := range md.Keys() {
		if k != RenamedFromTableMeta {
			keys, vals = append(keys, k), append(vals, md.Values()[i])
		}
	}
	nmd := arrow.NewMetadata(append(keys, RenamedFromTableMeta), append(vals, from))
	return arrow.NewSchema(s.Fields(), &nmd)
}

// RenamedFromTable is the stream's former name that s records, "" when none.
func RenamedFromTable(s *arrow.Schema) string {
	if s == nil {
		return ""
	}
	v, _ := s.Metadata().GetValue(RenamedFromTableMeta)
	return v
}

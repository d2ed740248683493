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

// RenamedFromTableKey is schema-level metadata: the stream's name before a RENAME TABLE at the source. A source
// sets it on the schema it announces for the renamed stream, and keeps it until the table's next schema change.
// A destination whose table for the stream does not exist while the table of the former stream does renames
// that table (and what it keeps beside it: history, fences, pending fills) instead of creating a new one; a
// destination that has the stream's table already (a replay after the rename) renames nothing.
const RenamedFromTableKey = "skippr.renamed_from_table"

// RenamedFromTable is the stream's former name recorded in schema s (RenamedFromTableKey), "" when none or s
// is nil.
func RenamedFromTable(s *arrow.Schema) string {
	if s == nil {
		return ""
	}
	v, _ := s.Metadata().GetValue(RenamedFromTableKey)
	return v
}

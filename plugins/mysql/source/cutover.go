package source

import (
	"fmt"
	"slices"
	"strings"

	"vitess.io/vitess/go/vt/sqlparser"
)

// Online schema change tools (gh-ost, pt-online-schema-change) alter a table without locking it: they create a
// shadow table with the captured table's columns, ALTER the shadow, copy every row into it while replaying the
// concurrent changes (gh-ost from the binary log, pt-online-schema-change with triggers), and end with a
// cut-over, one RENAME TABLE that moves the captured table away and the shadow into its name:
//
//	gh-ost:                  rename /* gh-ost */ table `d`.`t` to `d`.`_t_del`, `d`.`_t_gho` to `d`.`t`
//	pt-online-schema-change: RENAME TABLE `d`.`t` TO `d`.`_t_old`, `d`.`_t_new` TO `d`.`t`
//
// At that instant the shadow holds exactly the captured table's rows, so the destination's table already holds
// them too: the stream goes on with no truncate and no copy, and the shadow's columns, compared with the old
// ones, are announced as the schema change an ALTER TABLE would have made (added columns with the value the
// old rows hold, dropped columns, changed types, renames). The history therefore follows the shadows'
// definitions from their CREATE TABLE on, and keeps them in the checkpoint. Their rows are never emitted.
//
// Only a tool's shadow of the captured table, by the tool's naming, swapped in by the RENAME that moves the
// captured table away, is taken to hold its rows: any other table renamed into a captured name is refused as
// before (its rows are not the destination's). A tool run with a row filter or a name of its own
// (gh-ost --force-table-names) is not recognized: the statement is refused.

// held is a table a RENAME TABLE statement moves around: its definition, and what it was when the statement
// began (the captured table, or the shadow table, of that name).
type held struct {
	def    TableDef
	was    string // captured table name, "" for another table
	shadow string // shadow table name (history.shadows), "" for another table
}

// shadowOf says whether table shadow is an online schema change tool's shadow of captured table t: gh-ost's
// `_t_gho`, pt-online-schema-change's `_t_new` (with more leading underscores when that name is taken).
func shadowOf(shadow, t string) bool {
	if shadow == "_"+t+"_gho" {
		return true
	}
	for s := shadow; strings.HasPrefix(s, "_"); {
		s = s[1:]
		if s == t+"_new" {
			return true
		}
	}
	return false
}

// isShadow says whether a table of the configured database, named name, is the shadow of a captured table.
func (h *history) isShadow(name string) bool {
	return !h.captured(name) && slices.ContainsFunc(h.names, func(t string) bool { return shadowOf(name, t) })
}

// shadowName resolves a statement's table name to a shadow table's name, "" for any other table.
func (h *history) shadowName(tn sqlparser.TableName, defaultDB string) string {
	db := tn.Qualifier.String()
	if db == "" {
		db = defaultDB
	}
	if db != h.db || !h.isShadow(tn.Name.String()) {
		return ""
	}
	return tn.Name.String()
}

// likeDef is the definition of a table created LIKE src: the same columns, with no rows of its own yet and no
// rename of its own.
func likeDef(src TableDef) TableDef {
	d := TableDef{Columns: slices.Clone(src.Columns), Key: slices.Clone(src.Key)}
	for i := range d.Columns {
		d.Columns[i].Existing = nil
		d.Columns[i].RenamedFrom = ""
	}
	return d
}

// createShadow follows a CREATE TABLE of an uncaptured table: a shadow's definition is kept; one whose columns
// the statement does not give is forgotten (a cut-over from it is then refused).
func (h *history) createShadow(st *sqlparser.CreateTable, defaultDB string, replace bool, eff *effect) {
	name := h.shadowName(st.Table, defaultDB)
	if name == "" {
		return
	}
	if _, ok := h.shadows[name]; ok && st.IfNotExists && !replace {
		return
	}
	eff.shadowed = true
	var d TableDef
	var err error
	switch {
	case st.OptLike != nil:
		like := st.OptLike.LikeTable
		src, ok := h.defs[h.ours(like, defaultDB)]
		if h.ours(like, defaultDB) == "" {
			src, ok = h.shadows[h.shadowName(like, defaultDB)]
		}
		if !ok || src.Gone {
			delete(h.shadows, name)
			return
		}
		d = likeDef(src)
	case st.Select != nil:
		err = fmt.Errorf("created from a SELECT")
	default:
		d, err = createDef(st.TableSpec)
	}
	if err != nil {
		delete(h.shadows, name)
		return
	}
	if h.shadows == nil {
		h.shadows = map[string]TableDef{}
	}
	h.shadows[name] = d
}

// alterShadow follows an ALTER TABLE of a shadow table. One this history cannot follow is forgotten: the
// statement itself is not the pipeline's business, only a later cut-over from it would be (and is refused).
// The shadow's rename markers accumulate over its ALTERs: the destination sees them only at the cut-over.
func (h *history) alterShadow(st *sqlparser.AlterTable, defaultDB string, eff *effect) {
	name := h.shadowName(st.Table, defaultDB)
	d, ok := h.shadows[name]
	if name == "" || !ok {
		return
	}
	eff.shadowed = true
	var ignored effect // notes about a shadow's rows: its own rows are never emitted
	to, err := h.alter(&d, st, defaultDB, &ignored)
	switch {
	case err != nil:
		delete(h.shadows, name)
	case to != "" && to != name:
		delete(h.shadows, name)
		if h.isShadow(to) && !strings.Contains(to, ".") {
			h.shadows[to] = d
		}
	default:
		h.shadows[name] = d
	}
}

// dropShadow follows a DROP TABLE of a shadow table.
func (h *history) dropShadow(tn sqlparser.TableName, defaultDB string, eff *effect) {
	if name := h.shadowName(tn, defaultDB); name != "" {
		if _, ok := h.shadows[name]; ok {
			delete(h.shadows, name)
			eff.shadowed = true
		}
	}
}

// forgetUnreadable forgets the shadows a statement the parser cannot read may change: a cut-over from one is
// then refused, not followed with columns that may be wrong.
func (h *history) forgetUnreadable(defaultDB, sql string, eff *effect) {
	if !mentionsRe.MatchString(sql) {
		return
	}
	for name := range h.shadows {
		if h.mentionsTable(defaultDB, sql, name) {
			delete(h.shadows, name)
			eff.shadowed = true
		}
	}
}

// keepShadows takes the shadow tables as a RENAME TABLE statement left them (scratch, by database.name).
func (h *history) keepShadows(scratch map[string]held, eff *effect) {
	next := map[string]TableDef{}
	for k, v := range scratch {
		if name, ok := strings.CutPrefix(k, h.db+"."); ok && h.isShadow(name) {
			next[name] = v.def
		}
	}
	if len(next) == 0 {
		next = nil
	}
	if len(next) > 0 || len(h.shadows) > 0 {
		eff.shadowed = true
	}
	h.shadows = next
}

// cutoverHint explains, in a refusal of a table renamed into captured table t, which renames are followed.
func cutoverHint(t string) string {
	return fmt.Sprintf(" (only an online schema change's cut-over is followed: the shadow _%s_gho of gh-ost or _%s_new of pt-online-schema-change, created while the pipeline streamed, renamed to %s by the statement that renames %s away)", t, t, t, t)
}

package source

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"vitess.io/vitess/go/vt/sqlparser"
)

// history follows the captured tables' definitions through the DDL statements of the binary log. It knows
// only the captured tables (the tables setting); a statement that would need another table's columns (a
// RENAME or CREATE … LIKE from an uncaptured table) is refused rather than guessed at.
type history struct {
	parser *sqlparser.Parser
	db     string              // the configured database
	names  []string            // the captured table names, in settings order
	defs   map[string]TableDef // by captured name
	// copying says whether a captured table is being copied while streaming (a table just added to tables):
	// a table renamed into its name then brings no rows the pipeline misses, the copy reads them. Nil: none.
	copying func(name string) bool
	// shadows are the definitions of online schema change tools' shadow tables of captured tables (cutover.go),
	// by name in the configured database: the table a cut-over renames into the captured name.
	shadows map[string]TableDef
	// matches says whether a table of the configured database not captured yet matches a pattern of tables
	// (patterns.go): a captured table renamed to such a name is followed there. Nil: no patterns.
	matches func(name string) bool
}

// tableRename is a captured table renamed to a captured name (or one a pattern matches): its stream goes on
// under the new name.
type tableRename struct{ from, to string }

// effect is what one statement did to the captured tables.
type effect struct {
	emptied []string // tables whose rows are gone, in statement order (TRUNCATE, DROP, renamed away, replaced)
	changed []string // tables with a new definition (altered, created), in statement order
	notes   []string // what a destination may not reproduce, for the log
	// shadowed: the statement changed the shadow tables' definitions (history.shadows), which the checkpoint
	// keeps.
	shadowed bool
	// renamedAway are captured tables renamed to a name the pipeline does not capture, as "table → new name":
	// the stream stops there (the destination's table is not emptied) until the user says what to do.
	renamedAway []string
	// renamed are captured tables renamed to captured names, in statement order: the streams go on under the
	// new names (the destination renames its table), nothing is emptied. adopted are the new names that only a
	// pattern matched, taken into the capture set by the statement.
	renamed []tableRename
	adopted []string
}

func (e *effect) none() bool { return len(e.emptied) == 0 && len(e.changed) == 0 }

func (e *effect) empty(name string) {
	if !slices.Contains(e.emptied, name) {
		e.emptied = append(e.emptied, name)
	}
}

func (e *effect) change(name string) {
	if !slices.Contains(e.changed, name) {
		e.changed = append(e.changed, name)
	}
}

func newHistory(db string, names []string, defs map[string]TableDef) (*history, error) {
	// The parser's version only gates version comments (/*!80000 … */), which MySQL 8 servers write.
	p, err := sqlparser.New(sqlparser.Options{MySQLServerVersion: "8.0.40"})
	if err != nil {
		return nil, err
	}
	return &history{parser: p, db: db, names: names, defs: defs}, nil
}

func (h *history) captured(name string) bool { return slices.Contains(h.names, name) }

func (h *history) isCopying(name string) bool { return h.copying != nil && h.copying(name) }

// adoptable says whether tn, not captured, is a table of the configured database that a pattern matches.
func (h *history) adoptable(tn sqlparser.TableName, defaultDB string) bool {
	db := tn.Qualifier.String()
	if db == "" {
		db = defaultDB
	}
	return db == h.db && h.matches != nil && !h.captured(tn.Name.String()) && h.matches(tn.Name.String())
}

// follow records that captured table from, with definition d, is now captured table to (adopting to when only
// a pattern matched it): the stream goes on under the new name, announced as renamed from the old one.
func (h *history) follow(from, to string, d TableDef, eff *effect) error {
	if cur, ok := h.defs[to]; ok && !cur.Gone && !h.isCopying(to) {
		return fmt.Errorf("captured table %s is renamed to captured table %s, which the schema history says exists", from, to)
	}
	if !h.captured(to) {
		h.names = append(h.names, to)
		eff.adopted = append(eff.adopted, to)
	}
	d.Columns = slices.Clone(d.Columns)
	for i := range d.Columns {
		d.Columns[i].RenamedFrom = "" // announced with the schema before the rename
	}
	d.RenamedFrom = from
	h.defs[from] = TableDef{Gone: true}
	h.defs[to] = d
	eff.emptied = slices.DeleteFunc(eff.emptied, func(n string) bool { return n == from })
	eff.change(to)
	eff.renamed = append(eff.renamed, tableRename{from: from, to: to})
	return nil
}

// ours resolves a statement's table name: the captured table it names, "" for any other table. defaultDB is
// the database the statement ran in (the query event's).
func (h *history) ours(tn sqlparser.TableName, defaultDB string) string {
	db := tn.Qualifier.String()
	if db == "" {
		db = defaultDB
	}
	if db != h.db || !h.captured(tn.Name.String()) {
		return ""
	}
	return tn.Name.String()
}

var (
	createOrReplace = regexp.MustCompile(`(?is)^(\s*(?:/\*.*?\*/\s*)*)CREATE\s+OR\s+REPLACE\s+((?:TEMPORARY\s+)?TABLE\b)`)
	// mentionsRe finds statements that may change a table: a statement the parser cannot read is refused
	// only when it is one of these and names a captured table.
	mentionsRe = regexp.MustCompile(`(?is)^\s*(?:/\*.*?\*/\s*)*(ALTER|CREATE|DROP|RENAME|TRUNCATE)\b`)
	// triggerRe finds CREATE/DROP TRIGGER, which the parser cannot read: a trigger changes no table's columns,
	// and the rows it writes are rows events of their own (pt-online-schema-change's triggers on a captured
	// table write its shadow).
	triggerRe = regexp.MustCompile(`(?is)^\s*(?:/\*.*?\*/\s*)*(?:CREATE\s+(?:OR\s+REPLACE\s+)?(?:DEFINER\s*=.*?\s+)?TRIGGER|DROP\s+TRIGGER)\s`)
)

// errUnreadable marks a statement the parser could not read that names a captured table.
var errUnreadable = errors.New("cannot read the statement")

// apply follows one statement of the binary log, run in database defaultDB. Statements that change no
// captured table have no effect; one that changes a captured table in a way that cannot be followed is an
// error (the caller stops the pipeline naming it, never decoding later rows with misaligned columns).
func (h *history) apply(defaultDB, sql string) (effect, error) {
	var eff effect
	replace := false
	if m := createOrReplace.FindStringSubmatchIndex(sql); m != nil {
		// MariaDB's CREATE OR REPLACE TABLE, which the parser does not know: a DROP TABLE IF EXISTS, then the
		// CREATE.
		sql = sql[:m[3]] + "CREATE " + sql[m[4]:]
		replace = true
	}
	if triggerRe.MatchString(sql) {
		return eff, nil
	}
	st, err := h.parser.ParseStrictDDL(sql)
	if err != nil {
		h.forgetUnreadable(defaultDB, sql, &eff)
		if mentionsRe.MatchString(sql) && h.mentions(defaultDB, sql) {
			return eff, fmt.Errorf("%w: %v", errUnreadable, err)
		}
		return eff, nil
	}
	switch st := st.(type) {
	case *sqlparser.AlterTable:
		name := h.ours(st.Table, defaultDB)
		if name == "" {
			h.alterShadow(st, defaultDB, &eff)
			// Renaming an uncaptured table into a captured name brings rows the pipeline never saw.
			for _, o := range st.AlterOptions {
				if r, ok := o.(*sqlparser.RenameTableName); ok && h.ours(r.Table, defaultDB) != "" && !h.isCopying(h.ours(r.Table, defaultDB)) {
					return eff, fmt.Errorf("table %s is renamed to captured table %s, whose rows the pipeline never read", sqlparser.String(st.Table), r.Table.Name.String())
				}
			}
			return eff, nil
		}
		d, ok := h.defs[name]
		if !ok || d.Gone {
			return eff, fmt.Errorf("table %s is altered, but the pipeline's schema history has no such table at this point", name)
		}
		// A rename marker speaks of the statement that made it: the destination has seen that schema by the
		// time this one arrives, so a rename here is from the names as they stand now.
		d.Columns = slices.Clone(d.Columns)
		for i := range d.Columns {
			d.Columns[i].RenamedFrom = ""
		}
		d.RenamedFrom = ""
		to, err := h.alter(&d, st, defaultDB, &eff)
		if err != nil {
			return eff, err
		}
		if to != "" && to != name {
			if h.captured(to) || h.adoptable(sqlparser.TableName{Name: sqlparser.NewIdentifierCS(to)}, h.db) {
				return eff, h.follow(name, to, d, &eff)
			}
			h.defs[name] = TableDef{Gone: true}
			eff.empty(name)
			eff.renamedAway = append(eff.renamedAway, name+" → "+to)
			return eff, nil
		}
		h.defs[name] = d
		eff.change(name)
	case *sqlparser.CreateTable:
		name := h.ours(st.Table, defaultDB)
		if name == "" || st.Temp {
			if !st.Temp {
				h.createShadow(st, defaultDB, replace, &eff)
			}
			return eff, nil
		}
		if d, ok := h.defs[name]; ok && !d.Gone && !replace {
			if st.IfNotExists {
				return eff, nil
			}
			return eff, fmt.Errorf("table %s is created while the schema history says it exists", name)
		}
		var d TableDef
		switch {
		case st.OptLike != nil:
			like := h.ours(st.OptLike.LikeTable, defaultDB)
			src, ok := h.defs[like]
			if like == "" || !ok || src.Gone {
				return eff, fmt.Errorf("table %s is created LIKE %s, a table the pipeline does not capture (its columns are unknown here)", name, sqlparser.String(st.OptLike.LikeTable))
			}
			d = likeDef(src)
		case st.Select != nil:
			return eff, fmt.Errorf("table %s is created from a SELECT, whose columns the statement does not spell out", name)
		default:
			d, err = createDef(st.TableSpec)
			if err != nil {
				return eff, fmt.Errorf("table %s: %w", name, err)
			}
		}
		if replace {
			eff.empty(name)
		}
		h.defs[name] = d
		eff.change(name)
	case *sqlparser.DropTable:
		if st.Temp {
			return eff, nil
		}
		for _, tn := range st.FromTables {
			if name := h.ours(tn, defaultDB); name != "" {
				h.defs[name] = TableDef{Gone: true}
				eff.empty(name)
			}
			h.dropShadow(tn, defaultDB, &eff)
		}
	case *sqlparser.DropDatabase:
		if st.DBName.String() == h.db {
			for _, name := range h.names {
				h.defs[name] = TableDef{Gone: true}
				eff.empty(name)
			}
			eff.shadowed = len(h.shadows) > 0
			h.shadows = nil
		}
	case *sqlparser.TruncateTable:
		if name := h.ours(st.Table, defaultDB); name != "" {
			eff.empty(name)
		}
	case *sqlparser.RenameTable:
		// Pairs run in order, so a swap through a third name works; that name is held here for the statement,
		// as are the shadow tables (cutover.go) a cut-over swaps in.
		scratch := map[string]held{}
		for n, d := range h.shadows {
			scratch[h.db+"."+n] = held{def: d, shadow: n}
		}
		away := map[string]string{} // captured table → where it went, unless it comes back
		key := func(tn sqlparser.TableName) string {
			db := tn.Qualifier.String()
			if db == "" {
				db = defaultDB
			}
			return db + "." + tn.Name.String()
		}
		into := map[string]bool{} // captured names a captured table was renamed to by this statement
		// The captured tables that exist before the statement, and those of them the statement renamed to a
		// captured name: a destination holds a table for each, so another table may take such a name only
		// once its own table has moved (RENAME TABLE b TO b_old, a TO b), not in a swap through another name.
		live, followed := map[string]bool{}, map[string]bool{}
		for _, n := range h.names {
			if d, ok := h.defs[n]; ok && !d.Gone {
				live[n] = true
			}
		}
		for _, p := range st.TablePairs {
			from, to := h.ours(p.FromTable, defaultDB), h.ours(p.ToTable, defaultDB)
			var in held
			var known bool
			if into[from] {
				// Its stream would have to skip a name no schema was announced under.
				return eff, fmt.Errorf("table %s is renamed twice in one statement (%s): only one rename of a captured table per statement is followed", from, sqlparser.String(st))
			}
			if from != "" {
				in.def, known = h.defs[from]
				in.was = from
				h.defs[from] = TableDef{Gone: true}
				eff.empty(from)
			} else {
				in, known = scratch[key(p.FromTable)]
				delete(scratch, key(p.FromTable))
			}
			if to == "" && in.was != "" && known && !in.def.Gone && h.adoptable(p.ToTable, defaultDB) {
				to = p.ToTable.Name.String()
			}
			if to == "" {
				if known {
					scratch[key(p.ToTable)] = in
				}
				if from != "" {
					away[from] = sqlparser.String(p.ToTable)
				}
				continue
			}
			if !known || in.def.Gone {
				if h.isCopying(to) {
					// Its copy, running while the stream goes on, reads the rows; the definition is the one the
					// copy started with.
					eff.emptied = slices.DeleteFunc(eff.emptied, func(n string) bool { return n == to })
					delete(away, to)
					continue
				}
				return eff, fmt.Errorf("table %s is renamed to captured table %s, whose rows the pipeline never read%s", sqlparser.String(p.FromTable), to, cutoverHint(to))
			}
			if in.was != "" && in.was != to {
				if live[to] && !followed[to] && !h.isCopying(to) {
					return eff, fmt.Errorf("captured table %s is renamed to %s, the name captured table %s had until this statement (%s): the destination could not tell the two tables' rows apart", in.was, to, to, sqlparser.String(st))
				}
				if err := h.follow(in.was, to, in.def, &eff); err != nil {
					return eff, err
				}
				into[to], followed[in.was] = true, true
				delete(away, in.was)
				continue
			}
			if in.was == "" {
				// A shadow table comes in: the cut-over of an online schema change, when the same statement moved
				// the captured table away; any other table's rows are not known to be the captured table's.
				if _, moved := away[to]; !moved || !shadowOf(in.shadow, to) {
					return eff, fmt.Errorf("table %s is renamed to captured table %s, whose rows the pipeline never read%s", sqlparser.String(p.FromTable), to, cutoverHint(to))
				}
				eff.notes = append(eff.notes, fmt.Sprintf("table %s is replaced by %s (an online schema change's cut-over): its rows are taken to be the same, the columns change as the tool's ALTER said", to, in.shadow))
			}
			// A captured table renamed away and back within the statement keeps its rows and stream; one replaced
			// by its shadow keeps them too, with the shadow's columns.
			h.defs[to] = in.def
			eff.emptied = slices.DeleteFunc(eff.emptied, func(n string) bool { return n == to })
			eff.change(to)
			delete(away, to)
		}
		for _, name := range eff.emptied {
			if n, ok := away[name]; ok {
				eff.renamedAway = append(eff.renamedAway, name+" → "+n)
			}
		}
		h.keepShadows(scratch, &eff)
	}
	return eff, nil
}

// mentions reports whether a statement names a captured table of the configured database. It errs on the
// side of yes.
func (h *history) mentions(defaultDB, sql string) bool {
	return slices.ContainsFunc(h.names, func(name string) bool { return h.mentionsTable(defaultDB, sql, name) })
}

// mentionsTable reports whether sql's text names captured table name.
func (h *history) mentionsTable(defaultDB, sql, name string) bool {
	lower := strings.ToLower(sql)
	n := strings.ToLower(name)
	qualified := strings.Contains(lower, strings.ToLower(h.db)+"."+n) || strings.Contains(lower, "`"+strings.ToLower(h.db)+"`.`"+n+"`")
	return qualified || (strings.EqualFold(defaultDB, h.db) && regexp.MustCompile(`(^|[^a-z0-9_$])`+regexp.QuoteMeta(n)+`($|[^a-z0-9_$])`).MatchString(lower))
}

// alter applies an ALTER TABLE's options to d in order; it returns the table's new name when renamed.
func (h *history) alter(d *TableDef, st *sqlparser.AlterTable, defaultDB string, eff *effect) (string, error) {
	d.Columns = slices.Clone(d.Columns)
	d.Key = slices.Clone(d.Key)
	renamed := ""
	for _, o := range st.AlterOptions {
		switch o := o.(type) {
		case *sqlparser.AddColumns:
			at := len(d.Columns)
			if o.First {
				at = 0
			}
			if o.After != nil {
				i := d.index(o.After.Name.String())
				if i < 0 {
					return "", fmt.Errorf("ADD COLUMN … AFTER %s: no such column", o.After.Name.String())
				}
				at = i + 1
			}
			for _, cd := range o.Columns {
				c, pk, note, err := columnDef(cd, true)
				if err != nil {
					return "", err
				}
				if note != "" {
					eff.notes = append(eff.notes, note)
				}
				d.Columns = slices.Insert(d.Columns, at, c)
				at++
				if pk {
					d.Key = []string{c.Name}
				}
			}
		case *sqlparser.DropColumn:
			name := o.Name.Name.String()
			i := d.index(name)
			if i < 0 {
				return "", fmt.Errorf("DROP COLUMN %s: no such column", name)
			}
			d.Columns = slices.Delete(d.Columns, i, i+1)
			d.Key = slices.DeleteFunc(d.Key, func(k string) bool { return strings.EqualFold(k, name) })
		case *sqlparser.ModifyColumn:
			if err := d.replace(o.NewColDefinition.Name.String(), o.NewColDefinition, o.First, o.After); err != nil {
				return "", err
			}
		case *sqlparser.ChangeColumn:
			if err := d.replace(o.OldColumn.Name.String(), o.NewColDefinition, o.First, o.After); err != nil {
				return "", err
			}
		case *sqlparser.RenameColumn:
			old, nw := o.OldName.Name.String(), o.NewName.Name.String()
			i := d.index(old)
			if i < 0 {
				return "", fmt.Errorf("RENAME COLUMN %s: no such column", old)
			}
			d.Columns[i].rename(nw)
			d.renameKey(old, nw)
		case *sqlparser.AddIndexDefinition:
			if o.IndexDefinition.Info.Type == sqlparser.IndexTypePrimary {
				d.Key = nil
				for _, c := range o.IndexDefinition.Columns {
					i := d.index(c.Column.String())
					if i < 0 {
						return "", fmt.Errorf("ADD PRIMARY KEY: no column %s", c.Column.String())
					}
					d.Key = append(d.Key, d.Columns[i].Name)
				}
			}
		case *sqlparser.DropKey:
			if o.Type == sqlparser.PrimaryKeyType {
				d.Key = nil
			}
		case *sqlparser.AlterCharset:
			// CONVERT TO CHARACTER SET re-encodes every text column.
			for i := range d.Columns {
				if d.Columns[i].Charset != "" {
					d.Columns[i].Charset = strings.ToLower(o.CharacterSet)
				}
			}
		case *sqlparser.RenameTableName:
			renamed = o.Table.Name.String()
			if q := o.Table.Qualifier.String(); q != "" && q != h.db {
				renamed = q + "." + renamed // moved to another database: not a captured name
			}
		case *sqlparser.AlterColumn, *sqlparser.AddConstraintDefinition, sqlparser.AlgorithmValue, *sqlparser.AlterCheck,
			*sqlparser.AlterIndex, *sqlparser.KeyState, *sqlparser.Force, *sqlparser.LockOption, *sqlparser.OrderByOption,
			*sqlparser.RenameIndex, *sqlparser.Validation, sqlparser.TableOptions, *sqlparser.TablespaceOperation:
			// Defaults, indexes, constraints and table options: the rows' columns stay as they are.
		default:
			return "", fmt.Errorf("ALTER TABLE option %q is not followed", sqlparser.String(o))
		}
	}
	return renamed, nil
}

func (d *TableDef) index(name string) int {
	// Column names are case-insensitive in MySQL.
	return slices.IndexFunc(d.Columns, func(c ColumnDef) bool { return strings.EqualFold(c.Name, name) })
}

// rename gives the column a new name, remembering the one it had when the statement began (a column renamed
// twice by one statement was never seen by the destination under the name between).
func (c *ColumnDef) rename(nw string) {
	if c.Name == nw {
		return
	}
	if c.RenamedFrom == "" {
		c.RenamedFrom = c.Name
	}
	c.Name = nw
	if c.RenamedFrom == nw {
		c.RenamedFrom = "" // renamed back
	}
}

func (d *TableDef) renameKey(old, nw string) {
	for i, k := range d.Key {
		if strings.EqualFold(k, old) {
			d.Key[i] = nw
		}
	}
}

// replace is MODIFY/CHANGE COLUMN: column old gets definition cd (and its name), moved when asked.
func (d *TableDef) replace(old string, cd *sqlparser.ColumnDefinition, first bool, after *sqlparser.ColName) error {
	i := d.index(old)
	if i < 0 {
		return fmt.Errorf("column %s: no such column", old)
	}
	c, pk, _, err := columnDef(cd, false)
	if err != nil {
		return err
	}
	prev := d.Columns[i]
	prev.rename(c.Name) // CHANGE COLUMN a b …: a rename as well
	c.RenamedFrom = prev.RenamedFrom
	d.renameKey(old, c.Name)
	if pk {
		d.Key = []string{c.Name}
	}
	if !first && after == nil {
		d.Columns[i] = c
		return nil
	}
	d.Columns = slices.Delete(d.Columns, i, i+1)
	at := 0
	if after != nil {
		j := d.index(after.Name.String())
		if j < 0 {
			return fmt.Errorf("column %s … AFTER %s: no such column", c.Name, after.Name.String())
		}
		at = j + 1
	}
	d.Columns = slices.Insert(d.Columns, at, c)
	return nil
}

// createDef reads a CREATE TABLE's columns and primary key.
func createDef(spec *sqlparser.TableSpec) (TableDef, error) {
	var d TableDef
	if spec == nil {
		return d, errors.New("the statement has no column list")
	}
	tableCharset := ""
	for _, o := range spec.Options {
		if n := strings.ToLower(o.Name); n == "charset" || n == "character set" || n == "default charset" || n == "default character set" {
			tableCharset = strings.ToLower(o.String)
			if tableCharset == "" && o.Value != nil {
				tableCharset = strings.ToLower(o.Value.Val)
			}
		}
	}
	for _, cd := range spec.Columns {
		c, pk, _, err := columnDef(cd, false)
		if err != nil {
			return d, err
		}
		if c.Charset == "" && textType(c.DataType) {
			c.Charset = tableCharset
		}
		d.Columns = append(d.Columns, c)
		if pk {
			d.Key = []string{c.Name}
		}
	}
	for _, ix := range spec.Indexes {
		if ix.Info.Type != sqlparser.IndexTypePrimary {
			continue
		}
		d.Key = nil
		for _, c := range ix.Columns {
			i := d.index(c.Column.String())
			if i < 0 {
				return d, fmt.Errorf("PRIMARY KEY names no column %s", c.Column.String())
			}
			d.Key = append(d.Key, d.Columns[i].Name)
		}
	}
	return d, nil
}

func textType(dt string) bool {
	return dt == "char" || dt == "varchar" || strings.HasSuffix(dt, "text") || dt == "enum" || dt == "set"
}

// typeSynonyms are the spellings a DDL may use for what information_schema reports as another DATA_TYPE.
var typeSynonyms = map[string]string{
	"integer": "int", "int4": "int", "int8": "bigint", "int1": "tinyint", "int2": "smallint", "int3": "mediumint",
	"middleint": "mediumint", "dec": "decimal", "numeric": "decimal", "fixed": "decimal", "real": "double",
	"double precision": "double", "float8": "double", "float4": "float", "character": "char",
	"nchar": "char", "nvarchar": "varchar", "national char": "char", "national varchar": "varchar",
	"character varying": "varchar", "long varchar": "mediumtext", "long": "mediumtext",
}

// columnDef turns a parsed column definition into a ColumnDef, spelled as information_schema would. added
// says the column is added to a table with rows: then Existing is what those rows hold, and note says when
// that cannot be known here.
func columnDef(cd *sqlparser.ColumnDefinition, added bool) (c ColumnDef, pk bool, note string, err error) {
	ct := cd.Type
	dt := strings.ToLower(ct.Type)
	if s, ok := typeSynonyms[dt]; ok {
		dt = s
	}
	c = ColumnDef{Name: cd.Name.String(), DataType: dt, Charset: strings.ToLower(ct.Charset.Name)}
	length := func(def int) int {
		if ct.Length != nil {
			return *ct.Length
		}
		return def
	}
	switch dt {
	case "bool", "boolean":
		c.DataType, c.ColumnType = "tinyint", "tinyint(1)"
	case "serial":
		c.DataType, c.ColumnType = "bigint", "bigint(20) unsigned"
	case "decimal":
		c.Precision, c.Scale = int32(length(10)), 0
		if ct.Scale != nil {
			c.Scale = int32(*ct.Scale)
		}
		c.ColumnType = fmt.Sprintf("decimal(%d,%d)", c.Precision, c.Scale)
	case "datetime", "timestamp", "time":
		c.Scale = int32(length(0))
		c.ColumnType = dt
		if c.Scale > 0 {
			c.ColumnType += "(" + strconv.Itoa(int(c.Scale)) + ")"
		}
	case "enum", "set":
		c.ColumnType = dt + "(" + strings.Join(ct.EnumValues, ",") + ")"
	case "json":
		c.ColumnType, c.Charset = "json", ""
	default:
		c.ColumnType = dt
		if ct.Length != nil {
			c.ColumnType += "(" + strconv.Itoa(*ct.Length)
			if ct.Scale != nil {
				c.ColumnType += "," + strconv.Itoa(*ct.Scale)
			}
			c.ColumnType += ")"
		}
	}
	if ct.Unsigned && !strings.Contains(c.ColumnType, "unsigned") {
		c.ColumnType += " unsigned"
	}
	if ct.Zerofill {
		c.ColumnType += " zerofill"
	}
	opts := ct.Options
	if opts != nil && opts.KeyOpt == sqlparser.ColKeyPrimary {
		pk = true
	}
	if !added {
		return c, pk, "", nil
	}
	switch {
	case opts != nil && opts.Default != nil:
		v, ok := literalText(opts.Default)
		if !ok {
			return c, pk, fmt.Sprintf("column %s is added with DEFAULT %s, which is computed by the server: the destination's existing rows get NULL", c.Name, sqlparser.String(opts.Default)), nil
		}
		c.Existing = v
	case opts != nil && opts.Null != nil && !*opts.Null:
		// NOT NULL without a default: the server fills existing rows with the type's implicit default.
		switch {
		case strings.Contains(c.DataType, "int") || c.DataType == "decimal" || c.DataType == "float" || c.DataType == "double" || c.DataType == "year":
			z := "0"
			c.Existing = &z
		case c.DataType == "char" || c.DataType == "varchar" || strings.HasSuffix(c.DataType, "text"):
			z := ""
			c.Existing = &z
		case c.DataType == "enum":
			if elems := parseElems(c.ColumnType); len(elems) > 0 {
				c.Existing = &elems[0]
			}
		default:
			note = fmt.Sprintf("column %s (%s) is added NOT NULL without a default: the destination's existing rows get NULL where the server holds its implicit default", c.Name, c.ColumnType)
		}
	}
	return c, pk, note, nil
}

// literalText is a DEFAULT's value in text form; ok is false for an expression the server computes. A NULL
// default is (nil, true).
func literalText(e sqlparser.Expr) (*string, bool) {
	switch e := e.(type) {
	case *sqlparser.NullVal:
		return nil, true
	case sqlparser.BoolVal:
		v := "0"
		if e {
			v = "1"
		}
		return &v, true
	case *sqlparser.Literal:
		v := e.Val
		return &v, true
	case *sqlparser.UnaryExpr:
		if l, ok := e.Expr.(*sqlparser.Literal); ok && e.Operator == sqlparser.UMinusOp {
			v := "-" + l.Val
			return &v, true
		}
	}
	return nil, false
}

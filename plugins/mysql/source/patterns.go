package source

// Table patterns (`tables: ["orders_*"]`, config.Settings.Patterns). A pattern is expanded against the catalog at
// the pipeline's first start; from then on the capture set lives in the checkpoint (Position.Tables, with the
// patterns it was expanded with in Position.Patterns) and follows the binary log:
//
//   - A CREATE TABLE of a matching name is adopted at that statement (adopt): the table is empty when it is
//     created, and the binary log carries every row written to it afterwards, in order, after the CREATE. So
//     streaming it from its CREATE on is a copy that can lose nothing and hold nothing twice, with no re-snapshot
//     needed: the statement is where its capture begins, and the checkpoint after it lists the table. A restart
//     before that checkpoint replays the CREATE and adopts the table again. Its definition is taken from the
//     statement, as the schema history takes any CREATE (a CREATE … SELECT, or LIKE an uncaptured table, cannot be
//     followed and stops the pipeline naming the table).
//   - A DROP TABLE of a table captured only by a pattern is released (release): a warning, the table leaves the
//     capture set and the checkpoint, and the destination's table keeps its rows (no truncate). A table named
//     exactly keeps the truncate setting's behaviour.
//   - At a restart the capture set is the checkpoint's (a table created after the checkpoint is adopted when the
//     stream replays its CREATE), plus, for a pattern the checkpoint was not expanded with (one added to the
//     settings since), the tables of the catalog it matches, copied while streaming as any table added to tables.

import (
	"fmt"
	"slices"
	"strings"

	"vitess.io/vitess/go/mysql"
	"vitess.io/vitess/go/sqltypes"
	"vitess.io/vitess/go/vt/sqlparser"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/mysql/config"
)

// baseTables lists the database's base tables (not views), without the watermark table.
func baseTables(c *mysql.Conn, r *reader) ([]string, error) {
	res, err := fetch(c, `SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = `+sqltypes.EncodeStringSQL(r.cfg.Database)+` AND TABLE_TYPE = 'BASE TABLE'`)
	if err != nil {
		return nil, fmt.Errorf("list the tables of %s for the patterns of tables: %w", r.cfg.Database, r.cfg.Explain(err))
	}
	var out []string
	for _, row := range res.Rows {
		n := row[0].ToString()
		if r.cfg.WatermarkDatabase == r.cfg.Database && n == watermarkTable {
			continue
		}
		out = append(out, n)
	}
	return out, nil
}

// expand sets the capture set of a Read from the settings and the checkpoint (pos, nil at a first start): see
// the file's comment.
func (r *reader) expand(c *mysql.Conn, pos *Position) error {
	r.exact = slices.Clone(r.cfg.Tables)
	if len(r.cfg.Patterns) == 0 {
		return nil
	}
	existing, err := baseTables(c, r)
	if err != nil {
		return err
	}
	if pos == nil {
		if err := r.cfg.Expand(existing, true); err != nil {
			return err
		}
		r.log.Info("table patterns expanded", "patterns", strings.Join(r.cfg.Patterns, ", "), "tables", strings.Join(r.cfg.Tables, ", "))
		return nil
	}
	// The checkpoint's tables first, in its order, so an unchanged setting gives the checkpoint's list exactly.
	var tables []string
	for _, n := range pos.Tables {
		if slices.Contains(r.exact, n) || r.cfg.Matches(n) {
			tables = append(tables, n)
		}
	}
	for _, n := range r.exact {
		if !slices.Contains(tables, n) {
			tables = append(tables, n)
		}
	}
	fresh := config.Settings{Database: r.cfg.Database}
	for _, p := range r.cfg.Patterns {
		if !slices.Contains(pos.Patterns, p) {
			fresh.Patterns = append(fresh.Patterns, p)
		}
	}
	fresh.Tables = tables
	if err := fresh.Expand(existing, false); err != nil {
		return err
	}
	r.cfg.Tables = fresh.Tables
	return nil
}

// expandInto expands cfg's patterns as a first start does (Discover and Check, which know no checkpoint).
func (r *reader) expandInto(c *mysql.Conn, cfg *config.Settings) error {
	if len(cfg.Patterns) == 0 {
		return nil
	}
	existing, err := baseTables(c, r)
	if err != nil {
		return err
	}
	return cfg.Expand(existing, true)
}

// byPattern says whether a captured table is captured by a pattern only (not named in tables).
func (r *reader) byPattern(name string) bool {
	return !slices.Contains(r.exact, name) && r.cfg.Matches(name)
}

// adopt takes a table that a CREATE TABLE in the binary log creates into the capture set when its name matches a
// pattern, before the schema history follows the statement (which then defines it, as for any captured table).
func (s *streamer) adopt(db, sql string) {
	if len(s.cfg.Patterns) == 0 {
		return
	}
	st, err := s.hist.parser.ParseStrictDDL(createOrReplace.ReplaceAllString(sql, "${1}CREATE ${2}"))
	if err != nil {
		return // a statement the parser cannot read is the history's to judge
	}
	ct, ok := st.(*sqlparser.CreateTable)
	if !ok || ct.Temp {
		return
	}
	in := ct.Table.Qualifier.String()
	if in == "" {
		in = db
	}
	name := ct.Table.Name.String()
	if in != s.cfg.Database || s.hist.captured(name) || !s.cfg.Matches(name) ||
		(s.cfg.WatermarkDatabase == s.cfg.Database && name == watermarkTable) {
		return
	}
	s.hist.names = append(s.hist.names, name)
	s.hist.defs[name] = TableDef{Gone: true}
	s.cfg.Tables = append(s.cfg.Tables, name)
	s.cur.Tables = append(slices.Clone(s.cur.Tables), name)
	s.capturedSent = false
	s.log.Info("table created that matches a pattern of tables: captured from its CREATE on", "table", s.cfg.Stream(name),
		"file", s.file, "pos", s.cur.Pos)
}

// release takes the tables captured by a pattern that the statement dropped out of the capture set, and out of the
// statement's effect: their destination tables keep their rows. It returns the rest of the effect.
func (s *streamer) release(eff effect, sql string, next uint64) effect {
	var gone []string
	eff.emptied = slices.DeleteFunc(eff.emptied, func(name string) bool {
		if !s.hist.defs[name].Gone || !s.byPattern(name) || slices.ContainsFunc(eff.renamedAway, func(r string) bool { return strings.HasPrefix(r, name+" → ") }) {
			return false
		}
		gone = append(gone, name)
		return true
	})
	for _, name := range gone {
		s.hist.names = slices.DeleteFunc(s.hist.names, func(n string) bool { return n == name })
		delete(s.hist.defs, name)
		delete(s.tables, name)
		s.cfg.Tables = slices.DeleteFunc(s.cfg.Tables, func(n string) bool { return n == name })
		s.cur.Tables = slices.DeleteFunc(slices.Clone(s.cur.Tables), func(n string) bool { return n == name })
		s.released = append(s.released, s.cfg.Stream(name))
		s.capturedSent = false
		s.log.Warn("table captured by a pattern of tables was dropped: released, no longer captured; its destination table keeps its rows",
			"table", s.cfg.Stream(name), "statement", sql, "file", s.file, "pos", next)
	}
	if len(gone) > 0 {
		s.cur.Schemas = cloneDefs(s.hist.defs)
		s.moved = true
	}
	return eff
}

// capturedMetrics are the gauges of the capture set, which `skippr status` lists: captured_table 1 for each table
// captured, 0 for each released (dropped) in this Read. The first checkpoint of a Read carries them, and the first
// after the set changed: the engine keeps the last ones seen, and a checkpoint per transaction need not repeat a
// gauge per table.
func (s *streamer) capturedMetrics() []serve.Metric {
	if s.capturedSent {
		return nil
	}
	s.capturedSent = true
	var out []serve.Metric
	for _, name := range s.cfg.Tables {
		out = append(out, capturedMetric(s.cfg.Stream(name), s.byPattern(name), 1))
	}
	for _, stream := range s.released {
		out = append(out, capturedMetric(stream, true, 0))
	}
	return out
}

func capturedMetric(stream string, byPattern bool, v float64) serve.Metric {
	via := "name"
	if byPattern {
		via = "pattern"
	}
	return serve.Metric{Name: "captured_table", Value: v, Labels: map[string]string{"table": stream, "via": via},
		Help: "1 for each table the source captures (via: name, listed in tables; pattern, matched by a pattern there), 0 for one captured by a pattern and released since (dropped at the source)."}
}

package source

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"vitess.io/vitess/go/mysql"
	"vitess.io/vitess/go/sqltypes"
	querypb "vitess.io/vitess/go/vt/proto/query"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/mysql/config"
)

// MetaType is the field metadata key holding the column's MySQL type (COLUMN_TYPE; "json" for MariaDB's JSON
// alias too), so a destination can recreate it.
const MetaType = "mysql.type"

// Column is a table column as information_schema describes it.
type Column struct {
	Name       string
	DataType   string // information_schema DATA_TYPE: int, varchar, datetime...
	ColumnType string // COLUMN_TYPE: int(10) unsigned, enum('a','b')...
	Precision  int32
	Scale      int32
	Kind       Kind
	Elems      []string // ENUM and SET members, in definition order
	// Width is a BINARY(n) column's n: the binary log drops its trailing zero bytes, the server's rows keep
	// them, so values from the binary log are padded back to it.
	Width int
	// field is what vitess's binlog decoder needs to know of the column (signedness, text or binary).
	field *querypb.Field
	// existing is ColumnDef.Existing.
	existing *string
	// renamedFrom is ColumnDef.RenamedFrom.
	renamedFrom string
	// Hidden: the column is excluded or hashed (table_options), so its values appear in no error message.
	Hidden bool
}

// Table is a captured table.
type Table struct {
	Name    string
	Stream  string
	Columns []Column
	Key     []int // primary key columns, in key order
	// FullRow: mode: full_row, keyless, matched by the whole row (fullrow.go).
	FullRow bool
	Schema  *arrow.Schema
	def     TableDef // what it was built from
}

func (t *Table) stream() serve.Stream {
	return serve.Stream{Name: t.Stream, Schema: t.Schema, PrimaryKey: t.keyNames(), Modes: []serve.SyncMode{serve.ModeSnapshot, serve.ModeCDC}}
}

func (t *Table) keyNames() []string {
	out := make([]string, len(t.Key))
	for i, k := range t.Key {
		out[i] = t.Columns[k].Name
	}
	return out
}

// isMariaDB tells the flavours apart by the server version string.
func isMariaDB(c *mysql.Conn) bool {
	return strings.Contains(strings.ToLower(c.ServerVersion), "mariadb")
}

func fetch(c *mysql.Conn, query string) (*sqltypes.Result, error) {
	return c.ExecuteFetch(query, 1_000_000, true)
}

// loadTable reads a table's definition from the server's catalog and builds it.
func loadTable(c *mysql.Conn, cfg config.Settings, name string) (*Table, error) {
	d, err := loadDef(c, cfg, name)
	if err != nil {
		return nil, err
	}
	return d.build(name, cfg.Stream(name), cfg.FullRow(name))
}

// loadDef reads a table's columns, primary key and (MariaDB) JSON check constraints from information_schema.
func loadDef(c *mysql.Conn, cfg config.Settings, name string) (TableDef, error) {
	var d TableDef
	db, tn := sqltypes.EncodeStringSQL(cfg.Database), sqltypes.EncodeStringSQL(name)
	res, err := fetch(c, `SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, COALESCE(NUMERIC_PRECISION, 0), COALESCE(NUMERIC_SCALE, 0),
		COALESCE(DATETIME_PRECISION, 0), COALESCE(CHARACTER_SET_NAME, '')
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = `+db+` AND TABLE_NAME = `+tn+` ORDER BY ORDINAL_POSITION`)
	if err != nil {
		return d, fmt.Errorf("read columns of %s: %w", cfg.Stream(name), cfg.Explain(err))
	}
	if len(res.Rows) == 0 {
		return d, fault.ConfigErr(fmt.Errorf("table %s does not exist (or user %q may not see it)", cfg.Stream(name), cfg.User),
			fmt.Sprintf("check the tables setting, or GRANT SELECT ON `%s`.`%s` TO '%s'", cfg.Database, name, cfg.User))
	}
	json := map[string]bool{}
	if isMariaDB(c) {
		// MariaDB's JSON is LONGTEXT with a json_valid() check: the check is what says it is JSON, so that a
		// table created with JSON lands as JSON here exactly as on MySQL, and a later DDL cannot flip it.
		chk, err := fetch(c, `SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = `+db+` AND TABLE_NAME = `+tn)
		if err != nil {
			return d, fmt.Errorf("read check constraints of %s: %w", cfg.Stream(name), cfg.Explain(err))
		}
		for _, r := range chk.Rows {
			cl := strings.TrimSpace(r[0].ToString())
			if strings.HasPrefix(cl, "json_valid(`") && strings.HasSuffix(cl, "`)") {
				json[strings.ReplaceAll(cl[len("json_valid(`"):len(cl)-2], "``", "`")] = true
			}
		}
	}
	for _, r := range res.Rows {
		col := ColumnDef{Name: r[0].ToString(), DataType: strings.ToLower(r[1].ToString()), ColumnType: r[2].ToString(), Charset: strings.ToLower(r[6].ToString())}
		p, _ := strconv.Atoi(r[3].ToString())
		s, _ := strconv.Atoi(r[4].ToString())
		dp, _ := strconv.Atoi(r[5].ToString())
		switch col.DataType {
		case "decimal", "numeric":
			col.Precision, col.Scale = int32(p), int32(s)
		case "datetime", "timestamp", "time":
			col.Scale = int32(dp)
		}
		if json[col.Name] {
			col.DataType, col.ColumnType, col.Charset = "json", "json", ""
		}
		d.Columns = append(d.Columns, col)
	}
	keys, err := fetch(c, `SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = `+db+` AND TABLE_NAME = `+tn+` AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION`)
	if err != nil {
		return d, fmt.Errorf("read primary key of %s: %w", cfg.Stream(name), cfg.Explain(err))
	}
	for _, r := range keys.Rows {
		d.Key = append(d.Key, r[0].ToString())
	}
	return d, nil
}

// classify sets the column's Kind, members and binlog field.
func (col *Column) classify(charset string) error {
	unsigned := strings.Contains(strings.ToLower(col.ColumnType), "unsigned")
	ints := map[string][2]Kind{
		"tinyint": {KindInt8, KindUint8}, "smallint": {KindInt16, KindUint16}, "mediumint": {KindInt32, KindUint32},
		"int": {KindInt32, KindUint32}, "integer": {KindInt32, KindUint32}, "bigint": {KindInt64, KindUint64},
	}
	qt := querypb.Type_VARCHAR
	switch dt := col.DataType; {
	case ints[dt] != [2]Kind{}:
		k := ints[dt]
		col.Kind, qt = k[0], querypb.Type_INT64
		if unsigned {
			col.Kind, qt = k[1], querypb.Type_UINT64
		}
	case dt == "decimal" || dt == "numeric":
		col.Kind = KindDecimal128
		if col.Precision > 38 {
			col.Kind = KindDecimal256
		}
	case dt == "float":
		col.Kind = KindFloat32
	case dt == "double" || dt == "real":
		col.Kind = KindFloat64
	case dt == "bit":
		col.Kind = KindBit
	case dt == "date":
		col.Kind = KindDate
	case dt == "datetime":
		col.Kind = KindDatetime
	case dt == "timestamp":
		col.Kind = KindTimestamp
	case dt == "time":
		col.Kind = KindTime
	case dt == "year":
		col.Kind = KindYear
	case dt == "json":
		col.Kind = KindJSON
	case dt == "enum" || dt == "set":
		col.Kind = KindEnum
		if dt == "set" {
			col.Kind = KindSet
		}
		col.Elems = parseElems(col.ColumnType)
	case dt == "char" || dt == "varchar" || strings.HasSuffix(dt, "text"):
		if charset != "" && !strings.HasPrefix(charset, "utf8") && charset != "ascii" {
			return fmt.Errorf("column %s has character set %s: only utf8mb4, utf8mb3 and ascii text is carried (the binary log holds other character sets undecoded)", col.Name, charset)
		}
		col.Kind = KindString
	case dt == "binary" || dt == "varbinary" || strings.HasSuffix(dt, "blob"):
		col.Kind, qt = KindBinary, querypb.Type_VARBINARY
		if dt == "binary" {
			if _, rest, ok := strings.Cut(col.ColumnType, "("); ok {
				col.Width, _ = strconv.Atoi(strings.TrimSuffix(rest, ")"))
			}
		}
	case dt == "geometry" || dt == "point" || dt == "linestring" || dt == "polygon" || dt == "multipoint" ||
		dt == "multilinestring" || dt == "multipolygon" || dt == "geometrycollection":
		return fmt.Errorf("column %s has spatial type %s, which this plugin does not carry yet", col.Name, dt)
	default:
		return fmt.Errorf("column %s has type %s, which this plugin does not know", col.Name, col.ColumnType)
	}
	col.field = &querypb.Field{Name: col.Name, Type: qt}
	return nil
}

// parseElems reads the members of enum('a','b”c') or set(...).
func parseElems(columnType string) []string {
	open := strings.IndexByte(columnType, '(')
	if open < 0 {
		return nil
	}
	s := columnType[open+1:]
	var out []string
	for {
		s = strings.TrimLeft(s, ", ")
		if !strings.HasPrefix(s, "'") {
			return out
		}
		var b strings.Builder
		i := 1
		for i < len(s) {
			if s[i] == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					b.WriteByte('\'')
					i += 2
					continue
				}
				break
			}
			if s[i] == '\\' && i+1 < len(s) {
				i++
			}
			b.WriteByte(s[i])
			i++
		}
		out = append(out, b.String())
		s = s[min(i+1, len(s)):]
	}
}

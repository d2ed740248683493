package source

import (
	"encoding/binary"
	"errors"
	"slices"
	"unicode/utf8"

	"golang.org/x/text/encoding/charmap"

	"vitess.io/vitess/go/mysql"
)

// TABLE_MAP_EVENT optional metadata fields (binlog_row_metadata=FULL; MySQL 8.0.1+, MariaDB 10.5+).
const (
	optColumnName    = 4  // the column names
	optSetStrValue   = 5  // SET columns' member names, in the column's character set
	optEnumStrValue  = 6  // ENUM columns' member names, likewise
	optEnumSetDefCS  = 10 // ENUM/SET columns' default collation, then (index, collation) of the others
	optEnumSetColsCS = 11 // ENUM/SET columns' collation, one per column
)

// optionalMeta reads the optional metadata fields a table map event carries, by type; empty when it carries
// none. vitess parses the event's fixed part but not these fields, so this walks the same layout:
//
//	table id (6, or 4 with an old post-header), flags (2), schema name (1 + n + NUL), table name (1 + n + NUL),
//	column count (length-encoded), types (count), metadata (length-encoded size + bytes),
//	null bitmap ((count+7)/8), then optional metadata fields: type (1), length (length-encoded), value.
func optionalMeta(ev mysql.BinlogEvent, f mysql.BinlogFormat) (map[byte][]byte, error) {
	data := ev.Bytes()[f.HeaderLength:]
	errShort := errors.New("table map event ends early")
	pos := 8
	if len(data) < pos+1 {
		return nil, errShort
	}
	for range 2 { // schema, then table name
		if pos >= len(data) {
			return nil, errShort
		}
		pos += 1 + int(data[pos]) + 1
	}
	n, pos, ok := lenEnc(data, pos)
	if !ok {
		return nil, errShort
	}
	pos += int(n)
	metaLen, pos, ok := lenEnc(data, pos)
	if !ok {
		return nil, errShort
	}
	pos += int(metaLen) + (int(n)+7)/8
	out := map[byte][]byte{}
	for pos < len(data) {
		typ := data[pos]
		l, next, ok := lenEnc(data, pos+1)
		if !ok || next+int(l) > len(data) {
			return nil, errShort
		}
		out[typ] = data[next : next+int(l)]
		pos = next + int(l)
	}
	return out, nil
}

// lenEncStrings reads a sequence of length-encoded strings.
func lenEncStrings(val []byte) ([]string, error) {
	var out []string
	for p := 0; p < len(val); {
		nl, np, ok := lenEnc(val, p)
		if !ok || np+int(nl) > len(val) {
			return nil, errors.New("table map metadata ends early")
		}
		out = append(out, string(val[np:np+int(nl)]))
		p = np + int(nl)
	}
	return out, nil
}

// columnNames are the column names of the table map's metadata; nil when it carries none
// (binlog_row_metadata is not FULL).
func columnNames(meta map[byte][]byte) ([]string, error) {
	val, ok := meta[optColumnName]
	if !ok {
		return nil, nil
	}
	return lenEncStrings(val)
}

// members are the ENUM (typ optEnumStrValue) or SET (optSetStrValue) columns' member names, one list per such
// column in column order, as the bytes the server stores them in (the column's character set): nil when the
// map carries none. Unlike information_schema, which shows members outside utf8mb3 (emoji) as '?', these are
// exact.
func members(meta map[byte][]byte, typ byte) ([][]string, error) {
	val, ok := meta[typ]
	if !ok {
		return nil, nil
	}
	var out [][]string
	for p := 0; p < len(val); {
		n, np, ok := lenEnc(val, p)
		if !ok {
			return nil, errors.New("table map enum/set metadata ends early")
		}
		p = np
		var ms []string
		for range n {
			l, lp, ok := lenEnc(val, p)
			if !ok || lp+int(l) > len(val) {
				return nil, errors.New("table map enum/set metadata ends early")
			}
			ms = append(ms, string(val[lp:lp+int(l)]))
			p = lp + int(l)
		}
		out = append(out, ms)
	}
	return out, nil
}

// enumSetCollations are the collation ids of the ENUM and SET columns (in column order, ENUM and SET alike),
// n of them; nil when the map says nothing.
func enumSetCollations(meta map[byte][]byte, n int) ([]uint64, error) {
	errShort := errors.New("table map enum/set charset metadata ends early")
	if val, ok := meta[optEnumSetColsCS]; ok {
		var out []uint64
		for p := 0; p < len(val); {
			c, np, ok := lenEnc(val, p)
			if !ok {
				return nil, errShort
			}
			out, p = append(out, c), np
		}
		return out, nil
	}
	val, ok := meta[optEnumSetDefCS]
	if !ok {
		return nil, nil
	}
	def, p, ok := lenEnc(val, 0)
	if !ok {
		return nil, errShort
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = def
	}
	for p < len(val) {
		i, np, ok := lenEnc(val, p)
		if !ok {
			return nil, errShort
		}
		c, np2, ok := lenEnc(val, np)
		if !ok {
			return nil, errShort
		}
		if int(i) < n {
			out[i] = c
		}
		p = np2
	}
	return out, nil
}

// lenEnc reads a length-encoded integer at pos: the value and the position after it.
func lenEnc(data []byte, pos int) (uint64, int, bool) {
	if pos >= len(data) {
		return 0, pos, false
	}
	switch b := data[pos]; {
	case b < 0xfb:
		return uint64(b), pos + 1, true
	case b == 0xfc && pos+3 <= len(data):
		return uint64(binary.LittleEndian.Uint16(data[pos+1:])), pos + 3, true
	case b == 0xfd && pos+4 <= len(data):
		return uint64(data[pos+1]) | uint64(data[pos+2])<<8 | uint64(data[pos+3])<<16, pos + 4, true
	case b == 0xfe && pos+9 <= len(data):
		return binary.LittleEndian.Uint64(data[pos+1:]), pos + 9, true
	}
	return 0, pos, false
}

// latin1Collations are the collation ids of MySQL's latin1 (which is Windows-1252).
var latin1Collations = map[uint64]bool{5: true, 8: true, 15: true, 31: true, 47: true, 48: true, 49: true, 94: true}

// useMembers gives t's ENUM and SET columns the member names the table map carries, as UTF-8: the catalog's
// (information_schema's COLUMN_TYPE) are utf8mb3 and show a 4-byte character as '?', so a streamed member '😀'
// arrived as '?' while the snapshot, which reads values as text, had it right. A list that cannot be read as
// UTF-8 (a character set other than latin1 or utf8) keeps the catalog's names.
func useMembers(t *Table, meta map[byte][]byte) error {
	enums, err := members(meta, optEnumStrValue)
	if err != nil {
		return err
	}
	sets, err := members(meta, optSetStrValue)
	if err != nil {
		return err
	}
	var idx []int // the ENUM and SET columns, in column order
	for i, c := range t.Columns {
		if c.Kind == KindEnum || c.Kind == KindSet {
			idx = append(idx, i)
		}
	}
	colls, err := enumSetCollations(meta, len(idx))
	if err != nil {
		return err
	}
	var e, st int
	for j, i := range idx {
		var ms []string
		if t.Columns[i].Kind == KindEnum {
			if e < len(enums) {
				ms = enums[e]
			}
			e++
		} else {
			if st < len(sets) {
				ms = sets[st]
			}
			st++
		}
		if ms == nil || len(ms) != len(t.Columns[i].Elems) {
			continue
		}
		if j < len(colls) && latin1Collations[colls[j]] {
			for k, m := range ms {
				if ms[k], err = charmap.Windows1252.NewDecoder().String(m); err != nil {
					return err
				}
			}
		}
		if !slices.ContainsFunc(ms, func(m string) bool { return !utf8.ValidString(m) }) {
			t.Columns[i].Elems = ms
		}
	}
	return nil
}

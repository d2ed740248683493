package source

import (
	"encoding/binary"
	"errors"

	"vitess.io/vitess/go/mysql"
)

// optColumnName is the TABLE_MAP_EVENT optional metadata field holding the column names
// (binlog_row_metadata=FULL; MySQL 8.0.1+, MariaDB 10.5+).
const optColumnName = 4

// columnNames reads the column names a table map event carries with binlog_row_metadata=FULL; nil when it
// carries none. vitess parses the event's fixed part but not these fields, so this walks the same layout:
//
//	table id (6, or 4 with an old post-header), flags (2), schema name (1 + n + NUL), table name (1 + n + NUL),
//	column count (length-encoded), types (count), metadata (length-encoded size + bytes),
//	null bitmap ((count+7)/8), then optional metadata fields: type (1), length (length-encoded), value.
func columnNames(ev mysql.BinlogEvent, f mysql.BinlogFormat) ([]string, error) {
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
	for pos < len(data) {
		typ := data[pos]
		l, next, ok := lenEnc(data, pos+1)
		if !ok || next+int(l) > len(data) {
			return nil, errShort
		}
		val := data[next : next+int(l)]
		pos = next + int(l)
		if typ != optColumnName {
			continue
		}
		var names []string
		for p := 0; p < len(val); {
			nl, np, ok := lenEnc(val, p)
			if !ok || np+int(nl) > len(val) {
				return nil, errShort
			}
			names = append(names, string(val[np:np+int(nl)]))
			p = np + int(nl)
		}
		return names, nil
	}
	return nil, nil
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

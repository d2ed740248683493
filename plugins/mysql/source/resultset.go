package source

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"

	"vitess.io/vitess/go/mysql"
	"vitess.io/vitess/go/mysql/sqlerror"
)

// resultSet reads the text-protocol result set of one query on a vitess connection itself: every packet goes
// into one buffer reused from row to row, and a row's cells are slices of it (nil for NULL), valid until the
// next row is read. Whoever keeps a cell copies it (appendValue copies what it appends; readTable copies the
// key).
//
// vitess's ExecuteStreamFetch/FetchNext do the same job at a cost the snapshot felt: ReadPacket allocates a
// fresh slice for every row and parseRow builds a []sqltypes.Value of which the snapshot reads only Raw(). On a
// profile of the 8M-row snapshot FetchNext was 36% of the plugin's CPU (makeslice 9.5%, parseRow 11%). Their
// state (the connection's unexported fields) is not touched here: the query goes out with WriteComQuery and
// every packet of the result is read from the connection's socket (GetRawConn, after whatever vitess's own
// reader already holds), so once the result is read to its end vitess finds the connection as after any
// finished query (its packet sequence is reset by the next command), and the next ExecuteFetch works. The
// server sends nothing after a result's last packet, so reading ahead cannot take the next command's bytes;
// that nothing was read past the end is checked anyway. A caller that stops before the end either drains the
// result (drain) or closes the connection.
//
// The socket is read through a buffer of readBuf bytes, not vitess's 16 KiB: a read(2) on this machine class
// costs several µs, and with 16 KiB reads they were a fifth of the plugin's CPU in the snapshot.
//
// The protocol (MySQL's "Text Resultset", MariaDB's "Result Set Packets"), after the 4-byte packet header:
//   - the first packet is OK (0x00: no result set), ERR (0xff), LOCAL INFILE (0xfb: refused), or the column
//     count as a length-encoded integer;
//   - one column definition packet per column (catalog, schema, table, org_table, name, org_name as
//     length-encoded strings, then fixed fields);
//   - an EOF packet (0xfe), unless the connection has CLIENT_DEPRECATE_EOF;
//   - one packet per row: each cell a length-encoded string, or 0xfb for NULL;
//   - the end: an EOF packet, or with CLIENT_DEPRECATE_EOF an OK packet with the EOF header 0xfe; or an ERR
//     packet, which may come after rows (the query was killed, or failed on a later row).
//
// A row starting with 0xfe is a first cell of 2^24 bytes or more (an 8-byte length), so the end is told apart
// as vitess's isEOFPacket does: without CLIENT_DEPRECATE_EOF an EOF packet is shorter than 9 bytes; with it
// the OK packet is never split, so it is shorter than 0xffffff bytes while such a row is longer. A packet of
// 0xffffff bytes continues in the next one (rows over 16 MiB: LONGBLOB, JSON); a continuation may be empty.
type resultSet struct {
	conn *mysql.Conn
	// in reads the result: pre (what vitess's reader held when the query went out), then the socket.
	in   *bufio.Reader
	pre  []byte
	preR bytes.Reader
	seq  uint8 // the sequence number of the next packet
	// buf holds the current packet. It is kept up to keepBuf bytes; a larger row (a big BLOB) gets a buffer
	// of its own, dropped at the next row, so one big row does not pin its size for the rest of the table.
	buf   []byte
	hdr   [mysql.PacketHeaderSize]byte
	cells [][]byte
	cols  int
	// open says rows (or the result's end) remain to be read.
	open bool
	// broken says the connection is somewhere in the middle of a packet or of a result: only Close fits.
	broken bool
}

const (
	// readBuf is the socket reader's buffer.
	readBuf = 256 << 10
	// startBuf is the packet buffer's first size: the snapshot's rows are mostly some hundred bytes.
	startBuf = 16 << 10
	// keepBuf is the largest packet buffer kept from one row to the next.
	keepBuf = 1 << 20
	// eofHeader starts an EOF packet, and the OK packet ending a result under CLIENT_DEPRECATE_EOF.
	eofHeader = 0xfe
	// nullCell is a NULL cell in a text-protocol row.
	nullCell = 0xfb
)

// start sends q on conn and reads the result set's head. names are the columns the query selects: the result
// must have as many, of these names (cheap, and a parser out of step with the server says so at once).
func (rs *resultSet) start(conn *mysql.Conn, q string, names []string) (err error) {
	defer func() {
		// As ExecuteStreamFetch's, the errors of the query's start name it ("… during query: SELECT …").
		var se *sqlerror.SQLError
		if errors.As(err, &se) {
			se.Query = q
		}
	}()
	if rs.open && rs.conn == conn {
		return sqlerror.NewSQLError(sqlerror.CRCommandsOutOfSync, sqlerror.SSUnknownSQLState, "a result set is still being read on this connection")
	}
	rs.conn, rs.cols, rs.broken = conn, 0, false
	if err = conn.WriteComQuery(q); err != nil {
		rs.broken = true
		return err
	}
	if err := rs.attach(); err != nil {
		return err
	}
	data, err := rs.read()
	if err != nil {
		return err
	}
	switch data[0] {
	case mysql.OKPacket:
		// The response is complete (a statement without rows): the connection is fine, the caller is not.
		return sqlerror.NewSQLErrorf(sqlerror.CRMalformedPacket, sqlerror.SSUnknownSQLState, "result set: the query returned none; want %d columns", len(names))
	case mysql.ErrPacket:
		return mysql.ParseErrorPacket(data)
	case nullCell:
		// LOCAL INFILE request: the server waits for a file we never send.
		rs.broken = true
		return sqlerror.NewSQLError(sqlerror.CRMalformedPacket, sqlerror.SSUnknownSQLState, "the server asked for a LOCAL INFILE")
	}
	n, pos, ok := lenEncInt(data, 0)
	if !ok || pos != len(data) {
		return rs.malformed("column count packet %x", data)
	}
	if int(n) != len(names) {
		return rs.malformed("the result has %d columns, the query selects %d", n, len(names))
	}
	rs.cols = int(n)
	for i := range rs.cols {
		def, err := rs.read()
		if err != nil {
			return err
		}
		name, err := columnName(def)
		if err != nil {
			return rs.malformed("column %d's definition: %v", i, err)
		}
		if string(name) != names[i] {
			return rs.malformed("column %d is %q, the query selects %q", i, name, names[i])
		}
	}
	if rs.conn.Capabilities&mysql.CapabilityClientDeprecateEOF == 0 {
		data, err := rs.read()
		if err != nil {
			return err
		}
		switch {
		case data[0] == mysql.ErrPacket:
			return mysql.ParseErrorPacket(data)
		case data[0] != eofHeader || len(data) >= 9:
			return rs.malformed("after the column definitions: packet %x, want EOF", data[:min(len(data), 16)])
		}
	}
	rs.open = true
	return nil
}

// next reads the next row: its cells, nil at the result's end. The cells are slices of the packet buffer (nil
// for NULL, empty but not nil for an empty string), valid until the next call; their capacity ends with them.
func (rs *resultSet) next() ([][]byte, error) {
	if !rs.open {
		return nil, nil
	}
	data, err := rs.read()
	if err != nil {
		rs.open = false
		return nil, err
	}
	switch {
	case data[0] == eofHeader && rs.isEnd(data):
		rs.open = false
		return nil, rs.ended()
	case data[0] == mysql.ErrPacket:
		// An ERR packet ends the result: nothing follows it.
		rs.open = false
		if err := rs.ended(); err != nil {
			return nil, err
		}
		return nil, mysql.ParseErrorPacket(data)
	}
	cells := rs.cells[:0]
	pos := 0
	for i := range rs.cols {
		if pos >= len(data) {
			return nil, rs.malformed("row of %d bytes ends before column %d of %d", len(data), i, rs.cols)
		}
		if data[pos] == nullCell {
			cells = append(cells, nil)
			pos++
			continue
		}
		l, p, ok := lenEncInt(data, pos)
		if !ok || l > uint64(len(data)-p) {
			return nil, rs.malformed("column %d of a row of %d bytes: bad length at byte %d", i, len(data), pos)
		}
		end := p + int(l)
		cells = append(cells, data[p:end:end])
		pos = end
	}
	if pos != len(data) {
		return nil, rs.malformed("row of %d bytes has %d bytes after its %d columns", len(data), len(data)-pos, rs.cols)
	}
	rs.cells = cells
	return cells, nil
}

// drain reads the rest of the result, so the connection can run the next query. It returns the error that
// ended the result, if any.
func (rs *resultSet) drain() error {
	for rs.open {
		if _, err := rs.next(); err != nil {
			return err
		}
	}
	if rs.broken {
		return sqlerror.NewSQLError(sqlerror.CRCommandsOutOfSync, sqlerror.SSUnknownSQLState, "the result set could not be read to its end: the connection is unusable")
	}
	return nil
}

// attach points the reader at the connection for a result that starts now.
func (rs *resultSet) attach() error {
	// vitess's reader holds nothing after a finished command (the server sends nothing unasked); take it anyway.
	rs.pre = rs.pre[:0]
	if n := rs.conn.Buffered(); n > 0 {
		rs.pre = slices.Grow(rs.pre, n)[:n]
		if err := rs.conn.ReadDataInto(rs.pre); err != nil {
			return rs.lost(err)
		}
	}
	rs.preR.Reset(rs.pre)
	src := io.MultiReader(&rs.preR, rs.conn.GetRawConn())
	if rs.in == nil {
		rs.in = bufio.NewReaderSize(src, readBuf)
	} else {
		rs.in.Reset(src)
	}
	rs.seq = 1 // the query was packet 0
	return nil
}

// ended checks, at the result's last packet, that nothing was read past it.
func (rs *resultSet) ended() error {
	if n := rs.in.Buffered() + rs.preR.Len(); n > 0 {
		return rs.malformed("%d bytes after the result's last packet", n)
	}
	return nil
}

// isEnd says an 0xfe packet ends the result (vitess's isEOFPacket).
func (rs *resultSet) isEnd(data []byte) bool {
	if rs.conn.Capabilities&mysql.CapabilityClientDeprecateEOF == 0 {
		return len(data) < 9
	}
	return len(data) < mysql.MaxPacketSize
}

// read reads one packet, joining the parts of one of 0xffffff bytes or more, into the buffer.
func (rs *resultSet) read() ([]byte, error) {
	if cap(rs.buf) > keepBuf || rs.buf == nil {
		rs.buf = make([]byte, 0, startBuf)
	}
	n := 0
	for {
		if _, err := io.ReadFull(rs.in, rs.hdr[:]); err != nil {
			return nil, rs.lost(fmt.Errorf("read packet header: %w", err))
		}
		l := int(uint32(rs.hdr[0]) | uint32(rs.hdr[1])<<8 | uint32(rs.hdr[2])<<16)
		if rs.hdr[3] != rs.seq {
			return nil, rs.malformed("packet sequence %d, want %d", rs.hdr[3], rs.seq)
		}
		rs.seq++
		if n+l > cap(rs.buf) {
			grown := make([]byte, n, max(n+l, 2*cap(rs.buf)))
			copy(grown, rs.buf[:n])
			rs.buf = grown
		}
		rs.buf = rs.buf[:n+l]
		if _, err := io.ReadFull(rs.in, rs.buf[n:n+l]); err != nil {
			return nil, rs.lost(fmt.Errorf("read packet of %d bytes: %w", l, err))
		}
		n += l
		if l < mysql.MaxPacketSize {
			break
		}
	}
	if n == 0 {
		return nil, rs.malformed("empty packet")
	}
	return rs.buf[:n], nil
}

// lost is a failed read as vitess reports it (CR_SERVER_LOST: config.Explain classifies it as transient). The
// connection is mid-packet: only Close fits.
func (rs *resultSet) lost(err error) error {
	rs.broken, rs.open = true, false
	return sqlerror.NewSQLErrorf(sqlerror.CRServerLost, sqlerror.SSUnknownSQLState, "%v", err)
}

// malformed is a packet this reader cannot follow; the result's remaining packets cannot be found either.
func (rs *resultSet) malformed(format string, args ...any) error {
	rs.broken, rs.open = true, false
	return sqlerror.NewSQLErrorf(sqlerror.CRMalformedPacket, sqlerror.SSUnknownSQLState, "result set: %s", fmt.Sprintf(format, args...))
}

// columnName is the name (the alias, if any) in a column definition packet: its fifth length-encoded string.
func columnName(def []byte) ([]byte, error) {
	pos := 0
	for i := range 5 {
		l, p, ok := lenEncInt(def, pos)
		if !ok || l > uint64(len(def)-p) {
			return nil, fmt.Errorf("bad length of string %d at byte %d", i, pos)
		}
		if i == 4 {
			return def[p : p+int(l)], nil
		}
		pos = p + int(l)
	}
	return nil, nil
}

// lenEncInt reads a length-encoded integer at pos: its value and the position after it.
func lenEncInt(data []byte, pos int) (uint64, int, bool) {
	if pos >= len(data) {
		return 0, 0, false
	}
	switch b := data[pos]; b {
	case 0xfc:
		if pos+3 > len(data) {
			return 0, 0, false
		}
		return uint64(data[pos+1]) | uint64(data[pos+2])<<8, pos + 3, true
	case 0xfd:
		if pos+4 > len(data) {
			return 0, 0, false
		}
		return uint64(data[pos+1]) | uint64(data[pos+2])<<8 | uint64(data[pos+3])<<16, pos + 4, true
	case 0xfe:
		if pos+9 > len(data) {
			return 0, 0, false
		}
		var v uint64
		for i := 8; i >= 1; i-- {
			v = v<<8 | uint64(data[pos+i])
		}
		return v, pos + 9, true
	case 0xfb, 0xff:
		return 0, 0, false
	default:
		return uint64(b), pos + 1, true
	}
}

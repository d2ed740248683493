package source

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// parseMessage decodes one pgoutput message (protocol 1) from the replication stream. The receive buffer
// is reused by the next read, so nothing returned points into wal.
//
// Row changes, nearly every message, are decoded here: one copy of the message holds every value, and a
// tuple is three allocations whatever its width. pglogrepl.Parse, used for the rest, allocates every
// column and every value on its own (about twenty allocations for a six-column row); allocation and the
// collections it caused were a sixth of the plugin's CPU while streaming (BENCHMARKS.md, 2026-12-04).
func parseMessage(wal []byte) (pglogrepl.Message, error) {
	if len(wal) == 0 {
		return nil, errors.New("empty message")
	}
	typ := pglogrepl.MessageType(wal[0])
	switch typ {
	case pglogrepl.MessageTypeInsert, pglogrepl.MessageTypeUpdate, pglogrepl.MessageTypeDelete:
		d := rowDecoder{src: bytes.Clone(wal[1:])}
		m, err := d.message(typ)
		if err != nil {
			return nil, fmt.Errorf("%s message: %w", typ, err)
		}
		return m, nil
	case pglogrepl.MessageTypeMessage:
		// pglogrepl keeps a logical decoding message's content in the buffer it was given.
		return pglogrepl.Parse(bytes.Clone(wal))
	default:
		return pglogrepl.Parse(wal)
	}
}

// rowDecoder reads an Insert, Update or Delete message (after its type byte) from its own copy of it.
type rowDecoder struct {
	src []byte
	off int
}

func (d *rowDecoder) message(typ pglogrepl.MessageType) (pglogrepl.Message, error) {
	rel, err := d.uint32()
	if err != nil {
		return nil, err
	}
	kind, err := d.byte()
	if err != nil {
		return nil, err
	}
	switch typ {
	case pglogrepl.MessageTypeInsert:
		if kind != 'N' {
			return nil, fmt.Errorf("tuple kind %q, want N", kind)
		}
		t, err := d.tuple()
		if err != nil {
			return nil, err
		}
		m := &pglogrepl.InsertMessage{RelationID: rel, Tuple: t}
		m.SetType(typ)
		return m, d.end()
	case pglogrepl.MessageTypeUpdate:
		m := &pglogrepl.UpdateMessage{RelationID: rel}
		m.SetType(typ)
		if kind == pglogrepl.UpdateMessageTupleTypeKey || kind == pglogrepl.UpdateMessageTupleTypeOld {
			m.OldTupleType = kind
			if m.OldTuple, err = d.tuple(); err != nil {
				return nil, err
			}
			if kind, err = d.byte(); err != nil {
				return nil, err
			}
		}
		if kind != pglogrepl.UpdateMessageTupleTypeNew {
			return nil, fmt.Errorf("tuple kind %q, want N", kind)
		}
		if m.NewTuple, err = d.tuple(); err != nil {
			return nil, err
		}
		return m, d.end()
	default: // Delete
		if kind != pglogrepl.DeleteMessageTupleTypeKey && kind != pglogrepl.DeleteMessageTupleTypeOld {
			return nil, fmt.Errorf("tuple kind %q, want K or O", kind)
		}
		m := &pglogrepl.DeleteMessage{RelationID: rel, OldTupleType: kind}
		m.SetType(typ)
		if m.OldTuple, err = d.tuple(); err != nil {
			return nil, err
		}
		return m, d.end()
	}
}

// tuple reads a TupleData: the column count, then per column its kind and, for text and binary values,
// a length and the value. Values are slices of the decoder's copy, capped so that appending to one copies.
func (d *rowDecoder) tuple() (*pglogrepl.TupleData, error) {
	if len(d.src)-d.off < 2 {
		return nil, errors.New("truncated tuple")
	}
	n := int(binary.BigEndian.Uint16(d.src[d.off:]))
	d.off += 2
	cols := make([]pglogrepl.TupleDataColumn, n)
	t := &pglogrepl.TupleData{ColumnNum: uint16(n), Columns: make([]*pglogrepl.TupleDataColumn, n)}
	for i := range cols {
		c := &cols[i]
		t.Columns[i] = c
		var err error
		if c.DataType, err = d.byte(); err != nil {
			return nil, err
		}
		switch c.DataType {
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			if c.Length, err = d.uint32(); err != nil {
				return nil, err
			}
			if uint64(c.Length) > uint64(len(d.src)-d.off) {
				return nil, fmt.Errorf("column %d: value of %d bytes, %d left", i, c.Length, len(d.src)-d.off)
			}
			end := d.off + int(c.Length)
			c.Data = d.src[d.off:end:end]
			d.off = end
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast:
		default:
			return nil, fmt.Errorf("column %d: unknown kind %q", i, c.DataType)
		}
	}
	return t, nil
}

func (d *rowDecoder) byte() (byte, error) {
	if d.off >= len(d.src) {
		return 0, errors.New("truncated message")
	}
	b := d.src[d.off]
	d.off++
	return b, nil
}

func (d *rowDecoder) uint32() (uint32, error) {
	if len(d.src)-d.off < 4 {
		return 0, errors.New("truncated message")
	}
	v := binary.BigEndian.Uint32(d.src[d.off:])
	d.off += 4
	return v, nil
}

// end refuses bytes after the message: a misread would otherwise pass silently.
func (d *rowDecoder) end() error {
	if d.off != len(d.src) {
		return fmt.Errorf("%d bytes after the message", len(d.src)-d.off)
	}
	return nil
}

// lsnText is lsn.String() (%X/%X) without fmt: it is the position of every streamed row, and fmt's
// formatting and boxing were 2% of the plugin's CPU.
func lsnText(lsn pglogrepl.LSN) string {
	const digits = "0123456789ABCDEF"
	var buf [17]byte
	i := len(buf)
	put := func(v uint32) {
		for {
			i--
			buf[i] = digits[v&0xF]
			v >>= 4
			if v == 0 {
				return
			}
		}
	}
	put(uint32(lsn))
	i--
	buf[i] = '/'
	put(uint32(lsn >> 32))
	return string(buf[i:])
}

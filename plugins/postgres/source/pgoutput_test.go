package source

import (
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/jackc/pglogrepl"
)

// tupleBytes encodes a TupleData as pgoutput sends it: nil is NULL, "\x00toast" an unchanged TOAST value,
// anything else a text value.
func tupleBytes(vals ...*string) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(vals)))
	for _, v := range vals {
		switch {
		case v == nil:
			b = append(b, 'n')
		case *v == "\x00toast":
			b = append(b, 'u')
		default:
			b = append(b, 't')
			b = binary.BigEndian.AppendUint32(b, uint32(len(*v)))
			b = append(b, *v...)
		}
	}
	return b
}

func str(s string) *string { return &s }

func rowMessage(typ byte, rel uint32, parts ...[]byte) []byte {
	b := binary.BigEndian.AppendUint32([]byte{typ}, rel)
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// TestParseMessageMatchesPglogrepl holds the row decoder to pglogrepl's, message by message, and checks that
// what it returns does not share the receive buffer.
func TestParseMessageMatchesPglogrepl(t *testing.T) {
	full := tupleBytes(str("42"), nil, str("\x00toast"), str(""), str(`{"a": "é"}`))
	key := tupleBytes(str("41"), nil, nil, nil, nil)
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"insert", rowMessage('I', 16384, []byte{'N'}, full)},
		{"update", rowMessage('U', 16384, []byte{'N'}, full)},
		{"update with key", rowMessage('U', 16384, []byte{'K'}, key, []byte{'N'}, full)},
		{"update with old row", rowMessage('U', 16384, []byte{'O'}, full, []byte{'N'}, full)},
		{"delete by key", rowMessage('D', 16384, []byte{'K'}, key)},
		{"delete of old row", rowMessage('D', 16384, []byte{'O'}, full)},
		// Begin: final LSN, commit time, xid.
		{"begin", binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64([]byte{'B'}, 0x16B3748), 0), 7)},
		// Logical decoding message: flags, LSN, prefix, content length, content.
		{"logical decoding message", append(binary.BigEndian.AppendUint32(append(binary.BigEndian.AppendUint64([]byte{'M', 1}, 0x16B3748), "prefix\x00"...), 3), "abc"...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := pglogrepl.Parse(append([]byte(nil), tc.msg...))
			if err != nil {
				t.Fatalf("pglogrepl: %v", err)
			}
			buf := append([]byte(nil), tc.msg...)
			got, err := parseMessage(buf)
			if err != nil {
				t.Fatalf("parseMessage: %v", err)
			}
			for i := range buf {
				buf[i] = 0xFF // the next read reuses the buffer
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("parseMessage:\n%#v\npglogrepl:\n%#v", got, want)
			}
		})
	}
}

func TestParseMessageRefusesMalformedRows(t *testing.T) {
	full := tupleBytes(str("42"), str("x"))
	good := rowMessage('I', 1, []byte{'N'}, full)
	if _, err := parseMessage(good); err != nil {
		t.Fatalf("the well-formed message: %v", err)
	}
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"empty", nil},
		{"truncated value", good[:len(good)-1]},
		{"truncated length", good[:len(good)-4]},
		{"no tuple", good[:6]},
		{"no relation", good[:3]},
		{"bytes after", append(append([]byte(nil), good...), 0)},
		{"value longer than the message", rowMessage('I', 1, []byte{'N'}, []byte{0, 1, 't', 0xFF, 0xFF, 0xFF, 0xFF, 'a'})},
		{"unknown column kind", rowMessage('I', 1, []byte{'N'}, []byte{0, 1, 'z'})},
		{"insert of old row", rowMessage('I', 1, []byte{'O'}, full)},
		{"update without new row", rowMessage('U', 1, []byte{'K'}, full)},
		{"delete without key", rowMessage('D', 1, []byte{'N'}, full)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if m, err := parseMessage(tc.msg); err == nil {
				t.Fatalf("accepted: %#v", m)
			}
		})
	}
}

func TestLSNText(t *testing.T) {
	for _, lsn := range []pglogrepl.LSN{0, 1, 0xF, 0x10, 0x16B3748, 0xABCDEF, 1 << 32, 0x1_0000_0001, 0xDEADBEEF_CAFEBABE, ^pglogrepl.LSN(0)} {
		if got, want := lsnText(lsn), lsn.String(); got != want {
			t.Errorf("lsnText(%d) = %s, want %s", uint64(lsn), got, want)
		}
	}
}

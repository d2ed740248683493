package infer

import (
	"fmt"
	"strings"
)

// Error is a record that cannot be taken: a type conflict under [Reject], a value a schema cannot hold, a
// reserved or unknown field.
type Error struct {
	// Record is the index of the record in the input (-1 when the error is about schemas, not a record).
	Record int
	// Path is the RFC 6901 JSON pointer of the value within the record ("" for the whole record).
	Path string
	// Reason says what is wrong.
	Reason string
}

func (e *Error) Error() string {
	switch {
	case e.Record < 0:
		return fmt.Sprintf("field %s: %s", e.Path, e.Reason)
	case e.Path == "":
		return fmt.Sprintf("record %d: %s", e.Record, e.Reason)
	}
	return fmt.Sprintf("record %d, field %s: %s", e.Record, e.Path, e.Reason)
}

// Pointer returns the RFC 6901 JSON pointer of a path of object keys and array indexes.
func Pointer(path []string) string {
	var b strings.Builder
	for _, p := range path {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(p))
	}
	return b.String()
}

package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/infer"
)

// requestError is what a client gets back: a status and a JSON body naming what is wrong.
type requestError struct {
	Status int    `json:"-"`
	Msg    string `json:"error"`
	Record *int   `json:"record,omitempty"` // index of the record in the body, from 0
	Field  string `json:"field,omitempty"`  // JSON pointer within the record
	Line   int    `json:"line,omitempty"`   // line of the body, from 1
}

func (e *requestError) Error() string { return e.Msg }

func badRequest(format string, args ...any) *requestError {
	return &requestError{Status: http.StatusBadRequest, Msg: fmt.Sprintf(format, args...)}
}

func intp(i int) *int { return &i }

type format int

const (
	formatJSON   format = iota // one object or an array of objects
	formatNDJSON               // one object per line
)

// decodeRecords parses a body into records, decoding numbers as json.Number.
func decodeRecords(body []byte, f format) ([]map[string]any, *requestError) {
	if f == formatNDJSON {
		return decodeNDJSON(body)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, badRequest("empty body: send a JSON object or an array of objects")
		}
		return nil, syntaxError(body, 0, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		e := badRequest("unexpected data after the JSON value (several objects? send an array, or NDJSON as application/x-ndjson)")
		e.Line = lineOf(body, dec.InputOffset())
		return nil, e
	}
	switch v := v.(type) {
	case map[string]any:
		return []map[string]any{v}, nil
	case []any:
		recs := make([]map[string]any, len(v))
		for i, x := range v {
			m, ok := x.(map[string]any)
			if !ok {
				return nil, &requestError{Status: http.StatusBadRequest, Record: intp(i), Msg: fmt.Sprintf("record %d is %s, not a JSON object", i, kindOf(x))}
			}
			recs[i] = m
		}
		return recs, nil
	}
	return nil, badRequest("the body is %s; send a JSON object or an array of objects", kindOf(v))
}

func decodeNDJSON(body []byte) ([]map[string]any, *requestError) {
	var recs []map[string]any
	line := 0
	for len(body) > 0 {
		line++
		var ln []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			ln, body = body[:i], body[i+1:]
		} else {
			ln, body = body, nil
		}
		if len(bytes.TrimSpace(ln)) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(ln))
		dec.UseNumber()
		var v any
		err := dec.Decode(&v)
		if err == nil {
			if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
				err = errors.New("unexpected data after the JSON value")
			}
		}
		if err != nil {
			e := syntaxError(ln, line-1, err)
			e.Msg = fmt.Sprintf("line %d: %s", line, e.Msg)
			e.Record = intp(len(recs))
			return nil, e
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, &requestError{Status: http.StatusBadRequest, Line: line, Record: intp(len(recs)), Msg: fmt.Sprintf("line %d is %s, not a JSON object", line, kindOf(v))}
		}
		recs = append(recs, m)
	}
	return recs, nil
}

// syntaxError says where JSON went wrong; lines before the data are added to the line number.
func syntaxError(data []byte, linesBefore int, err error) *requestError {
	e := badRequest("malformed JSON: %v", err)
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		e.Line = linesBefore + lineOf(data, se.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		e.Line = linesBefore + lineOf(data, int64(len(data)))
	default:
		e.Line = linesBefore + 1
	}
	return e
}

func lineOf(data []byte, offset int64) int {
	offset = min(max(offset, 0), int64(len(data)))
	return 1 + bytes.Count(data[:offset], []byte{'\n'})
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	}
	return "an object"
}

// row is a record ready for inference and building.
type row struct {
	op    change.Op
	value map[string]any // a delete keeps only its key fields
}

// toRows applies the _op convention and checks the key of every record.
func toRows(recs []map[string]any, keys []string) ([]row, *requestError) {
	rows := make([]row, len(recs))
	for i, r := range recs {
		fail := func(field, format string, args ...any) *requestError {
			return &requestError{Status: http.StatusUnprocessableEntity, Record: intp(i), Field: field, Msg: fmt.Sprintf("record %d, field %s: %s", i, field, fmt.Sprintf(format, args...))}
		}
		// With a key the record is the row's new state whether or not the row exists: an upsert, which the
		// protocol spells as an update (a destination replaces the row with that key, or creates it). Without a
		// key every record is a new row.
		op := change.OpInsert
		if len(keys) > 0 {
			op = change.OpUpdate
		}
		if v, ok := r[opField]; ok {
			switch v {
			case nil, "upsert", "insert":
			case "delete":
				op = change.OpDelete
			default:
				return nil, fail("/"+opField, `%s must be "upsert" (the default) or "delete", got %s`, opField, describeValue(v))
			}
			delete(r, opField)
		}
		if op == change.OpDelete && len(keys) == 0 {
			return nil, fail("/"+opField, "a delete needs the stream's primary_key to say which row goes")
		}
		for _, k := range keys {
			p := infer.Pointer([]string{k})
			switch v := r[k].(type) {
			case nil:
				return nil, fail(p, "the primary key is missing or null")
			case map[string]any, []any:
				return nil, fail(p, "a primary key must be a string, number or boolean, got %s", kindOf(v))
			}
		}
		if op == change.OpDelete {
			key := make(map[string]any, len(keys))
			for _, k := range keys {
				key[k] = r[k]
			}
			r = key
		}
		rows[i] = row{op: op, value: r}
	}
	return rows, nil
}

func describeValue(v any) string {
	if s, ok := v.(string); ok {
		if len(s) > 40 {
			s = s[:40] + "…"
		}
		return fmt.Sprintf("%q", s)
	}
	return kindOf(v)
}

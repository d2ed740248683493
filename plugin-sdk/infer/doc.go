// Package infer derives Arrow schemas from JSON records, evolves them as new records arrive, and builds change
// batches (package change) from records against a schema. Any source whose data carries no schema (an HTTP
// push endpoint, a queue of JSON messages, files of NDJSON) can use it.
//
// Records are what encoding/json decodes into map[string]any with Decoder.UseNumber, so that integers and
// floats stay apart. Values may be nil, bool, string, json.Number, map[string]any and []any; float64, int and
// int64 are accepted too (a float64 is always a float).
//
// # Types
//
//	JSON value                                        Arrow type
//	true / false                                      bool
//	number without fraction or exponent, fits int64   int64
//	number with a fraction or an exponent             float64 (IEEE-754 double: 0.1 is stored as float64(0.1))
//	integer beyond int64, number beyond float64       utf8, the number's text exactly (nothing is rounded away)
//	string in RFC 3339 date-time form, at most 6      timestamp[us, tz=UTC] (the instant; the offset written in
//	  fraction digits ("2026-03-01T10:00:00.5+02:00")   the string is not kept)
//	other string                                      utf8
//	object                                            struct, one child per key
//	array                                             list<item>, the item type joins every element
//	null, or a field never seen with a value          utf8 marked null-only (see below), nullable
//
// Every inferred field is nullable: a record that omits a field, or has null there, is a null.
//
// A field seen only as null is kept, as a nullable utf8 whose field metadata has [MetaKey] = "null". It
// holds only nulls. When a value of a real type arrives, the field takes that type: the only change of a
// column's type that is not a widening, and harmless because the column has never held a value.
//
// # Field order
//
// Fields keep the order in which they first appeared; the keys of one object (a Go map has no order) that
// are all new are added in byte order of their names. New fields, at the top level or inside structs, are
// always appended after the existing ones.
//
// # Widening
//
// When a field meets a value of another type, the field's type is widened to one that holds both:
//
//	null-only + T            T
//	int64 + float64          float64, unless the field has held an integer beyond ±2^53, which float64
//	                         would round: that is a conflict (below). Such a field carries the metadata
//	                         [MetaKey] = "int-beyond-2^53" so the rule holds across calls.
//	timestamp + utf8         utf8 (both are JSON strings; the timestamps keep their text)
//	struct + struct          struct with the union of the children, each child joined recursively
//	list + list              list of the joined item types
//	anything else            a conflict
//
// A conflict is resolved by the [Conflict] policy: [WidenToString] makes the field utf8 and stores every value
// as text (a string as itself, a number as its JSON text, a boolean as true/false, an object or array as its
// compact JSON); [Reject] fails with an [*Error] naming the record index and the JSON pointer of the value.
// No value and no field is ever dropped: a field never narrows and never disappears.
//
// A non-nullable field (a primary key set by the caller) that meets a null, or a record without it, becomes
// nullable.
//
// # Limits
//
// Objects and arrays nest at most [MaxDepth] levels, the record itself counted. Top-level names starting with change.ReservedPrefix
// ("_skippr_") are refused: they belong to the change protocol. A field of a current schema must have one of
// the types above (and timestamps exactly timestamp[us, UTC]); anything else is an error, since this package
// could not build values for it.
//
// # Errors
//
// Every error about a record is an [*Error] carrying the record's index in the input and the RFC 6901 JSON
// pointer of the value ("/address/city", "/tags/3"), so a caller can tell its client exactly what is wrong.
package infer

// Package typemap maps PostgreSQL column types to Arrow types and back. The stream decodes the text that
// pgoutput sends; the snapshot reads most columns in binary (binary.go), held to the same Arrow values as the
// text decoders by TestBinaryMatchesText; the destination encodes Arrow values as text for COPY, leaving the
// parsing to the server's input functions. plugins/postgres/README.md has the mapping table; Kind is its one
// definition.
//
// Text forms depend on session settings; both the source's sessions and the destination's set them
// (SessionParams) so that every value is unambiguous: ISO dates, ISO 8601 intervals, UTC, hex bytea, and
// shortest-exact floats.
package typemap

import (
	"context"
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/jackc/pgx/v5"
)

// SessionParams are the run-time parameters every connection sets so text forms are what this package parses.
var SessionParams = map[string]string{
	"DateStyle":          "ISO, YMD",
	"IntervalStyle":      "iso_8601",
	"TimeZone":           "UTC",
	"extra_float_digits": "3",
	"bytea_output":       "hex",
	"client_encoding":    "UTF8",
}

// Kind says how a column's value is represented in Arrow.
type Kind int

const (
	KindString      Kind = iota // utf8: the type's text form (text, varchar, json, enums, and any type without a mapping)
	KindBool                    // bool
	KindInt16                   // int2
	KindInt32                   // int4
	KindInt64                   // int8, oid
	KindFloat32                 // float4
	KindFloat64                 // float8
	KindDecimal                 // numeric(p,s), p <= 38, 0 <= s <= p: decimal128(p,s)
	KindBytes                   // bytea: binary
	KindUUID                    // uuid: fixed_size_binary(16) marked as the arrow.uuid extension
	KindDate                    // date: date32
	KindTime                    // time: time64[us]
	KindTimestamp               // timestamp: timestamp[us]
	KindTimestampTZ             // timestamptz: timestamp[us, UTC]
	KindInterval                // interval: month_day_nano_interval
	KindList                    // one-dimensional array: list<element>
)

// Field metadata keys.
const (
	// MetaType holds the column's PostgreSQL type (format_type), so a PostgreSQL destination can recreate
	// json, jsonb, varchar(n), enums... instead of text when the type exists there.
	MetaType = "postgres.type"
	// extensionName and extensionMeta mark a field as an Arrow extension type on the wire without importing the
	// extension's implementation: a reader that knows arrow.uuid sees a UUID array, any other sees the storage.
	extensionName = "ARROW:extension:name"
	extensionMeta = "ARROW:extension:metadata"
	uuidExtension = "arrow.uuid"
)

// Well-known type OIDs (pg_type.dat); anything else is looked up in the catalog.
const (
	oidBool        = 16
	oidBytea       = 17
	oidInt8        = 20
	oidInt2        = 21
	oidInt2Vector  = 22
	oidInt4        = 23
	oidOID         = 26
	oidOIDVector   = 30
	oidFloat4      = 700
	oidFloat8      = 701
	oidDate        = 1082
	oidTime        = 1083
	oidTimestamp   = 1114
	oidTimestampTZ = 1184
	oidInterval    = 1186
	oidNumeric     = 1700
	oidUUID        = 2950
)

// Type is a resolved column type.
type Type struct {
	OID    uint32
	Typmod int32
	// Name is what format_type says, with domains replaced by their base type (a destination has no domains).
	Name             string
	Kind             Kind
	Precision, Scale int32 // KindDecimal
	Elem             *Type // KindList
}

// Arrow is the column's Arrow type.
func (t *Type) Arrow() arrow.DataType {
	switch t.Kind {
	case KindBool:
		return arrow.FixedWidthTypes.Boolean
	case KindInt16:
		return arrow.PrimitiveTypes.Int16
	case KindInt32:
		return arrow.PrimitiveTypes.Int32
	case KindInt64:
		return arrow.PrimitiveTypes.Int64
	case KindFloat32:
		return arrow.PrimitiveTypes.Float32
	case KindFloat64:
		return arrow.PrimitiveTypes.Float64
	case KindDecimal:
		return &arrow.Decimal128Type{Precision: t.Precision, Scale: t.Scale}
	case KindBytes:
		return arrow.BinaryTypes.Binary
	case KindUUID:
		return &arrow.FixedSizeBinaryType{ByteWidth: 16}
	case KindDate:
		return arrow.FixedWidthTypes.Date32
	case KindTime:
		return arrow.FixedWidthTypes.Time64us
	case KindTimestamp:
		return &arrow.TimestampType{Unit: arrow.Microsecond}
	case KindTimestampTZ:
		return &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	case KindInterval:
		return arrow.FixedWidthTypes.MonthDayNanoInterval
	case KindList:
		return arrow.ListOfField(elemField(t.Elem))
	}
	return arrow.BinaryTypes.String
}

func elemField(t *Type) arrow.Field {
	f := arrow.Field{Name: "element", Type: t.Arrow(), Nullable: true}
	if t.Kind == KindUUID {
		md := arrow.NewMetadata([]string{extensionName, extensionMeta}, []string{uuidExtension, ""})
		f.Metadata = md
	}
	return f
}

// Field is the Arrow field of a column of type t. Every field is nullable: pgoutput does not say which
// columns are NOT NULL, and the snapshot's schema must equal the stream's.
func Field(name string, t *Type) arrow.Field {
	keys, vals := []string{MetaType}, []string{t.Name}
	if t.Kind == KindUUID {
		keys, vals = append(keys, extensionName, extensionMeta), append(vals, uuidExtension, "")
	}
	return arrow.Field{Name: name, Type: t.Arrow(), Nullable: true, Metadata: arrow.NewMetadata(keys, vals)}
}

// IsUUID says whether an Arrow field carries UUIDs: the arrow.uuid extension, registered or not.
func IsUUID(f arrow.Field) bool {
	if ext, ok := f.Type.(arrow.ExtensionType); ok {
		return ext.ExtensionName() == uuidExtension
	}
	v, ok := f.Metadata.GetValue(extensionName)
	return ok && v == uuidExtension
}

// Querier runs catalog queries (a *pgx.Conn or a *pgxpool.Pool).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Resolver resolves type OIDs with the catalog, caching the answers. Safe for concurrent use.
type Resolver struct {
	mu    sync.Mutex
	cache map[[2]int64]*Type
}

// NewResolver returns an empty resolver.
func NewResolver() *Resolver { return &Resolver{cache: map[[2]int64]*Type{}} }

// Forget drops cached answers, after a Type or Relation message said a type may have changed.
func (r *Resolver) Forget() {
	r.mu.Lock()
	r.cache = map[[2]int64]*Type{}
	r.mu.Unlock()
}

// Resolve returns the type of a column with type oid and modifier typmod.
func (r *Resolver) Resolve(ctx context.Context, q Querier, oid uint32, typmod int32) (*Type, error) {
	return r.cached(oid, typmod, func() (*Type, error) { return r.resolve(ctx, q, oid, typmod, 0) })
}

// cached returns the cached type of (oid, typmod), or resolves it with load and caches the answer.
func (r *Resolver) cached(oid uint32, typmod int32, load func() (*Type, error)) (*Type, error) {
	key := [2]int64{int64(oid), int64(typmod)}
	r.mu.Lock()
	t, ok := r.cache[key]
	r.mu.Unlock()
	if ok {
		return t, nil
	}
	t, err := load()
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.cache[key] = t
	r.mu.Unlock()
	return t, nil
}

// TypeRow is a pg_type row as resolving needs it. TypeRowSQL selects it for a type t (pg_type) and a modifier.
type TypeRow struct {
	Typtype    string
	Base, Elem uint32
	BaseMod    int32
	Delim      string
	IsArray    bool
	Name       string // format_type with the modifier
}

// TypeRowSQL selects a TypeRow's fields, in order, from pg_type t with modifier typmod (an SQL expression).
func TypeRowSQL(typmod string) string {
	return `t.typtype::text, t.typbasetype, t.typtypmod, t.typelem, t.typdelim::text,
		       t.typsubscript = 'array_subscript_handler'::regproc AND t.typelem <> 0,
		       format_type(t.oid, ` + typmod + `)`
}

// Scan targets: the TypeRow's fields in TypeRowSQL's order.
func (tr *TypeRow) Scan() []any {
	return []any{&tr.Typtype, &tr.Base, &tr.BaseMod, &tr.Elem, &tr.Delim, &tr.IsArray, &tr.Name}
}

// ResolveRow is Resolve for a type whose pg_type row was read already (with a table's columns, in the same
// round trip): a base type costs no query; a domain or an array looks up the types it is made of.
func (r *Resolver) ResolveRow(ctx context.Context, q Querier, oid uint32, typmod int32, row TypeRow) (*Type, error) {
	return r.cached(oid, typmod, func() (*Type, error) { return r.fromRow(ctx, q, oid, typmod, 0, row) })
}

func (r *Resolver) resolve(ctx context.Context, q Querier, oid uint32, typmod int32, depth int) (*Type, error) {
	if depth > 10 {
		return nil, fmt.Errorf("type %d: domain or array nesting too deep", oid)
	}
	var row TypeRow
	err := q.QueryRow(ctx, `SELECT `+TypeRowSQL("$2")+` FROM pg_type t WHERE t.oid = $1`, oid, typmod).Scan(row.Scan()...)
	if err != nil {
		return nil, fmt.Errorf("look up type %d in pg_type: %w", oid, err)
	}
	return r.fromRow(ctx, q, oid, typmod, depth, row)
}

func (r *Resolver) fromRow(ctx context.Context, q Querier, oid uint32, typmod int32, depth int, row TypeRow) (*Type, error) {
	if row.Typtype == "d" {
		// A domain is its base type; the domain's own modifier applies when the column has none.
		if typmod == -1 {
			typmod = row.BaseMod
		}
		return r.resolve(ctx, q, row.Base, typmod, depth+1)
	}
	t := &Type{OID: oid, Typmod: typmod, Name: row.Name}
	if row.IsArray && oid != oidInt2Vector && oid != oidOIDVector && row.Delim == "," {
		et, err := r.resolve(ctx, q, row.Elem, typmod, depth+1)
		if err != nil {
			return nil, err
		}
		if et.Kind == KindList {
			// An array of a domain over an array: keep its text form.
			return t, nil
		}
		t.Kind, t.Elem, t.Name = KindList, et, et.Name+"[]"
		return t, nil
	}
	t.Kind, t.Precision, t.Scale = kindOf(oid, typmod)
	return t, nil
}

// kindOf maps a base type OID.
func kindOf(oid uint32, typmod int32) (Kind, int32, int32) {
	switch oid {
	case oidBool:
		return KindBool, 0, 0
	case oidBytea:
		return KindBytes, 0, 0
	case oidInt2:
		return KindInt16, 0, 0
	case oidInt4:
		return KindInt32, 0, 0
	case oidInt8, oidOID:
		return KindInt64, 0, 0
	case oidFloat4:
		return KindFloat32, 0, 0
	case oidFloat8:
		return KindFloat64, 0, 0
	case oidNumeric:
		if typmod < 4 {
			return KindString, 0, 0 // unconstrained: any scale, NaN and ±Infinity
		}
		p := int32(((typmod - 4) >> 16) & 0xffff)
		s := int32((((typmod - 4) & 0x7ff) ^ 1024) - 1024) // PostgreSQL 15 allows negative scales
		if p < 1 || p > 38 || s < 0 || s > p {
			return KindString, 0, 0
		}
		return KindDecimal, p, s
	case oidUUID:
		return KindUUID, 0, 0
	case oidDate:
		return KindDate, 0, 0
	case oidTime:
		return KindTime, 0, 0
	case oidTimestamp:
		return KindTimestamp, 0, 0
	case oidTimestampTZ:
		return KindTimestampTZ, 0, 0
	case oidInterval:
		return KindInterval, 0, 0
	}
	return KindString, 0, 0
}

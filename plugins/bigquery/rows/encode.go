package rows

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"cloud.google.com/go/bigquery"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/bigquery/gsql"
)

// OpColumn is the staging table's last column: the row's change op (change.Op), which the MERGE reads.
const OpColumn = "_skippr_op"

// OrdColumn follows OpColumn: the row's place in its staging table (its write-stream offset). A staging table
// gathers the entries of a coalesced range one by one, so a key can have a row from each; the MERGE takes the
// one with the highest OrdColumn.
const OrdColumn = "_skippr_ord"

// StageName is the staging table's name of data column i. Staging columns are positional, so any column name
// the target allows (spaces, dashes, non-ASCII) works without a protobuf field name that must spell it.
func StageName(i int) string { return "c" + strconv.Itoa(i) }

// StageSchema is the staging table of a batch whose data columns have the target types cols: c0…cN-1 and
// the op and the ordinal.
func StageSchema(cols []*bigquery.FieldSchema) bigquery.Schema {
	out := make(bigquery.Schema, 0, len(cols)+1)
	for i, c := range cols {
		s := *c
		s.Name = StageName(i)
		s.Required = false
		out = append(out, &s)
	}
	return append(out, &bigquery.FieldSchema{Name: OpColumn, Type: Int64, Required: true},
		&bigquery.FieldSchema{Name: OrdColumn, Type: Int64, Required: true})
}

// StageMetaSchema is StageSchema with the metadata columns after the ordinal (gsql.PosColumn …
// gsql.SeqColumn), for a stream with soft_delete, metadata_columns or history: Encoder.AppendMeta's rows.
func StageMetaSchema(cols []*bigquery.FieldSchema) bigquery.Schema {
	return append(StageSchema(cols),
		&bigquery.FieldSchema{Name: gsql.PosColumn, Type: Int64, Required: true},
		&bigquery.FieldSchema{Name: gsql.CommittedColumn, Type: Timestamp},
		&bigquery.FieldSchema{Name: gsql.OpNameColumn, Type: String, Required: true},
		&bigquery.FieldSchema{Name: gsql.DelColumn, Type: Bool, Required: true},
		&bigquery.FieldSchema{Name: gsql.ValsColumn, Type: Bool, Required: true},
		&bigquery.FieldSchema{Name: gsql.SeqColumn, Type: Int64, Required: true})
}

// Meta is a staged row's metadata (StageMetaSchema).
type Meta struct {
	Position  int64
	Committed time.Time // zero: unknown (NULL)
	OpName    string
	Deleted   bool
	Vals      bool
	Seq       int64
}

// AppendMeta is Append with the row's metadata, for a staging table of StageMetaSchema.
func (e *Encoder) AppendMeta(buf []byte, rec arrow.RecordBatch, i int, op int8, ord int64, m Meta) ([]byte, error) {
	buf, err := e.Append(buf, rec, i, op, ord)
	if err != nil {
		return buf, err
	}
	n := protowire.Number(len(e.cols) + 2)
	varint := func(num protowire.Number, v uint64) {
		buf = protowire.AppendVarint(protowire.AppendTag(buf, num, protowire.VarintType), v)
	}
	flag := func(b bool) uint64 {
		if b {
			return 1
		}
		return 0
	}
	varint(n+1, uint64(m.Position))
	if !m.Committed.IsZero() {
		varint(n+2, uint64(m.Committed.UnixMicro()))
	}
	buf = appendString(buf, n+3, m.OpName)
	varint(n+4, flag(m.Deleted))
	varint(n+5, flag(m.Vals))
	varint(n+6, uint64(m.Seq))
	return buf, nil
}

// Descriptor is the self-contained proto2 message description of a staging schema, as the Storage Write API
// wants it: field n+1 is column n, STRUCT columns are messages nested in the root.
func Descriptor(s bigquery.Schema) *descriptorpb.DescriptorProto {
	root := &descriptorpb.DescriptorProto{Name: proto.String("Row")}
	root.Field = describeFields(root, s)
	return root
}

func describeFields(root *descriptorpb.DescriptorProto, s bigquery.Schema) []*descriptorpb.FieldDescriptorProto {
	out := make([]*descriptorpb.FieldDescriptorProto, len(s))
	for i, c := range s {
		fd := &descriptorpb.FieldDescriptorProto{
			Name:   proto.String(c.Name),
			Number: proto.Int32(int32(i + 1)),
			Label:  descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
		}
		switch {
		case c.Repeated:
			fd.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
		case c.Required:
			fd.Label = descriptorpb.FieldDescriptorProto_LABEL_REQUIRED.Enum()
		}
		switch Canonical(c.Type) {
		case Int64, Timestamp:
			fd.Type = descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum()
		case Float64:
			fd.Type = descriptorpb.FieldDescriptorProto_TYPE_DOUBLE.Enum()
		case Bool:
			fd.Type = descriptorpb.FieldDescriptorProto_TYPE_BOOL.Enum()
		case Bytes:
			fd.Type = descriptorpb.FieldDescriptorProto_TYPE_BYTES.Enum()
		case Date:
			fd.Type = descriptorpb.FieldDescriptorProto_TYPE_INT32.Enum()
		case Struct:
			name := fmt.Sprintf("S%d", len(root.NestedType)+1)
			nested := &descriptorpb.DescriptorProto{Name: proto.String(name)}
			root.NestedType = append(root.NestedType, nested)
			nested.Field = describeFields(root, c.Schema)
			fd.Type = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
			fd.TypeName = proto.String(name)
		default: // STRING, JSON, NUMERIC, BIGNUMERIC, DATETIME, TIME
			fd.Type = descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
		}
		out[i] = fd
	}
	return out
}

// valueEnc appends field num holding the non-null value at row i of a.
type valueEnc func(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error)

// Encoder writes rows of batches of one Arrow schema as staging rows.
type Encoder struct {
	cols []int // Arrow column index of staging column n
	encs []valueEnc
}

// NewEncoder encodes the columns cols (Arrow column indexes of s, in staging order) as the types Column gives
// them; staging column n is field n+1, the op field len(cols)+1, the ordinal len(cols)+2.
func NewEncoder(s *arrow.Schema, cols []int) (*Encoder, error) {
	e := &Encoder{cols: cols, encs: make([]valueEnc, len(cols))}
	for n, ci := range cols {
		f := s.Field(ci)
		enc, err := newEnc(f, Column(f.Name, f))
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", f.Name, err)
		}
		e.encs[n] = enc
	}
	return e, nil
}

// Append appends row i of rec, with op and ord, as one serialized message.
func (e *Encoder) Append(buf []byte, rec arrow.RecordBatch, i int, op int8, ord int64) ([]byte, error) {
	for n, ci := range e.cols {
		a := rec.Column(ci)
		if isNull(a, i) {
			continue
		}
		var err error
		if buf, err = e.encs[n](buf, protowire.Number(n+1), a, i); err != nil {
			return buf, fmt.Errorf("column %s: %w", rec.Schema().Field(ci).Name, err)
		}
	}
	buf = protowire.AppendTag(buf, protowire.Number(len(e.cols)+1), protowire.VarintType)
	buf = protowire.AppendVarint(buf, uint64(int64(op)))
	buf = protowire.AppendTag(buf, protowire.Number(len(e.cols)+2), protowire.VarintType)
	return protowire.AppendVarint(buf, uint64(ord)), nil
}

func newEnc(f arrow.Field, col *bigquery.FieldSchema) (valueEnc, error) {
	typ := Canonical(col.Type)
	if ext, ok := f.Metadata.GetValue(extensionName); ok && ext == "arrow.uuid" && typ == String {
		return func(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
			b := storage(a).(*array.FixedSizeBinary).Value(i)
			return appendString(buf, num, uuidText(b)), nil
		}, nil
	}
	switch f.Type.(type) {
	case *arrow.RunEndEncodedType, arrow.UnionType:
		// Arrow's text form of these is not the value (a union shows its type code, a run-end encoded null
		// reads "(null)"): refused rather than written wrong (serve.TypeLimits declares them).
		return nil, fault.DataErr(fmt.Errorf("arrow type %s has no BigQuery column", f.Type),
			"cast the column to a plain type in the source, or leave it out of the stream")
	}
	switch t := f.Type.(type) {
	case arrow.ExtensionType:
		inner, err := newEnc(arrow.Field{Name: f.Name, Type: t.StorageType()}, col)
		if err != nil {
			return nil, err
		}
		return func(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
			return inner(buf, num, storage(a), i)
		}, nil
	case *arrow.DictionaryType:
		inner, err := newEnc(arrow.Field{Name: f.Name, Type: t.ValueType, Metadata: f.Metadata}, col)
		if err != nil {
			return nil, err
		}
		return func(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
			d := a.(*array.Dictionary)
			return inner(buf, num, d.Dictionary(), d.GetValueIndex(i))
		}, nil
	}
	if col.Repeated {
		return listEnc(f, col)
	}
	switch typ {
	case Bool:
		return func(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
			v := uint64(0)
			if a.(*array.Boolean).Value(i) {
				v = 1
			}
			return protowire.AppendVarint(protowire.AppendTag(buf, num, protowire.VarintType), v), nil
		}, nil
	case Int64:
		return intEnc(f.Type)
	case Float64:
		return func(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
			var v float64
			switch x := a.(type) {
			case *array.Float64:
				v = x.Value(i)
			case *array.Float32:
				v = float64(x.Value(i))
			case *array.Float16:
				v = float64(x.Value(i).Float32())
			}
			return protowire.AppendFixed64(protowire.AppendTag(buf, num, protowire.Fixed64Type), math.Float64bits(v)), nil
		}, nil
	case Numeric, BigNumeric:
		if _, ok := f.Type.(*arrow.Decimal128Type); ok {
			return func(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
				d := a.(*array.Decimal128)
				return appendString(buf, num, d.Value(i).ToString(d.DataType().(*arrow.Decimal128Type).Scale)), nil
			}, nil
		}
		return textEnc, nil
	case String:
		if isStringArray(f.Type) {
			return stringEnc, nil
		}
		return textEnc, nil
	case JSON:
		if isStringArray(f.Type) {
			return stringEnc, nil
		}
		return jsonEnc, nil
	case Bytes:
		return func(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
			var b []byte
			switch x := a.(type) {
			case *array.Binary:
				b = x.Value(i)
			case *array.LargeBinary:
				b = x.Value(i)
			case *array.BinaryView:
				b = x.Value(i)
			case *array.FixedSizeBinary:
				b = x.Value(i)
			}
			return protowire.AppendBytes(protowire.AppendTag(buf, num, protowire.BytesType), b), nil
		}, nil
	case Date:
		return func(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
			var d int64
			switch x := a.(type) {
			case *array.Date32:
				d = int64(x.Value(i))
			case *array.Date64:
				d = floorDiv(int64(x.Value(i)), 86400000)
			}
			if d < minDay || d > maxDay {
				return buf, outOfRange("date", dayText(d))
			}
			return protowire.AppendVarint(protowire.AppendTag(buf, num, protowire.VarintType), uint64(d)), nil
		}, nil
	case Time:
		return func(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
			var us int64
			switch x := a.(type) {
			case *array.Time32:
				us = int64(x.Value(i)) * micros(x.DataType().(*arrow.Time32Type).Unit)
			case *array.Time64:
				us = timeMicros(int64(x.Value(i)), x.DataType().(*arrow.Time64Type).Unit)
			}
			if us < 0 || us >= dayMicros {
				return buf, timeOutOfRange(us)
			}
			return appendString(buf, num, time.UnixMicro(us).UTC().Format("15:04:05.000000")), nil
		}, nil
	case DateTime, Timestamp:
		unit := f.Type.(*arrow.TimestampType).Unit
		if typ == Timestamp {
			return func(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
				v := int64(a.(*array.Timestamp).Value(i))
				us := timeMicros(v, unit)
				if err := timestampInRange(v, us, unit); err != nil {
					return buf, err
				}
				return protowire.AppendVarint(protowire.AppendTag(buf, num, protowire.VarintType), uint64(us)), nil
			}, nil
		}
		return func(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
			v := int64(a.(*array.Timestamp).Value(i))
			us := timeMicros(v, unit)
			if err := timestampInRange(v, us, unit); err != nil {
				return buf, err
			}
			return appendString(buf, num, time.UnixMicro(us).UTC().Format("2006-01-02 15:04:05.000000")), nil
		}, nil
	case Struct:
		return structEnc(f, col)
	}
	return nil, fmt.Errorf("no encoding of %s as %s", f.Type, typ)
}

func intEnc(t arrow.DataType) (valueEnc, error) {
	var get func(a arrow.Array, i int) int64
	switch t.ID() {
	case arrow.INT64:
		get = func(a arrow.Array, i int) int64 { return a.(*array.Int64).Value(i) }
	case arrow.INT32:
		get = func(a arrow.Array, i int) int64 { return int64(a.(*array.Int32).Value(i)) }
	case arrow.INT16:
		get = func(a arrow.Array, i int) int64 { return int64(a.(*array.Int16).Value(i)) }
	case arrow.INT8:
		get = func(a arrow.Array, i int) int64 { return int64(a.(*array.Int8).Value(i)) }
	case arrow.UINT32:
		get = func(a arrow.Array, i int) int64 { return int64(a.(*array.Uint32).Value(i)) }
	case arrow.UINT16:
		get = func(a arrow.Array, i int) int64 { return int64(a.(*array.Uint16).Value(i)) }
	case arrow.UINT8:
		get = func(a arrow.Array, i int) int64 { return int64(a.(*array.Uint8).Value(i)) }
	default:
		return nil, fmt.Errorf("no INT64 encoding of %s", t)
	}
	return func(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
		return protowire.AppendVarint(protowire.AppendTag(buf, num, protowire.VarintType), uint64(get(a, i))), nil
	}, nil
}

func listEnc(f arrow.Field, col *bigquery.FieldSchema) (valueEnc, error) {
	elemCol := *col
	elemCol.Repeated = false
	ef := f.Type.(arrow.ListLikeType).ElemField()
	inner, err := newEnc(ef, &elemCol)
	if err != nil {
		return nil, err
	}
	return func(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
		var (
			values     arrow.Array
			start, end int64
		)
		switch x := a.(type) {
		case *array.List:
			values = x.ListValues()
			start, end = x.ValueOffsets(i)
		case *array.LargeList:
			values = x.ListValues()
			start, end = x.ValueOffsets(i)
		case *array.FixedSizeList:
			values = x.ListValues()
			start, end = x.ValueOffsets(i)
		}
		for j := start; j < end; j++ {
			if values.IsNull(int(j)) {
				return buf, fault.DataErr(fmt.Errorf("array element %d is NULL, and a BigQuery ARRAY cannot hold NULL", j-start),
					"BigQuery arrays hold no NULL: remove the NULL elements in the source (array_remove), or replicate the column as json")
			}
			var err error
			if buf, err = inner(buf, num, values, int(j)); err != nil {
				return buf, err
			}
		}
		return buf, nil
	}, nil
}

func structEnc(f arrow.Field, col *bigquery.FieldSchema) (valueEnc, error) {
	st := f.Type.(*arrow.StructType)
	encs := make([]valueEnc, st.NumFields())
	for k, c := range st.Fields() {
		enc, err := newEnc(c, col.Schema[k])
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", c.Name, err)
		}
		encs[k] = enc
	}
	return func(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
		s := a.(*array.Struct)
		var sub []byte
		for k, enc := range encs {
			child := s.Field(k)
			if isNull(child, i) {
				continue
			}
			var err error
			if sub, err = enc(sub, protowire.Number(k+1), child, i); err != nil {
				return buf, fmt.Errorf("field %s: %w", st.Field(k).Name, err)
			}
		}
		return protowire.AppendBytes(protowire.AppendTag(buf, num, protowire.BytesType), sub), nil
	}, nil
}

func stringEnc(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
	switch x := a.(type) {
	case *array.String:
		return appendString(buf, num, x.Value(i)), nil
	case *array.LargeString:
		return appendString(buf, num, x.Value(i)), nil
	case *array.StringView:
		return appendString(buf, num, x.Value(i)), nil
	}
	return textEnc(buf, num, a, i)
}

// textEnc writes Arrow's text form of a value (decimals with a negative scale, intervals, durations).
func textEnc(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
	return appendString(buf, num, a.ValueStr(i)), nil
}

// jsonEnc writes a nested value BigQuery has no column type for (a map, an array of arrays) as JSON text.
func jsonEnc(buf []byte, num protowire.Number, a arrow.Array, i int) ([]byte, error) {
	b, err := json.Marshal(a.GetOneForMarshal(i))
	if err != nil {
		return buf, fmt.Errorf("as JSON: %w", err)
	}
	return protowire.AppendBytes(protowire.AppendTag(buf, num, protowire.BytesType), b), nil
}

func appendString(buf []byte, num protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(buf, num, protowire.BytesType), s)
}

func isStringArray(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.STRING_VIEW:
		return true
	}
	return false
}

func storage(a arrow.Array) arrow.Array {
	if x, ok := a.(array.ExtensionArray); ok {
		return x.Storage()
	}
	return a
}

func uuidText(b []byte) string {
	const hex = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hex[c>>4], hex[c&15])
	}
	return string(out)
}

func micros(u arrow.TimeUnit) int64 {
	switch u {
	case arrow.Second:
		return 1e6
	case arrow.Millisecond:
		return 1e3
	}
	return 1
}

// timeMicros converts a value in unit u to microseconds, BigQuery's precision: nanoseconds are truncated
// toward the past.
// BigQuery's DATE, DATETIME and TIMESTAMP hold 0001-01-01 to 9999-12-31 (UTC) and nothing infinite.
const (
	minDay    = -719162                // 0001-01-01
	maxDay    = 2932896                // 9999-12-31
	minMicros = -62135596800000000     // 0001-01-01 00:00:00
	maxMicros = 253402300800000000 - 1 // 9999-12-31 23:59:59.999999
)

// outOfRange is the data error for a date or timestamp BigQuery cannot hold: the pipeline stops in state
// failed with the value named (the caller adds the column), never a retried load the service refuses.
func outOfRange(kind, value string) error {
	return fault.DataErr(fmt.Errorf("%s %s is outside BigQuery's range (0001-01-01 to 9999-12-31, nothing infinite)", kind, value),
		"BigQuery cannot hold it: change the value in the source (for example UPDATE … SET col = NULL WHERE col = 'infinity'), or replicate the table to a destination that holds it (Postgres, DuckDB, Iceberg)")
}

// dayMicros is one day: BigQuery's TIME ends at 23:59:59.999999.
const dayMicros = 86400_000000

// timeOutOfRange is the data error for a time of day BigQuery's TIME cannot hold: PostgreSQL's time takes
// 24:00:00, which formatting as a clock would turn into 00:00:00 without a word.
func timeOutOfRange(us int64) error {
	return fault.DataErr(fmt.Errorf("time %02d:%02d:%02d.%06d (%d us) is outside BigQuery's TIME range (00:00:00 to 23:59:59.999999)",
		us/3600e6, us/60e6%60, us/1e6%60, us%1e6, us),
		"BigQuery cannot hold it: change the value in the source (for example UPDATE … SET col = '23:59:59.999999' WHERE col = '24:00:00'), or replicate the table to a destination that holds it (Postgres, DuckDB, Iceberg)")
}

// timestampInRange checks a timestamp column's value v (in unit; us in microseconds).
func timestampInRange(v, us int64, unit arrow.TimeUnit) error {
	if unit == arrow.Microsecond {
		switch arrow.Timestamp(v) {
		case values.TimestampInfinity:
			return outOfRange("timestamp", "infinity")
		case values.TimestampNegInfinity:
			return outOfRange("timestamp", "-infinity")
		}
	}
	if us < minMicros || us > maxMicros || (unit != arrow.Nanosecond && us/micros(unit) != v) {
		return outOfRange("timestamp", strconv.FormatInt(v, 10)+" "+unit.String()+" since 1970-01-01")
	}
	return nil
}

// dayText names a date32 value, ±infinity as the words.
func dayText(d int64) string {
	switch arrow.Date32(d) {
	case values.DateInfinity:
		return "infinity"
	case values.DateNegInfinity:
		return "-infinity"
	}
	return strconv.FormatInt(d, 10) + " days since 1970-01-01"
}

func timeMicros(v int64, u arrow.TimeUnit) int64 {
	if u == arrow.Nanosecond {
		return floorDiv(v, 1000)
	}
	return v * micros(u)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// isNull says value i of a is NULL; an array of Arrow's null type has no validity bitmap, and IsNull says
// false for it.
func isNull(a arrow.Array, i int) bool { return a.IsNull(i) || a.DataType().ID() == arrow.NULL }

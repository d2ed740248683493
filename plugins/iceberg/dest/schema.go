package dest

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

// dataSchema is a change schema without the reserved columns, keeping the metadata (primary key), with each
// type replaced by the Arrow type that maps losslessly onto an Iceberg type (see icebergCompatible).
func dataSchema(s *arrow.Schema) *arrow.Schema {
	md := s.Metadata()
	var fields []arrow.Field
	for _, f := range s.Fields() {
		// Columns this plugin adds (rowmeta's, the history's) have the reserved prefix but are the table's.
		if !change.Reserved(f.Name) || isAdded(f) {
			fields = append(fields, f)
		}
	}
	for i := range fields {
		fields[i].Type = icebergCompatible(fields[i].Type)
	}
	return arrow.NewSchema(fields, &md)
}

// icebergCompatible maps Arrow types iceberg-go would reject or convert lossily: a zoned timestamp becomes
// UTC (Arrow and Iceberg both store instants; Iceberg knows only UTC), uint32 becomes long and uint64
// decimal(20, 0) (iceberg-go would map them to int and long, which overflow), date64 becomes date and
// time32 becomes time (microseconds), and month_day_nano_interval (Iceberg has no interval type) becomes
// values.IntervalStruct. The rows are cast to the table's types when written.
func icebergCompatible(dt arrow.DataType) arrow.DataType {
	switch t := dt.(type) {
	case *arrow.MonthDayNanoIntervalType:
		return values.IntervalStruct
	case *arrow.TimestampType:
		if t.TimeZone != "" && t.TimeZone != "UTC" {
			return &arrow.TimestampType{Unit: t.Unit, TimeZone: "UTC"}
		}
	case *arrow.Uint32Type:
		return arrow.PrimitiveTypes.Int64
	case *arrow.Uint64Type:
		return &arrow.Decimal128Type{Precision: 20, Scale: 0}
	case *arrow.Date64Type:
		return arrow.FixedWidthTypes.Date32
	case *arrow.Time32Type:
		return arrow.FixedWidthTypes.Time64us
	case *arrow.StructType:
		fields := t.Fields()
		for i := range fields {
			fields[i].Type = icebergCompatible(fields[i].Type)
		}
		return arrow.StructOf(fields...)
	case *arrow.ListType:
		f := t.ElemField()
		f.Type = icebergCompatible(f.Type)
		return arrow.ListOfField(f)
	case *arrow.LargeListType:
		f := t.ElemField()
		f.Type = icebergCompatible(f.Type)
		return arrow.LargeListOfField(f)
	case *arrow.MapType:
		k, v := t.KeyField(), t.ItemField()
		k.Type, v.Type = icebergCompatible(k.Type), icebergCompatible(v.Type)
		return arrow.MapOfFields(k, v)
	}
	return dt
}

// newTableSchema turns a stream's Arrow schema into the Iceberg schema of a new table: the key columns become
// required identifier fields. Field ids are placeholders; the catalog assigns the real ones.
func newTableSchema(stream string, s *arrow.Schema, key []string) (*iceberg.Schema, error) {
	sc, err := table.ArrowSchemaToIcebergWithFreshIDs(dataSchema(s), true)
	if err != nil {
		return nil, fmt.Errorf("stream %s: schema has no Iceberg equivalent: %w", stream, err)
	}
	fields := sc.Fields()
	var ids []int
	for _, k := range key {
		i := slices.IndexFunc(fields, func(f iceberg.NestedField) bool { return f.Name == k })
		if i < 0 {
			return nil, fmt.Errorf("stream %s: primary key column %q is not in the schema", stream, k)
		}
		if err := checkKeyType(stream, k, fields[i].Type); err != nil {
			return nil, err
		}
		fields[i].Required = true
		ids = append(ids, fields[i].ID)
	}
	return iceberg.NewSchemaWithIdentifiers(0, ids, fields...), nil
}

func checkKeyType(stream, col string, t iceberg.Type) error {
	switch t.(type) {
	case iceberg.Float32Type, iceberg.Float64Type:
		return fmt.Errorf("stream %s: primary key column %q is %s: Iceberg identifier fields cannot be floating point", stream, col, t)
	case iceberg.PrimitiveType:
		return nil
	}
	return fmt.Errorf("stream %s: primary key column %q is %s: Iceberg identifier fields must be primitive", stream, col, t)
}

// schemaChange is one evolution step Iceberg can express.
type schemaChange struct {
	kind     changeKind
	path     []string
	typ      iceberg.Type // added column's type, or the promoted type
	name     string       // a renamed column's new name
	old      iceberg.Type // for promotions, to report
	optional bool
	// initial is an added column's initial-default (format v3): the value rows written before it read.
	initial iceberg.Literal
}

type changeKind int

const (
	addColumn changeKind = iota + 1
	promoteColumn
	makeOptional
	renameColumn
)

func (c schemaChange) String() string {
	p := strings.Join(c.path, ".")
	switch c.kind {
	case addColumn:
		return "add " + p + " " + c.typ.String()
	case promoteColumn:
		return "widen " + p + " " + c.old.String() + " -> " + c.typ.String()
	case renameColumn:
		return "rename " + p + " -> " + c.name
	default:
		return "make " + p + " optional"
	}
}

// IncompatibleSchemaError says a column changed in a way Iceberg cannot follow.
type IncompatibleSchemaError struct {
	Table    string
	Column   string
	Old, New string
	Reason   string
}

func (e *IncompatibleSchemaError) Error() string {
	return fmt.Sprintf("table %s: column %s cannot change from %s to %s: %s", e.Table, e.Column, e.Old, e.New, e.Reason)
}

// planEvolution compares the table schema with a batch's data schema and lists what the table must gain: new
// columns (top level and inside structs, list elements and map values), widened types, required columns that
// became nullable or vanished. Data narrower than its column (int into long) needs no change: it is cast up when
// written. Anything else is an IncompatibleSchemaError naming the column and both types.
func planEvolution(tableName string, cur *iceberg.Schema, incoming *arrow.Schema, key []string) ([]schemaChange, error) {
	in, err := table.ArrowSchemaToIcebergWithFreshIDs(dataSchema(incoming), true)
	if err != nil {
		return nil, fmt.Errorf("table %s: incoming schema has no Iceberg equivalent: %w", tableName, err)
	}
	p := planner{table: tableName, key: map[string]bool{}}
	for _, k := range key {
		p.key[k] = true
	}
	// Columns the source renamed (change.RenamedFromMeta) are renamed by field id, first: the data files
	// written before keep their values, which read under the new name. The table's own columns decide, so a
	// replay that finds the new name renames nothing.
	fields := slices.Clone(cur.Fields())
	has := func(n string) bool {
		return slices.ContainsFunc(fields, func(f iceberg.NestedField) bool { return f.Name == n })
	}
	for _, r := range change.Renames(change.DataFields(incoming), has) {
		if p.key[r.From] {
			return nil, fault.DataErr(fmt.Errorf("table %s: primary key column %s is renamed to %s at the source; this plugin does not rename identifier fields", tableName, r.From, r.To),
				schemaFix)
		}
		i := slices.IndexFunc(fields, func(f iceberg.NestedField) bool { return f.Name == r.From })
		fields[i].Name = r.To
		p.out = append(p.out, schemaChange{kind: renameColumn, path: []string{r.From}, name: r.To})
	}
	p.fields(nil, fields, in.Fields())
	return p.out, p.err
}

type planner struct {
	table string
	key   map[string]bool
	out   []schemaChange
	err   error
}

func (p *planner) fail(path []string, old, new iceberg.Type, reason string) {
	if p.err == nil {
		p.err = fault.DataErr(&IncompatibleSchemaError{Table: p.table, Column: strings.Join(path, "."), Old: old.String(), New: new.String(), Reason: reason},
			schemaFix)
	}
}

// schemaFix is the way out of a schema change an Iceberg table cannot express.
const schemaFix = "re-snapshot the table into a new Iceberg table (drop or rename the old one first), or undo the change at the source"

func (p *planner) fields(parent []string, cur, in []iceberg.NestedField) {
	for _, f := range in {
		path := append(slices.Clone(parent), f.Name)
		i := slices.IndexFunc(cur, func(c iceberg.NestedField) bool { return c.Name == f.Name })
		if i < 0 {
			if len(parent) == 0 && p.key[f.Name] {
				p.err = fault.DataErr(fmt.Errorf("table %s: primary key column %s is not in the table; Iceberg cannot add an identifier column to existing rows", p.table, f.Name),
					schemaFix)
				return
			}
			p.out = append(p.out, schemaChange{kind: addColumn, path: path, typ: f.Type})
			continue
		}
		c := cur[i]
		p.field(path, c, f)
		isKey := len(parent) == 0 && p.key[f.Name]
		if c.Required && !f.Required && !isKey {
			p.out = append(p.out, schemaChange{kind: makeOptional, path: path})
		}
	}
	// A required column the batch no longer carries can only hold nulls from now on.
	for _, c := range cur {
		if !c.Required || slices.ContainsFunc(in, func(f iceberg.NestedField) bool { return f.Name == c.Name }) {
			continue
		}
		if len(parent) == 0 && p.key[c.Name] {
			if p.err == nil {
				p.err = fmt.Errorf("table %s: primary key column %s is missing from the batch", p.table, c.Name)
			}
			return
		}
		p.out = append(p.out, schemaChange{kind: makeOptional, path: append(slices.Clone(parent), c.Name)})
	}
}

func (p *planner) field(path []string, c, f iceberg.NestedField) {
	switch ct := c.Type.(type) {
	case *iceberg.StructType:
		ft, ok := f.Type.(*iceberg.StructType)
		if !ok {
			p.fail(path, c.Type, f.Type, "a struct cannot become another kind of type")
			return
		}
		p.fields(path, ct.FieldList, ft.FieldList)
	case *iceberg.ListType:
		ft, ok := f.Type.(*iceberg.ListType)
		if !ok {
			p.fail(path, c.Type, f.Type, "a list cannot become another kind of type")
			return
		}
		ep := append(slices.Clone(path), "element")
		p.field(ep, ct.ElementField(), ft.ElementField())
		if ct.ElementRequired && !ft.ElementRequired {
			p.out = append(p.out, schemaChange{kind: makeOptional, path: ep})
		}
	case *iceberg.MapType:
		ft, ok := f.Type.(*iceberg.MapType)
		if !ok {
			p.fail(path, c.Type, f.Type, "a map cannot become another kind of type")
			return
		}
		if !ct.KeyType.Equals(ft.KeyType) {
			p.fail(append(slices.Clone(path), "key"), ct.KeyType, ft.KeyType, "map keys cannot change type")
			return
		}
		vp := append(slices.Clone(path), "value")
		p.field(vp, ct.ValueField(), ft.ValueField())
		if ct.ValueRequired && !ft.ValueRequired {
			p.out = append(p.out, schemaChange{kind: makeOptional, path: vp})
		}
	case iceberg.PrimitiveType:
		ft, ok := f.Type.(iceberg.PrimitiveType)
		if !ok {
			p.fail(path, c.Type, f.Type, "a primitive column cannot become a nested type")
			return
		}
		switch {
		case ct.Equals(ft), promotable(ft, ct):
			// Same type, or narrower data that is cast up on write.
		case promotable(ct, ft):
			p.out = append(p.out, schemaChange{kind: promoteColumn, path: path, typ: ft, old: ct})
		default:
			p.fail(path, ct, ft, "Iceberg only widens int to long, float to double and decimal precision (same scale)")
		}
	default:
		if !c.Type.Equals(f.Type) {
			p.fail(path, c.Type, f.Type, "unsupported type change")
		}
	}
}

// promotable says Iceberg can widen a column of type from to type to.
func promotable(from, to iceberg.Type) bool {
	switch f := from.(type) {
	case iceberg.Int32Type:
		_, ok := to.(iceberg.Int64Type)
		return ok
	case iceberg.Float32Type:
		_, ok := to.(iceberg.Float64Type)
		return ok
	case iceberg.DecimalType:
		t, ok := to.(iceberg.DecimalType)
		return ok && t.Scale() == f.Scale() && t.Precision() > f.Precision()
	}
	return false
}

// stageEvolution adds the changes to us, the transaction's one schema update. One update per transaction,
// not one per change set: iceberg-go (v0.7.0) asserts each UpdateSchema's starting schema id against the
// catalog's table at commit, so a second update in the same transaction asserts the id the first one created
// and fails as "current schema id has changed: expected 1, found 0" with no other writer.
func stageEvolution(us *table.UpdateSchema, changes []schemaChange) {
	for _, c := range foldIntoPendingAdds(changes) {
		switch c.kind {
		case addColumn:
			us.AddColumn(c.path, c.typ, "", false, c.initial)
		case promoteColumn:
			us.UpdateColumn(c.path, table.ColumnUpdate{FieldType: iceberg.Optional[iceberg.Type]{Valid: true, Val: c.typ}})
		case makeOptional:
			us.UpdateColumn(c.path, table.ColumnUpdate{Required: iceberg.Optional[bool]{Valid: true, Val: false}})
		case renameColumn:
			// A copy: iceberg-go v0.7.0 appends the new name to path[:len(path)-1], overwriting the caller's
			// last element, and the same changes are staged twice (evolve's throwaway update, then the real one).
			us.RenameColumn(slices.Clone(c.path), c.name)
		}
	}
}

// foldIntoPendingAdds folds each change under a column that the same update adds into that column's type.
// iceberg-go's UpdateSchema looks a parent up in the table's schema only, not among the update's own adds, and
// a coalesced apply gathers the changes of several schemas into one update: a struct added by one schema and
// a field added to it by the next would fail with "parent field not found".
func foldIntoPendingAdds(changes []schemaChange) []schemaChange {
	var out []schemaChange
	for _, c := range changes {
		folded := false
		for i := range out {
			a := &out[i]
			if a.kind != addColumn || len(c.path) <= len(a.path) || !slices.Equal(a.path, c.path[:len(a.path)]) {
				continue
			}
			if t, ok := applyWithin(a.typ, c.path[len(a.path):], c); ok {
				a.typ, folded = t, true
			}
			break
		}
		if !folded {
			out = append(out, c)
		}
	}
	return out
}

// applyWithin applies c at the path rel inside typ, through struct fields; ok is false where rel leaves the
// structs (a list element, a map value), which then stays a change of its own.
func applyWithin(typ iceberg.Type, rel []string, c schemaChange) (iceberg.Type, bool) {
	st, ok := typ.(*iceberg.StructType)
	if !ok {
		return nil, false
	}
	fields := slices.Clone(st.FieldList)
	if len(rel) == 1 && c.kind == addColumn {
		fields = append(fields, iceberg.NestedField{Name: rel[0], Type: c.typ, Required: false})
		return &iceberg.StructType{FieldList: fields}, true
	}
	for i := range fields {
		if fields[i].Name != rel[0] {
			continue
		}
		switch {
		case len(rel) > 1:
			t, ok := applyWithin(fields[i].Type, rel[1:], c)
			if !ok {
				return nil, false
			}
			fields[i].Type = t
		case c.kind == promoteColumn:
			fields[i].Type = c.typ
		case c.kind == makeOptional:
			fields[i].Required = false
		default:
			return nil, false
		}
		return &iceberg.StructType{FieldList: fields}, true
	}
	return nil, false
}

func describe(changes []schemaChange) string {
	s := make([]string, len(changes))
	for i, c := range changes {
		s[i] = c.String()
	}
	return strings.Join(s, ", ")
}

// conform rewrites a batch (reserved columns already stripped) to exactly the target schema: columns matched by
// name, missing ones null, narrower types cast up, nested types rebuilt so their fields carry the table's ids.
// The result may hold nulls in required columns (delete rows); checkRequired runs on what is written.
func conform(ctx context.Context, mem memory.Allocator, rec arrow.RecordBatch, target *arrow.Schema, what string) (arrow.RecordBatch, error) {
	n := int(rec.NumRows())
	cols := make([]arrow.Array, 0, target.NumFields())
	release := func() {
		for _, c := range cols {
			c.Release()
		}
	}
	src := rec.Schema()
	for _, f := range target.Fields() {
		idx := src.FieldIndices(f.Name)
		var (
			col arrow.Array
			err error
		)
		if len(idx) == 0 {
			if !f.Nullable {
				release()
				return nil, fmt.Errorf("%s: required column %s is missing", what, f.Name)
			}
			col = array.MakeArrayOfNull(mem, f.Type, n)
		} else {
			col, err = conformArray(ctx, mem, rec.Column(idx[0]), f.Type, f.Name)
			if err != nil {
				release()
				return nil, fmt.Errorf("%s: %w", what, err)
			}
		}
		// Nulls in required columns are checked on the rows that survive folding: a delete row carries only
		// its key.
		cols = append(cols, col)
	}
	for _, f := range src.Fields() {
		if target.HasField(f.Name) {
			continue
		}
		release()
		return nil, fmt.Errorf("%s: column %s is not in the table schema", what, f.Name)
	}
	out := array.NewRecordBatch(target, cols, int64(n))
	release()
	return out, nil
}

func conformArray(ctx context.Context, mem memory.Allocator, arr arrow.Array, dt arrow.DataType, path string) (arrow.Array, error) {
	if iv, ok := arr.(*array.MonthDayNanoInterval); ok {
		t, ok := dt.(*arrow.StructType)
		if !ok || t.NumFields() != 3 {
			return nil, fmt.Errorf("column %s is an interval, but the table's column is %s, not struct<months, days, nanoseconds>", path, dt)
		}
		return values.IntervalsAsStruct(mem, iv, t), nil
	}
	switch t := dt.(type) {
	case *arrow.StructType:
		src, ok := arr.(*array.Struct)
		if !ok {
			return nil, fmt.Errorf("column %s is %s, want a struct", path, arr.DataType())
		}
		st := src.DataType().(*arrow.StructType)
		n := src.Len()
		children := make([]arrow.ArrayData, t.NumFields())
		defer func() {
			for _, c := range children {
				if c != nil {
					c.Release()
				}
			}
		}()
		for i, f := range t.Fields() {
			var c arrow.Array
			if idx, ok := st.FieldIdx(f.Name); ok {
				var err error
				if c, err = conformArray(ctx, mem, src.Field(idx), f.Type, path+"."+f.Name); err != nil {
					return nil, err
				}
			} else {
				c = array.MakeArrayOfNull(mem, f.Type, n)
			}
			children[i] = c.Data()
			children[i].Retain()
			c.Release()
		}
		for _, f := range st.Fields() {
			if _, ok := t.FieldIdx(f.Name); !ok {
				return nil, fmt.Errorf("column %s.%s is not in the table schema", path, f.Name)
			}
		}
		// src.Field(i) is already sliced to the struct's offset, so the new struct starts at 0 and needs its own
		// validity bitmap.
		var validity *memory.Buffer
		if src.NullN() > 0 {
			validity = memory.NewResizableBuffer(mem)
			validity.Resize(int(bitutil.BytesForBits(int64(n))))
			bits := validity.Bytes()
			for i := 0; i < n; i++ {
				bitutil.SetBitTo(bits, i, src.IsValid(i))
			}
			defer validity.Release()
		}
		data := array.NewData(t, n, []*memory.Buffer{validity}, children, src.NullN(), 0)
		defer data.Release()
		return array.MakeFromData(data), nil
	case *arrow.ListType:
		src, ok := arr.(*array.List)
		if !ok {
			if _, large := arr.(*array.LargeList); large {
				cast, err := compute.CastArray(ctx, arr, compute.SafeCastOptions(arrow.ListOfField(arr.DataType().(*arrow.LargeListType).ElemField())))
				if err != nil {
					return nil, fmt.Errorf("column %s: %w", path, err)
				}
				defer cast.Release()
				return conformArray(ctx, mem, cast, dt, path)
			}
			return nil, fmt.Errorf("column %s is %s, want a list", path, arr.DataType())
		}
		vals, err := conformArray(ctx, mem, src.ListValues(), t.Elem(), path+".element")
		if err != nil {
			return nil, err
		}
		defer vals.Release()
		d := src.Data()
		data := array.NewData(t, d.Len(), d.Buffers()[:2], []arrow.ArrayData{vals.Data()}, d.NullN(), d.Offset())
		defer data.Release()
		return array.MakeFromData(data), nil
	case *arrow.MapType:
		src, ok := arr.(*array.Map)
		if !ok {
			return nil, fmt.Errorf("column %s is %s, want a map", path, arr.DataType())
		}
		entries, err := conformArray(ctx, mem, src.ListValues(), t.Elem(), path)
		if err != nil {
			return nil, err
		}
		defer entries.Release()
		d := src.Data()
		data := array.NewData(t, d.Len(), d.Buffers()[:2], []arrow.ArrayData{entries.Data()}, d.NullN(), d.Offset())
		defer data.Release()
		return array.MakeFromData(data), nil
	}
	if arrow.TypeEqual(arr.DataType(), dt) {
		arr.Retain()
		return arr, nil
	}
	opts := compute.SafeCastOptions(dt)
	if ts, ok := dt.(*arrow.TimestampType); ok {
		if src, ok := arr.DataType().(*arrow.TimestampType); ok && src.Unit > ts.Unit {
			// Iceberg v2 keeps microseconds: nanoseconds are truncated, as every Iceberg writer does.
			opts = compute.UnsafeCastOptions(dt)
		}
	}
	out, err := compute.CastArray(ctx, arr, opts)
	if err != nil {
		return nil, fmt.Errorf("column %s: cast %s to %s: %w", path, arr.DataType(), dt, err)
	}
	return out, nil
}

// checkRequired refuses rows with a null in a required top-level column.
func checkRequired(rec arrow.RecordBatch, what string) error {
	for i, f := range rec.Schema().Fields() {
		if !f.Nullable && rec.Column(i).NullN() > 0 {
			return fmt.Errorf("%s: column %s is required but %d rows hold null", what, f.Name, rec.Column(i).NullN())
		}
	}
	return nil
}

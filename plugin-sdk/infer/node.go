package infer

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
)

// MetaKey is the field metadata key by which a schema remembers what its Arrow types alone cannot say: a
// field that has held only nulls ("null"), an int64 field that has held an integer float64 would round
// ("int-beyond-2^53").
const MetaKey = "skippr.infer"

const (
	metaNull   = "null"
	metaBigInt = "int-beyond-2^53"
)

// TimestampType is the type of inferred timestamps.
var TimestampType = &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}

// MaxDepth bounds how deep objects and arrays may nest.
const MaxDepth = 32

// maxExactInt is the largest magnitude float64 holds for every integer up to it.
const maxExactInt = 1 << 53

type kind uint8

const (
	kindNull kind = iota // only nulls so far
	kindBool
	kindInt
	kindFloat
	kindString
	kindTimestamp
	kindStruct
	kindList
)

func (k kind) String() string {
	switch k {
	case kindNull:
		return "null"
	case kindBool:
		return "bool"
	case kindInt:
		return "int64"
	case kindFloat:
		return "float64"
	case kindString:
		return "utf8"
	case kindTimestamp:
		return "timestamp"
	case kindStruct:
		return "struct"
	case kindList:
		return "list"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// node is the type of a value, in the terms inference reasons in; Arrow types are made from it at the end.
type node struct {
	kind   kind
	big    bool     // kindInt: has held an integer beyond ±2^53
	fields []*field // kindStruct, in order
	elem   *node    // kindList; list items are always nullable
	// index finds fields by name in wide structs; fields are only ever appended, so it is current while
	// it has as many entries as fields.
	index map[string]*field
}

type field struct {
	name     string
	nullable bool
	node     *node
}

func (n *node) child(name string) *field {
	if len(n.fields) <= 8 {
		for _, f := range n.fields {
			if f.name == name {
				return f
			}
		}
		return nil
	}
	if len(n.index) != len(n.fields) {
		if n.index == nil {
			n.index = make(map[string]*field, len(n.fields))
		}
		for _, f := range n.fields[len(n.index):] {
			n.index[f.name] = f
		}
	}
	return n.index[name]
}

func (n *node) clone() *node {
	c := &node{kind: n.kind, big: n.big}
	if n.elem != nil {
		c.elem = n.elem.clone()
	}
	for _, f := range n.fields {
		c.fields = append(c.fields, &field{name: f.name, nullable: f.nullable, node: f.node.clone()})
	}
	return c
}

func equalNode(a, b *node) bool {
	if a.kind != b.kind || a.big != b.big || len(a.fields) != len(b.fields) || (a.elem == nil) != (b.elem == nil) {
		return false
	}
	if a.elem != nil && !equalNode(a.elem, b.elem) {
		return false
	}
	for i := range a.fields {
		fa, fb := a.fields[i], b.fields[i]
		if fa.name != fb.name || fa.nullable != fb.nullable || !equalNode(fa.node, fb.node) {
			return false
		}
	}
	return true
}

// arrowType returns the Arrow type of n and the field metadata that completes it.
func (n *node) arrowType() (arrow.DataType, arrow.Metadata) {
	switch n.kind {
	case kindNull:
		return arrow.BinaryTypes.String, arrow.NewMetadata([]string{MetaKey}, []string{metaNull})
	case kindBool:
		return arrow.FixedWidthTypes.Boolean, arrow.Metadata{}
	case kindInt:
		if n.big {
			return arrow.PrimitiveTypes.Int64, arrow.NewMetadata([]string{MetaKey}, []string{metaBigInt})
		}
		return arrow.PrimitiveTypes.Int64, arrow.Metadata{}
	case kindFloat:
		return arrow.PrimitiveTypes.Float64, arrow.Metadata{}
	case kindString:
		return arrow.BinaryTypes.String, arrow.Metadata{}
	case kindTimestamp:
		return TimestampType, arrow.Metadata{}
	case kindStruct:
		return arrow.StructOf(toArrowFields(n.fields)...), arrow.Metadata{}
	case kindList:
		t, md := n.elem.arrowType()
		return arrow.ListOfField(arrow.Field{Name: "item", Type: t, Nullable: true, Metadata: md}), arrow.Metadata{}
	}
	panic(fmt.Sprintf("infer: unknown kind %d", n.kind))
}

func toArrowFields(fs []*field) []arrow.Field {
	out := make([]arrow.Field, len(fs))
	for i, f := range fs {
		t, md := f.node.arrowType()
		out[i] = arrow.Field{Name: f.name, Type: t, Nullable: f.nullable, Metadata: md}
	}
	return out
}

// fromArrowFields reads fields this package made (or that follow its type mapping) back into nodes.
func fromArrowFields(fs []arrow.Field, path []string) ([]*field, error) {
	out := make([]*field, 0, len(fs))
	seen := make(map[string]bool, len(fs))
	for _, f := range fs {
		p := append(path, f.Name)
		if seen[f.Name] {
			return nil, fmt.Errorf("schema field %s appears twice", Pointer(p))
		}
		seen[f.Name] = true
		n, err := fromArrow(f.Type, f.Metadata, p)
		if err != nil {
			return nil, err
		}
		out = append(out, &field{name: f.Name, nullable: f.Nullable, node: n})
	}
	return out, nil
}

func fromArrow(t arrow.DataType, md arrow.Metadata, path []string) (*node, error) {
	mark, _ := md.GetValue(MetaKey)
	switch t := t.(type) {
	case *arrow.StringType:
		if mark == metaNull {
			return &node{kind: kindNull}, nil
		}
		return &node{kind: kindString}, nil
	case *arrow.BooleanType:
		return &node{kind: kindBool}, nil
	case *arrow.Int64Type:
		return &node{kind: kindInt, big: mark == metaBigInt}, nil
	case *arrow.Float64Type:
		return &node{kind: kindFloat}, nil
	case *arrow.TimestampType:
		if t.Unit != arrow.Microsecond || t.TimeZone != "UTC" {
			return nil, fmt.Errorf("schema field %s: type %s is not %s, the timestamp type inference manages", Pointer(path), t, TimestampType)
		}
		return &node{kind: kindTimestamp}, nil
	case *arrow.StructType:
		fs, err := fromArrowFields(t.Fields(), path)
		if err != nil {
			return nil, err
		}
		return &node{kind: kindStruct, fields: fs}, nil
	case *arrow.ListType:
		ef := t.ElemField()
		e, err := fromArrow(ef.Type, ef.Metadata, path)
		if err != nil {
			return nil, err
		}
		return &node{kind: kindList, elem: e}, nil
	}
	return nil, fmt.Errorf("schema field %s: type %s is not one inference manages (bool, int64, float64, utf8, timestamp[us, UTC], struct, list)", Pointer(path), t)
}

// NullOnly returns a field that has held only nulls: a placeholder that takes the type of the first value it
// meets (a primary key column known by name before any record, say).
func NullOnly(name string, nullable bool) arrow.Field {
	t, md := (&node{kind: kindNull}).arrowType()
	return arrow.Field{Name: name, Type: t, Nullable: nullable, Metadata: md}
}

package gen

import (
	"math"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
)

// epoch is the timestamp of event 0; event i happens i milliseconds later.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var words = []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima"}
var cities = []string{"Lisbon", "Oslo", "Quito", "Accra", "Hanoi", "Perth", "Tbilisi", "Lima"}

type generator struct {
	s      settings
	schema *arrow.Schema
	b      *change.Builder
}

func newGenerator(s settings, mem memory.Allocator) *generator {
	fields := []arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "seq", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "amount", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	}
	if s.Nested {
		fields = append(fields,
			arrow.Field{Name: "address", Nullable: true, Type: arrow.StructOf(
				arrow.Field{Name: "city", Type: arrow.BinaryTypes.String, Nullable: true},
				arrow.Field{Name: "zip", Type: arrow.PrimitiveTypes.Int32, Nullable: true})},
			arrow.Field{Name: "tags", Nullable: true, Type: arrow.ListOf(arrow.BinaryTypes.String)})
	}
	sc := change.TimedSchema(fields, []string{"id"})
	return &generator{s: s, schema: sc, b: change.NewBuilder(mem, sc)}
}

func (g *generator) release() { g.b.Release() }

// splitmix64 is a fast, well-mixed hash: event i's randomness depends on nothing but the seed and i.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// event decides what event i does: inserts create id i+1; updates and deletes pick an earlier id, which may
// already be gone (an update then re-creates it, a delete is a no-op, exactly as an upserting sink treats it).
func (g *generator) event(i int64) (op change.Op, id int64, h uint64) {
	h = splitmix64(g.s.Seed*0x2545F4914F6CDD1D ^ uint64(i))
	r := float64(h>>11) / (1 << 53)
	if i == 0 || r >= g.s.UpdateRatio+g.s.DeleteRatio {
		return change.OpInsert, i + 1, h
	}
	id = 1 + int64(splitmix64(h)%uint64(i))
	if r < g.s.DeleteRatio {
		return change.OpDelete, id, h
	}
	return change.OpUpdate, id, h
}

// batch returns events [from, from+n).
func (g *generator) batch(from, n int64) arrow.RecordBatch {
	ids := g.b.Field(0).(*array.Int64Builder)
	seqs := g.b.Field(1).(*array.Int64Builder)
	names := g.b.Field(2).(*array.StringBuilder)
	amounts := g.b.Field(3).(*array.Float64Builder)
	tss := g.b.Field(4).(*array.TimestampBuilder)
	for i := from; i < from+n; i++ {
		op, id, h := g.event(i)
		ids.Append(id)
		seqs.Append(i)
		pos := strconv.FormatInt(i, 10)
		at := epoch.Add(time.Duration(i) * time.Millisecond) // the commit time of event i: deterministic, like its values
		if op == change.OpDelete {
			names.AppendNull()
			amounts.AppendNull()
			tss.AppendNull()
			if g.s.Nested {
				g.b.Field(5).AppendNull()
				g.b.Field(6).AppendNull()
			}
			g.b.RowAt(op, pos, at)
			continue
		}
		names.Append(words[h%uint64(len(words))] + "-" + strconv.FormatUint(h>>40, 36))
		amounts.Append(math.Round(float64(h%1000000)) / 100)
		tss.Append(arrow.Timestamp(epoch.Add(time.Duration(i) * time.Millisecond).UnixMicro()))
		if g.s.Nested {
			st := g.b.Field(5).(*array.StructBuilder)
			st.Append(true)
			st.FieldBuilder(0).(*array.StringBuilder).Append(cities[(h>>8)%uint64(len(cities))])
			st.FieldBuilder(1).(*array.Int32Builder).Append(int32((h >> 20) % 100000))
			lb := g.b.Field(6).(*array.ListBuilder)
			lb.Append(true)
			vb := lb.ValueBuilder().(*array.StringBuilder)
			for t := uint64(0); t < (h>>12)%3; t++ {
				vb.Append(words[(h>>(16+t*4))%uint64(len(words))])
			}
		}
		g.b.RowAt(op, pos, at)
	}
	return g.b.NewBatch()
}

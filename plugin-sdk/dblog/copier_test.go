package dblog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// fakeSource is a table of int keys behind a log of marks. It records every call, so a test can compare the
// sequence with what the package doc promises.
type fakeSource struct {
	t       *testing.T
	mem     *memory.CheckedAllocator
	rows    map[string][]int // each table's keys, sorted
	gone    map[string]bool
	stale   int // Settle drops this many chunks before it keeps one
	estim   int64
	log     []string // marks written and not yet handed back
	calls   []string
	emitted map[string][]int
}

func newFake(t *testing.T, rows map[string][]int) *fakeSource {
	return &fakeSource{t: t, mem: memory.NewCheckedAllocator(memory.NewGoAllocator()), rows: rows, gone: map[string]bool{}, emitted: map[string][]int{}}
}

func (f *fakeSource) Prepare(_ context.Context, table string) error {
	if f.gone[table] {
		return fmt.Errorf("table %s: %w", table, ErrGone)
	}
	return nil
}

func (f *fakeSource) Begin(_ context.Context, table string) (int64, error) {
	f.calls = append(f.calls, "begin "+table)
	return f.estim, nil
}

func (f *fakeSource) WriteMark(_ context.Context, table, m string) error {
	f.log = append(f.log, m)
	if strings.Contains(m, `"high":true`) {
		f.calls = append(f.calls, "high "+table)
	} else {
		f.calls = append(f.calls, "low "+table)
	}
	return nil
}

var fakeSchema = arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, nil)

func (f *fakeSource) ReadChunk(_ context.Context, table string, after []string) (Chunk, error) {
	from := 0
	if after != nil {
		k, _ := strconv.Atoi(after[0])
		from, _ = slices.BinarySearch(f.rows[table], k+1)
	}
	keys := f.rows[table][from:min(from+chunkRows, len(f.rows[table]))]
	f.calls = append(f.calls, fmt.Sprintf("read %s after %v: %d", table, after, len(keys)))
	if len(keys) == 0 {
		return Chunk{}, nil
	}
	b := array.NewInt64Builder(f.mem)
	defer b.Release()
	c := Chunk{Rows: len(keys)}
	for _, k := range keys {
		b.Append(int64(k))
		c.Keys = append(c.Keys, strconv.Itoa(k))
	}
	col := b.NewArray()
	defer col.Release()
	c.Rec = array.NewRecordBatch(fakeSchema, []arrow.Array{col}, int64(len(keys)))
	c.Last = []string{strconv.Itoa(keys[len(keys)-1])}
	return c, nil
}

func (f *fakeSource) Settle(_ context.Context, table string) (bool, error) {
	if f.stale > 0 {
		f.stale--
		f.calls = append(f.calls, "stale "+table)
		return false, nil
	}
	return true, nil
}

func (f *fakeSource) Emit(_ context.Context, table string, rec arrow.RecordBatch) error {
	ids := rec.Column(0).(*array.Int64)
	for i := range ids.Len() {
		f.emitted[table] = append(f.emitted[table], int(ids.Value(i)))
	}
	return nil
}

func (f *fakeSource) Copied(_ context.Context, table string, p Progress, kept int64, done bool) error {
	if done {
		f.calls = append(f.calls, fmt.Sprintf("done %s rows=%d begun=%v", table, p.Rows, p.Begun))
	}
	return nil
}

// chunkRows is the fake's chunk size.
const chunkRows = 3

// drain hands every mark written so far back to the copier, as the log would, with changed (keys of the chunk
// in flight's table) reported before them: changes the log carries between the chunk's start and its marks.
func (f *fakeSource) drain(ctx context.Context, c *Copier, changed ...string) error {
	if table, _, ok := c.InFlight(); ok {
		for _, k := range changed {
			c.Saw(table, k)
		}
	}
	log := f.log
	f.log = nil
	for _, m := range log {
		if err := c.Mark(ctx, []byte(m)); err != nil {
			return err
		}
	}
	return nil
}

func TestCopier(t *testing.T) {
	tests := []struct {
		name     string
		rows     map[string][]int
		progress map[string]Progress
		gone     []string
		stale    int
		changed  []string // keys the log changes while each chunk is in flight
		want     map[string][]int
		calls    []string
	}{
		{
			name:     "two tables in name order, the last chunk short",
			rows:     map[string][]int{"b": {1, 2, 3, 4}, "a": {7}},
			progress: map[string]Progress{"b": {}, "a": {}},
			want:     map[string][]int{"a": {7}, "b": {1, 2, 3, 4}},
			calls: []string{"begin a", "low a", "read a after []: 1", "high a", "done a rows=1 begun=true",
				"begin b", "low b", "read b after []: 3", "high b", "low b", "read b after [3]: 1", "high b", "done b rows=4 begun=true"},
		},
		{
			name:     "a table of whole chunks ends on an empty one",
			rows:     map[string][]int{"a": {1, 2, 3}},
			progress: map[string]Progress{"a": {}},
			want:     map[string][]int{"a": {1, 2, 3}},
			calls:    []string{"begin a", "low a", "read a after []: 3", "high a", "low a", "read a after [3]: 0", "high a", "done a rows=3 begun=true"},
		},
		{
			name:     "rows the log changed in the window are dropped",
			rows:     map[string][]int{"a": {1, 2, 3, 4, 5}},
			progress: map[string]Progress{"a": {}},
			changed:  []string{"2", "5", "99"},
			want:     map[string][]int{"a": {1, 3, 4}},
			calls:    []string{"begin a", "low a", "read a after []: 3", "high a", "low a", "read a after [3]: 2", "high a", "done a rows=3 begun=true"},
		},
		{
			name:     "a resumed copy goes on after its key without a second begin",
			rows:     map[string][]int{"a": {1, 2, 3, 4, 5}},
			progress: map[string]Progress{"a": {Key: []string{"3"}, Rows: 3, Begun: true}},
			want:     map[string][]int{"a": {4, 5}},
			calls:    []string{"low a", "read a after [3]: 2", "high a", "done a rows=5 begun=true"},
		},
		{
			name:     "a table gone before its first chunk ends without a begin",
			rows:     map[string][]int{"a": {1}, "b": {2}},
			progress: map[string]Progress{"a": {}, "b": {}},
			gone:     []string{"a"},
			want:     map[string][]int{"b": {2}},
			calls:    []string{"done a rows=0 begun=false", "begin b", "low b", "read b after []: 1", "high b", "done b rows=1 begun=true"},
		},
		{
			name:     "a stale chunk is read again from the same key",
			rows:     map[string][]int{"a": {1, 2}},
			progress: map[string]Progress{"a": {}},
			stale:    1,
			want:     map[string][]int{"a": {1, 2}},
			calls:    []string{"begin a", "low a", "read a after []: 2", "high a", "stale a", "low a", "read a after []: 2", "high a", "done a rows=2 begun=true"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFake(t, tt.rows)
			f.stale = tt.stale
			for _, g := range tt.gone {
				f.gone[g] = true
			}
			c := New(f, Config{ChunkRows: chunkRows, Log: "log"}, tt.progress)
			for i := 0; c.Active(); i++ {
				if i > 20 {
					t.Fatalf("still copying after %d steps: %v", i, f.calls)
				}
				if err := c.Step(ctx); err != nil {
					t.Fatal(err)
				}
				if err := f.drain(ctx, c, tt.changed...); err != nil {
					t.Fatal(err)
				}
			}
			if c.Progress() != nil {
				t.Errorf("progress %v after the end", c.Progress())
			}
			if fmt.Sprint(f.emitted) != fmt.Sprint(tt.want) {
				t.Errorf("emitted %v, want %v", f.emitted, tt.want)
			}
			if !slices.Equal(f.calls, tt.calls) {
				t.Errorf("calls\n%q\nwant\n%q", f.calls, tt.calls)
			}
			f.mem.AssertSize(t, 0)
		})
	}
}

// TestCopierMarks: marks that are not the chunk in flight's are ignored, a high mark before its low one is an
// error, and the progress a checkpoint carries moves only when a chunk went out.
func TestCopierMarks(t *testing.T) {
	ctx := context.Background()
	f := newFake(t, map[string][]int{"a": {1, 2, 3, 4}})
	c := New(f, Config{ChunkRows: chunkRows, Log: "binary log"}, map[string]Progress{"a": {}})
	if err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	low, high := f.log[0], f.log[1]
	other := New(newFake(t, nil), Config{ChunkRows: chunkRows}, nil)
	for _, m := range []string{`{"id":"` + other.nonce + `.1","table":"a","high":true}`, "not json", ""} {
		if err := c.Mark(ctx, []byte(m)); err != nil {
			t.Fatalf("mark %q: %v", m, err)
		}
	}
	if _, _, ok := c.InFlight(); !ok {
		t.Fatal("a foreign mark ended the chunk in flight")
	}
	err := c.Mark(ctx, []byte(high))
	if err == nil || !strings.Contains(err.Error(), "the high mark came out of the binary log before the low one") {
		t.Fatalf("a high mark before the low one: %v", err)
	}
	// Keys taken for a checkpoint before the chunk went out are still the old ones.
	if p := c.Progress()["a"]; p.Key != nil || !p.Begun {
		t.Fatalf("progress %+v before the chunk went out", p)
	}
	if err := c.Mark(ctx, []byte(low)); err != nil {
		t.Fatal(err)
	}
	if _, low, _ := c.InFlight(); !low {
		t.Fatal("the low mark did not open the chunk")
	}
	if err := c.Mark(ctx, []byte(high)); err != nil {
		t.Fatal(err)
	}
	p := c.Progress()["a"]
	if !slices.Equal(p.Key, []string{"3"}) || p.Rows != 3 {
		t.Fatalf("progress %+v after the first chunk, want key [3] and 3 rows", p)
	}
	p.Key[0] = "changed"
	if c.Progress()["a"].Key[0] != "3" {
		t.Fatal("Progress hands out the copier's own key slice")
	}
	// A chunk in flight at Close is released.
	if err := c.Step(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	f.mem.AssertSize(t, 0)
}

// failing is a Source whose every step can fail; the Copier stops at the first error and passes it on.
type failing struct {
	*fakeSource
	at string
}

var errBoom = errors.New("boom")

func (f failing) fail(step string) error {
	if f.at == step {
		return errBoom
	}
	return nil
}
func (f failing) Prepare(ctx context.Context, t string) error {
	if err := f.fail("prepare"); err != nil {
		return err
	}
	return f.fakeSource.Prepare(ctx, t)
}
func (f failing) Begin(ctx context.Context, t string) (int64, error) {
	if err := f.fail("begin"); err != nil {
		return 0, err
	}
	return f.fakeSource.Begin(ctx, t)
}
func (f failing) ReadChunk(ctx context.Context, t string, after []string) (Chunk, error) {
	if err := f.fail("read"); err != nil {
		return Chunk{}, err
	}
	return f.fakeSource.ReadChunk(ctx, t, after)
}
func (f failing) Emit(ctx context.Context, t string, rec arrow.RecordBatch) error {
	if err := f.fail("emit"); err != nil {
		return err
	}
	return f.fakeSource.Emit(ctx, t, rec)
}
func (f failing) Copied(ctx context.Context, t string, p Progress, kept int64, done bool) error {
	if err := f.fail("copied"); err != nil {
		return err
	}
	return f.fakeSource.Copied(ctx, t, p, kept, done)
}

func TestCopierErrors(t *testing.T) {
	for _, at := range []string{"prepare", "begin", "read", "emit", "copied"} {
		t.Run(at, func(t *testing.T) {
			ctx := context.Background()
			f := failing{newFake(t, map[string][]int{"a": {1, 2}}), at}
			c := New(f, Config{ChunkRows: chunkRows}, map[string]Progress{"a": {}})
			err := c.Step(ctx)
			if err == nil {
				err = f.drain(ctx, c)
			}
			if !errors.Is(err, errBoom) {
				t.Fatalf("error %v, want boom", err)
			}
			if !c.Active() {
				t.Fatal("a failed copy was forgotten")
			}
			c.Close()
			f.mem.AssertSize(t, 0)
		})
	}
}

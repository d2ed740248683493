package precheck

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

func TestUnsupported(t *testing.T) {
	dec := &arrow.Decimal256Type{Precision: 65, Scale: 30}
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "amount", Type: dec},
		{Name: "amounts", Type: arrow.ListOf(dec)},
		{Name: "nested", Type: arrow.StructOf(arrow.Field{Name: "a", Type: arrow.BinaryTypes.String}, arrow.Field{Name: "b", Type: dec})},
		{Name: "by_name", Type: arrow.MapOf(arrow.BinaryTypes.String, dec)},
		{Name: "dict", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: dec}},
		{Name: "fine", Type: arrow.StructOf(arrow.Field{Name: "x", Type: &arrow.Decimal128Type{Precision: 10, Scale: 2}})},
		{Name: "span", Type: arrow.FixedWidthTypes.Duration_us},
	}, nil)
	for _, tc := range []struct {
		name  string
		types []string
		want  []string
	}{
		{"none", nil, nil},
		{"decimal256 at any depth", []string{"decimal256"}, []string{"amount", "amounts", "nested", "by_name", "dict"}},
		{"a top-level type", []string{"duration"}, []string{"span"}},
		{"a nested container", []string{"struct"}, []string{"nested", "fine"}},
		{"absent", []string{"dense_union"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range Unsupported(schema, tc.types) {
				got = append(got, c.Column)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("columns %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRefusalClassAndFix(t *testing.T) {
	err := refuse(fault.Config, "destination lake cannot hold table t, column c: type decimal256(65, 30)", "change the column's type")
	if !errors.Is(err, ErrRefused) || !errors.Is(err, fault.ErrConfig) || fault.FixOf(err) != "change the column's type" {
		t.Fatalf("refusal %v: refused %v, config %v, fix %q", err, errors.Is(err, ErrRefused), errors.Is(err, fault.ErrConfig), fault.FixOf(err))
	}
}

type fakeSource struct{ streams []connector.Stream }

func (s fakeSource) Check(context.Context) error { return nil }
func (s fakeSource) Discover(context.Context) ([]connector.Stream, error) {
	return s.streams, nil
}

type fakeDest struct{}

func (fakeDest) Check(context.Context) error { return nil }
func (fakeDest) Capabilities(context.Context) (connector.Capabilities, error) {
	return connector.Capabilities{}, nil
}

// TestRowMetaClash: a destination whose soft_delete or metadata_columns add a column a source stream already
// has is refused at start, naming the pipeline, destination, table and column; other settings pass.
func TestRowMetaClash(t *testing.T) {
	sc := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "_skippr_synced_at", Type: arrow.BinaryTypes.String, Nullable: true},
	}, []string{"id"})
	ipc, err := protocol.EncodeSchema(memory.DefaultAllocator, sc)
	if err != nil {
		t.Fatal(err)
	}
	src := fakeSource{streams: []connector.Stream{{Name: "public.t", ArrowSchema: ipc}}}
	for _, tc := range []struct {
		settings string
		refused  bool
	}{
		{`{"path": "x", "metadata_columns": ["synced_at"]}`, true},
		{`{"path": "x", "metadata_columns": ["op", "position"], "soft_delete": true}`, false},
		{`{"path": "x"}`, false},
		{`{"path": "x", "metadata_columns": "not a list"}`, false}, // the plugin's own check refuses it
	} {
		err := Run(context.Background(), Config{
			Pipeline:     "p",
			Source:       Endpoint[Source]{Name: "src", Plugin: src},
			Destinations: []Endpoint[Destination]{{Name: "wh", Plugin: fakeDest{}, Settings: []byte(tc.settings)}},
		})
		if !tc.refused {
			if err != nil {
				t.Errorf("%s: %v", tc.settings, err)
			}
			continue
		}
		if !errors.Is(err, ErrRefused) || !errors.Is(err, fault.ErrConfig) || fault.FixOf(err) == "" ||
			!strings.Contains(err.Error(), "pipeline p: destination wh: table public.t has a column _skippr_synced_at") {
			t.Errorf("%s: %v, want a config refusal with a fix naming pipeline, destination, table and column", tc.settings, err)
		}
	}
}

type capsDest struct{ caps connector.Capabilities }

func (capsDest) Check(context.Context) error { return nil }
func (d capsDest) Capabilities(context.Context) (connector.Capabilities, error) {
	return d.caps, nil
}

// TestFullRowRefused: a stream matched by full row is refused at start when a destination cannot apply it,
// naming the table and each such destination; destinations that can, or keyed streams, pass.
func TestFullRowRefused(t *testing.T) {
	fields := []arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}
	encode := func(sc *arrow.Schema) []byte {
		ipc, err := protocol.EncodeSchema(memory.DefaultAllocator, sc)
		if err != nil {
			t.Fatal(err)
		}
		return ipc
	}
	full := connector.Stream{Name: "public.bag", ArrowSchema: encode(change.WithFullRow(change.Schema(fields, nil)))}
	keyed := connector.Stream{Name: "public.k", ArrowSchema: encode(change.Schema(fields, []string{"a"}))}
	can, cannot := capsDest{connector.Capabilities{FullRow: true}}, capsDest{}
	for _, tc := range []struct {
		name    string
		streams []connector.Stream
		dests   []Endpoint[Destination]
		only    []string
		refused string // "" not refused, else what the message must hold
	}{
		{"full row into destinations that apply it", []connector.Stream{full, keyed},
			[]Endpoint[Destination]{{Name: "pg", Plugin: can}, {Name: "duck", Plugin: can}}, nil, ""},
		{"full row into a lake", []connector.Stream{full, keyed},
			[]Endpoint[Destination]{{Name: "pg", Plugin: can}, {Name: "lake", Plugin: cannot}, {Name: "wh", Plugin: cannot}}, nil,
			"table public.bag is keyless and matched by full row (mode: full_row), which destination lake, wh cannot apply"},
		{"full row into a destination with soft_delete", []connector.Stream{full},
			[]Endpoint[Destination]{{Name: "pg", Plugin: can}, {Name: "soft", Plugin: can, Settings: []byte(`{"soft_delete": true}`)}}, nil,
			"which destination soft cannot apply"},
		{"keyed only into a lake", []connector.Stream{keyed}, []Endpoint[Destination]{{Name: "lake", Plugin: cannot}}, nil, ""},
		{"the full row table left out of the pipeline", []connector.Stream{full, keyed},
			[]Endpoint[Destination]{{Name: "lake", Plugin: cannot}}, []string{"public.k"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(context.Background(), Config{Pipeline: "p", Source: Endpoint[Source]{Name: "src", Plugin: fakeSource{streams: tc.streams}},
				Destinations: tc.dests, Streams: tc.only})
			if tc.refused == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrRefused) || !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), tc.refused) ||
				!strings.Contains(fault.FixOf(err), "mode: append") {
				t.Fatalf("err = %v (fix %q), want a config refusal holding %q", err, fault.FixOf(err), tc.refused)
			}
		})
	}
}

// TestRowMetaPerStream: the clash check takes each stream's own options (table_options over the connection's),
// and a table_options key naming no stream the source discovers is refused at start, naming the key and the
// streams there are — unless the destination serves other pipelines too, whose streams it may name.
func TestRowMetaPerStream(t *testing.T) {
	clash := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "_skippr_deleted", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	}, []string{"id"})
	plain := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, []string{"id"})
	var streams []connector.Stream
	for name, sc := range map[string]*arrow.Schema{"public.flags": clash, "public.orders": plain} {
		ipc, err := protocol.EncodeSchema(memory.DefaultAllocator, sc)
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, connector.Stream{Name: name, ArrowSchema: ipc})
	}
	src := fakeSource{streams: streams}
	for _, tc := range []struct {
		settings string
		shared   bool
		want     string // "": not refused
	}{
		// public.flags has _skippr_deleted: soft delete on for it alone is a clash, off for it alone is not.
		{settings: `{"soft_delete": true}`, want: "table public.flags has a column _skippr_deleted"},
		{settings: `{"soft_delete": true, "table_options": {"public.flags": {"soft_delete": false}}}`},
		{settings: `{"table_options": {"public.flags": {"soft_delete": true}}}`, want: "table public.flags has a column _skippr_deleted"},
		{settings: `{"table_options": {"public.orders": {"soft_delete": true}}}`},
		// A key naming no stream.
		{settings: `{"table_options": {"public.order": {"history": true}}}`, want: "table_options names public.order, which is no stream of source src (its streams: public.flags, public.orders)"},
		{settings: `{"table_options": {"public.order": {"history": true}}}`, shared: true},
	} {
		err := Run(context.Background(), Config{
			Pipeline:     "p",
			Source:       Endpoint[Source]{Name: "src", Plugin: src},
			Destinations: []Endpoint[Destination]{{Name: "wh", Plugin: fakeDest{}, Settings: []byte(tc.settings), Shared: tc.shared}},
		})
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s (shared %v): %v", tc.settings, tc.shared, err)
			}
			continue
		}
		if !errors.Is(err, ErrRefused) || !errors.Is(err, fault.ErrConfig) || fault.FixOf(err) == "" ||
			!strings.Contains(err.Error(), "pipeline p: destination wh: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a config refusal with a fix containing %q", tc.settings, err, tc.want)
		}
	}
}

// gatedSource and gatedDest meet in their Checks: each waits until the other has begun, so a Run that checks
// one after the other never returns.
type gatedSource struct {
	fakeSource
	srcIn, dstIn chan struct{}
	err          error
}

func (s gatedSource) Check(ctx context.Context) error {
	close(s.srcIn)
	select {
	case <-s.dstIn:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

type gatedDest struct {
	fakeDest
	srcIn, dstIn chan struct{}
	err          error
}

func (d gatedDest) Check(ctx context.Context) error {
	close(d.dstIn)
	select {
	case <-d.srcIn:
		return d.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestChecksRunAtOnce: the source's and the destinations' checks run at the same time (an hourly job's start
// waits for the slowest, not their sum), and the first refusal named is still the one a run in order would
// meet: the source's before a destination's.
func TestChecksRunAtOnce(t *testing.T) {
	refusal := func(msg string) error {
		return &client.CheckError{Class: fault.Config, Message: msg}
	}
	for _, tc := range []struct {
		name     string
		src, dst error
		want     string
	}{
		{"both pass", nil, nil, ""},
		{"the source's refusal first", refusal("source says no"), refusal("destination says no"), "source says no"},
		{"the destination's", nil, refusal("destination says no"), "destination says no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srcIn, dstIn := make(chan struct{}), make(chan struct{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := Run(ctx, Config{
				Pipeline:     "p",
				Source:       Endpoint[Source]{Name: "src", Plugin: gatedSource{srcIn: srcIn, dstIn: dstIn, err: tc.src}},
				Destinations: []Endpoint[Destination]{{Name: "out", Plugin: gatedDest{srcIn: srcIn, dstIn: dstIn, err: tc.dst}}},
			})
			if ctx.Err() != nil {
				t.Fatalf("Run waited for the source's check to end before the destination's began: %v", err)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Run: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrRefused)):
				t.Fatalf("Run: %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
}

// capsAfterSource's Capabilities answers only once the source's check has begun (srcIn closed).
type capsAfterSource struct {
	fakeDest
	srcIn chan struct{}
}

func (d capsAfterSource) Capabilities(ctx context.Context) (connector.Capabilities, error) {
	select {
	case <-d.srcIn:
		return d.fakeDest.Capabilities(ctx)
	case <-ctx.Done():
		return connector.Capabilities{}, ctx.Err()
	}
}

// startedSource's Check says it began (closes srcIn) and passes.
type startedSource struct {
	fakeSource
	srcIn chan struct{}
}

func (s startedSource) Check(context.Context) error {
	close(s.srcIn)
	return nil
}

// TestChecksBeforeCapabilities: the source's check begins before the destinations are asked for their
// capabilities, a round trip the check does not need (an hourly job's start, issue #31).
func TestChecksBeforeCapabilities(t *testing.T) {
	srcIn := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := Run(ctx, Config{
		Pipeline:     "p",
		Source:       Endpoint[Source]{Name: "src", Plugin: startedSource{srcIn: srcIn}},
		Destinations: []Endpoint[Destination]{{Name: "out", Plugin: capsAfterSource{srcIn: srcIn}}},
	})
	if ctx.Err() != nil || err != nil {
		t.Fatalf("Run: %v (the capabilities were asked before the source's check began?)", err)
	}
}

package resnapshot

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestStore(t *testing.T) {
	s := Store{Dir: t.TempDir() + "/requests"}
	if p, err := s.Pending(); err != nil || len(p) != 0 {
		t.Fatalf("empty store: %v %v", p, err)
	}
	first, err := s.Add([]string{"public.orders", "odd/name"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.Add([]string{"public.orders"})
	if err != nil {
		t.Fatal(err)
	}
	if again[0].ID != first[0].ID {
		t.Fatalf("asking again made a new request: %v, then %v", first[0], again[0])
	}
	p, err := s.Pending()
	if err != nil || len(p) != 2 {
		t.Fatalf("pending %v %v", p, err)
	}
	// A request removed and made again while a sync held the old one: the sync's Done leaves the new one.
	if err := s.Done(first[1:]); err != nil {
		t.Fatal(err)
	}
	renewed, err := s.Add([]string{"odd/name"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Done(first); err != nil {
		t.Fatal(err)
	}
	p, err = s.Pending()
	if err != nil || fmt.Sprint(p) != fmt.Sprint(renewed) {
		t.Fatalf("pending %v (%v), want only the renewed request %v", p, err, renewed)
	}
}

func TestCheck(t *testing.T) {
	offered := []string{"public.orders", "public.users"}
	for _, tc := range []struct {
		name    string
		streams []string
		source  string
		lacking []string
		want    []string // substrings of the error; nil: no error
	}{
		{"all can", []string{"public.orders"}, "", nil, nil},
		{"misspelt", []string{"public.order"}, "", nil, []string{`did you mean "public.orders"`}},
		{"source cannot", []string{"public.orders"}, "gen (plugin datagen)", nil,
			[]string{"source gen (plugin datagen) cannot re-snapshot", "source.resnapshot", "re-create the pipeline"}},
		{"destination cannot", []string{"public.orders"}, "", []string{"lake"},
			[]string{"destination lake cannot apply a re-snapshot", "take it out of the pipeline"}},
		{"both, before the stream", []string{"nope"}, "gen (plugin datagen)", []string{"lake"},
			[]string{"source gen (plugin datagen) cannot", "; destination lake cannot"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(tc.streams, offered, tc.source, tc.lacking)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("%v: not ErrRefused", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("%v: lacks %q", err, w)
				}
			}
		})
	}
}

package resnapshot

import (
	"fmt"
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

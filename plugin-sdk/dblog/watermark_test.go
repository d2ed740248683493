package dblog

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

func TestKeptRuns(t *testing.T) {
	tests := []struct {
		name    string
		keys    []string
		changed []string
		want    [][2]int
	}{
		{"nothing changed", []string{"a", "b", "c"}, nil, [][2]int{{0, 3}}},
		{"everything changed", []string{"a", "b"}, []string{"a", "b"}, nil},
		{"empty chunk", nil, []string{"a"}, nil},
		{"first and last changed", []string{"a", "b", "c", "d"}, []string{"a", "d"}, [][2]int{{1, 3}}},
		{"gaps", []string{"a", "b", "c", "d", "e"}, []string{"b", "d"}, [][2]int{{0, 1}, {2, 3}, {4, 5}}},
		{"a key the chunk lacks", []string{"a", "b"}, []string{"z"}, [][2]int{{0, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changed := map[string]bool{}
			for _, k := range tt.changed {
				changed[k] = true
			}
			var got [][2]int
			kept, err := KeptRuns(tt.keys, changed, func(s, e int) error { got = append(got, [2]int{s, e}); return nil })
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("runs %v, want %v", got, tt.want)
			}
			var n int64
			for _, r := range tt.want {
				n += int64(r[1] - r[0])
			}
			if kept != n {
				t.Errorf("kept %d, want %d", kept, n)
			}
		})
	}
}

func TestKeptRunsStopsAtError(t *testing.T) {
	boom := errors.New("boom")
	calls := 0
	kept, err := KeptRuns([]int{1, 2, 3}, map[int]bool{2: true}, func(s, e int) error {
		calls++
		return fmt.Errorf("run %d-%d: %w", s, e, boom)
	})
	if !errors.Is(err, boom) || calls != 1 || kept != 0 {
		t.Fatalf("kept %d, calls %d, err %v: want 0, 1 and boom", kept, calls, err)
	}
}

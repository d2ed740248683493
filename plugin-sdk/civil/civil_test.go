package civil

import (
	"testing"
	"time"
)

func TestDaysMatchesTime(t *testing.T) {
	// time.Date covers years 1..9999 here as the reference; every day of a few spans, and far ends.
	for _, start := range []time.Time{
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1899, 12, 25, 0, 0, 0, 0, time.UTC),
		time.Date(1969, 12, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2000, 2, 20, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 11, 1, 0, 0, 0, 0, time.UTC),
	} {
		for i := 0; i < 800; i++ {
			tm := start.AddDate(0, 0, i)
			if tm.Year() > 9999 {
				break
			}
			want := tm.Unix() / 86400
			got := Days(int64(tm.Year()), int64(tm.Month()), int64(tm.Day()))
			if got != want {
				t.Fatalf("Days(%s) = %d, want %d", tm.Format(time.DateOnly), got, want)
			}
			if y, m, d := Date(want); y != int64(tm.Year()) || m != int64(tm.Month()) || d != int64(tm.Day()) {
				t.Fatalf("Date(%d) = %d-%d-%d, want %s", want, y, m, d, tm.Format(time.DateOnly))
			}
		}
	}
}

func TestDaysBeyondTime(t *testing.T) {
	tests := []struct {
		y, m, d int64
	}{{0, 1, 1}, {-1, 12, 31}, {-4713, 11, 24}, {-400, 2, 29}, {294276, 12, 31}, {5874897, 12, 31}}
	for _, tt := range tests {
		days := Days(tt.y, tt.m, tt.d)
		if y, m, d := Date(days); y != tt.y || m != tt.m || d != tt.d {
			t.Errorf("Date(Days(%d-%d-%d)) = %d-%d-%d", tt.y, tt.m, tt.d, y, m, d)
		}
	}
	if got := Days(2024, 2, 31); got != Days(2024, 3, 2) {
		t.Errorf("Days(2024-02-31) = %d, want that of 2024-03-02 (%d)", got, Days(2024, 3, 2))
	}
	if got := Days(0, 12, 31) + 1; got != Days(1, 1, 1) {
		t.Errorf("0000-12-31 + 1 day = %d, want 0001-01-01 (%d)", got, Days(1, 1, 1))
	}
}

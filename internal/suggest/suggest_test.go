package suggest

import "testing"

func TestClosest(t *testing.T) {
	keys := []string{"source", "destinations", "destination", "streams", "delivery", "wal", "apply"}
	tests := []struct{ in, want string }{
		{"sourse", "source"},
		{"destinaton", "destination"},
		{"Delivery", "delivery"},
		{"wla", "wal"},
		{"stream", "streams"},
		{"colour", ""},
		{"x", ""},
	}
	for _, tt := range tests {
		if got := Closest(tt.in, keys); got != tt.want {
			t.Errorf("Closest(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

package glob

import "testing"

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"*", "", true},
		{"*", "orders", true},
		{"orders_*", "orders_2024", true},
		{"orders_*", "orders_", true},
		{"orders_*", "orders", false},
		{"orders_*", "xorders_1", false},
		{"*_log", "audit_log", true},
		{"*_log", "audit_logs", false},
		{"o?ders", "orders", true},
		{"o?ders", "oders", false},
		{"?", "é", true}, // one character, two bytes
		{"a*b*c", "abc", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"a*b*c", "acb", false},
		{"exact", "exact", true},
		{"exact", "Exact", false}, // case is folded by the source, not here
		{"**", "x", true},
		{"shop.*", "shop.items", true},
		{"shop.*", "shopx.items", false},
	} {
		if got := Match(tc.pattern, tc.name); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestHas(t *testing.T) {
	for s, want := range map[string]bool{"orders": false, "orders_*": true, "o?": true, "": false} {
		if Has(s) != want {
			t.Errorf("Has(%q) = %v, want %v", s, !want, want)
		}
	}
}

package config

import (
	"testing"
	"time"
)

func TestInterpolate(t *testing.T) {
	env := envOf(map[string]string{"A": "alpha", "B": "beta", "EMPTY": "", "DOLLAR": "${A}"})
	tests := []struct {
		in, want string
		secret   bool
		err      string
	}{
		{in: "plain", want: "plain"},
		{in: "${A}", want: "alpha", secret: true},
		{in: "x-${A}-${B}-y", want: "x-alpha-beta-y", secret: true},
		{in: "${A:-default}", want: "alpha", secret: true},
		{in: "${MISSING:-default}", want: "default", secret: true},
		{in: "${EMPTY:-default}", want: "default", secret: true},
		{in: "${EMPTY}", want: "", secret: true},
		{in: "${MISSING:-}", want: "", secret: true},
		{in: "${MISSING:-a:-b $c}", want: "a:-b $c", secret: true},
		{in: "$${A}", want: "${A}"},
		{in: "$$${A}", want: "$${A}"},
		{in: "$${A} and ${B}", want: "${A} and beta", secret: true},
		{in: "cost $5, $$ and $A", want: "cost $5, $$ and $A"},
		{in: "${DOLLAR}", want: "${A}", secret: true}, // values are not expanded again
		{in: "${MISSING}", err: "environment variable MISSING is not set (give a default with ${MISSING:-value})"},
		{in: "${M1}${A}${M2}", err: "environment variables M1, M2 are not set"},
		{in: "${A", err: `unterminated "${" (write "$${" for a literal "${")`},
		{in: "${}", err: `invalid variable name "" in "${}" (want letters, digits and _, not starting with a digit)`},
		{in: "${A-B}", err: `invalid variable name "A-B" in "${A-B}" (want letters, digits and _, not starting with a digit)`},
		{in: "${9A}", err: `invalid variable name "9A" in "${9A}" (want letters, digits and _, not starting with a digit)`},
	}
	for _, tt := range tests {
		got, secret, err := interpolate(tt.in, env)
		switch {
		case tt.err != "":
			if err == nil || err.Error() != tt.err {
				t.Errorf("interpolate(%q) err = %v; want %q", tt.in, err, tt.err)
			}
		case err != nil:
			t.Errorf("interpolate(%q): %v", tt.in, err)
		case got != tt.want || secret != tt.secret:
			t.Errorf("interpolate(%q) = %q, %v; want %q, %v", tt.in, got, secret, tt.want, tt.secret)
		}
	}
	if _, _, err := interpolate("${A}", nil); err == nil {
		t.Error("nil env: want every variable unset")
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  string
	}{
		{in: "0", want: 0},
		{in: "512", want: 512},
		{in: "100B", want: 100},
		{in: "4KiB", want: 4 << 10},
		{in: "8MiB", want: 8 << 20},
		{in: "8 MiB", want: 8 << 20},
		{in: "1GiB", want: 1 << 30},
		{in: "2TiB", want: 2 << 40},
		{in: "8MB", err: `unknown unit "MB" (use B, KiB, MiB, GiB or TiB)`},
		{in: "8mib", err: `unknown unit "mib" (use B, KiB, MiB, GiB or TiB)`},
		{in: "1.5GiB", err: `unknown unit ".5GiB" (use B, KiB, MiB, GiB or TiB)`},
		{in: "-1", err: "want a whole number of bytes with an optional unit B, KiB, MiB, GiB or TiB, e.g. 8MiB"},
		{in: "MiB", err: "want a whole number of bytes with an optional unit B, KiB, MiB, GiB or TiB, e.g. 8MiB"},
		{in: "9999999TiB", err: "too large"},
		{in: "99999999999999999999", err: "too large"},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		switch {
		case tt.err != "":
			if err == nil || err.Error() != tt.err {
				t.Errorf("parseSize(%q) err = %v; want %q", tt.in, err, tt.err)
			}
		case err != nil || got != tt.want:
			t.Errorf("parseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"200ms", 200 * time.Millisecond, true},
		{"1m30s", 90 * time.Second, true},
		{"0", 0, true},
		{"200", 0, false},
		{"-1s", 0, false},
		{"soon", 0, false},
	}
	for _, tt := range tests {
		got, err := parseDuration(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestIsJSONNumber(t *testing.T) {
	for s, want := range map[string]bool{
		"0": true, "-1": true, "12.5": true, "1e3": true, "-0.5E-2": true, "5432": true,
		"": false, "0123": false, "+1": false, ".5": false, "1.": false, "1e": false, "0x1F": false, "1_000": false, "NaN": false,
	} {
		if got := isJSONNumber(s); got != want {
			t.Errorf("isJSONNumber(%q) = %v; want %v", s, got, want)
		}
	}
}

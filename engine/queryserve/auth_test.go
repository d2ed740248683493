package queryserve

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestAuthCheck(t *testing.T) {
	a, err := newAuth([]Token{{"notebook", "nb-0123456789abcdef"}, {"bi", "bi-0123456789abcdef"}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		headers []string
		client  string // "": refused
	}{
		{"notebook", []string{"Bearer nb-0123456789abcdef"}, "notebook"},
		{"bi", []string{"Bearer bi-0123456789abcdef"}, "bi"},
		{"no header", nil, ""},
		{"empty bearer", []string{"Bearer "}, ""},
		{"wrong token", []string{"Bearer nb-0123456789abcdeX"}, ""},
		{"a prefix of a token", []string{"Bearer nb-0123"}, ""},
		{"a token with more after it", []string{"Bearer nb-0123456789abcdef0"}, ""},
		{"not bearer", []string{"Basic nb-0123456789abcdef"}, ""},
		{"lower-case scheme", []string{"bearer nb-0123456789abcdef"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			if c.headers != nil {
				ctx = metadata.NewIncomingContext(ctx, metadata.MD{"authorization": c.headers})
			}
			got, err := a.check(ctx, "/m")
			if c.client == "" {
				if status.Code(err) != codes.Unauthenticated {
					t.Fatalf("%v, want Unauthenticated", err)
				}
				return
			}
			if err != nil || clientName(got) != c.client {
				t.Fatalf("client %q, %v; want %q", clientName(got), err, c.client)
			}
		})
	}
	// Without tokens every call passes (allowed on loopback only: CheckExposure).
	open, _ := newAuth(nil, slog.New(slog.DiscardHandler))
	if _, err := open.check(context.Background(), "/m"); err != nil {
		t.Fatal(err)
	}
}

func TestNewAuthRefuses(t *testing.T) {
	for _, c := range []struct {
		tokens []Token
		want   string
	}{
		{[]Token{{"", "0123456789abcdef"}}, "client name"},
		{[]Token{{"a", ""}}, "empty token"},
		{[]Token{{"a", "short"}}, "at least 16"},
		{[]Token{{"a", "0123456789abcdef"}, {"a", "fedcba9876543210"}}, "two tokens"},
	} {
		if _, err := newAuth(c.tokens, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.tokens, err, c.want)
		}
	}
}

func TestCheckExposure(t *testing.T) {
	tok := Listen{Tokens: []Token{{"a", "0123456789abcdef"}}}
	for _, c := range []struct {
		addr string
		l    Listen
		ok   bool
	}{
		{"127.0.0.1:31337", Listen{}, true},
		{"[::1]:0", Listen{}, true},
		{"localhost:1", Listen{}, true},
		{"0.0.0.0:31337", Listen{}, false},
		{":31337", Listen{}, false},
		{"10.1.2.3:31337", Listen{}, false},
		{"0.0.0.0:31337", tok, true},
	} {
		if err := CheckExposure(c.addr, c.l); (err == nil) != c.ok {
			t.Errorf("%s (tokens %d): %v, want ok %v", c.addr, len(c.l.Tokens), err, c.ok)
		}
	}
}

// TestCheckTokens: what skippr-serve refuses before it starts any plugin (exit 2).
func TestCheckTokens(t *testing.T) {
	for _, tc := range []struct {
		tokens []Token
		err    string
	}{
		{tokens: nil},
		{tokens: []Token{{"nb", "nb-0123456789abcdef"}}},
		{tokens: []Token{{"nb", "short"}}, err: "at least 16"},
		{tokens: []Token{{"", "nb-0123456789abcdef"}}, err: "client name"},
		{tokens: []Token{{"nb", "nb-0123456789abcdef"}, {"nb", "nb-fedcba9876543210"}}, err: "two tokens"},
	} {
		err := CheckTokens(tc.tokens)
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%v: %v, want %q", tc.tokens, err, tc.err)
		}
	}
}

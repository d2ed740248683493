package ingest

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

func TestCredentials(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tokens []namedToken
		legacy string
		names  string // of the credentials, when valid
		errHas string
	}{
		{name: "none", names: ""},
		{name: "legacy alias", legacy: "s3cret", names: "bearer_token"},
		{name: "two named", tokens: []namedToken{{"old", "a1"}, {"new", "b2"}}, names: "old,new"},
		{name: "both settings", tokens: []namedToken{{"new", "b2"}}, legacy: "s3cret", errHas: "bearer_token and tokens are both set"},
		{name: "empty list", tokens: []namedToken{}, errHas: "empty list"},
		{name: "duplicate name", tokens: []namedToken{{"a", "a1"}, {"a", "b2"}}, errHas: `"a" appears twice`},
		{name: "duplicate value", tokens: []namedToken{{"a", "s3cret"}, {"b", "s3cret"}}, errHas: "tokens a and b have the same value"},
		{name: "empty token", tokens: []namedToken{{"a", ""}}, errHas: "empty token"},
		{name: "token with a newline", tokens: []namedToken{{"a", "s3cret\n"}}, errHas: "white space"},
		{name: "bad name", tokens: []namedToken{{"a b", "s3cret"}}, errHas: "not a token name"},
		{name: "no name", tokens: []namedToken{{"", "s3cret"}}, errHas: "not a token name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			creds, err := credentials(tc.tokens, tc.legacy)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("got %v, want an error containing %q", err, tc.errHas)
				}
				if !errors.Is(err, fault.ErrConfig) || fault.FixOf(err) == "" {
					t.Errorf("not a config error with a fix: %v", err)
				}
				if strings.Contains(err.Error(), "s3cret") || strings.Contains(fault.FixOf(err), "s3cret") {
					t.Errorf("the error shows the token: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, c := range creds {
				names = append(names, c.name)
			}
			if got := strings.Join(names, ","); got != tc.names {
				t.Fatalf("credentials %s, want %s", got, tc.names)
			}
		})
	}
}

func TestAuthenticate(t *testing.T) {
	creds, err := credentials([]namedToken{{"old", "tok-a"}, {"new", "tok-b"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		header string
		name   string // "" = refused
	}{
		{"Bearer tok-a", "old"},
		{"Bearer tok-b", "new"},
		{"", ""},
		{"tok-a", ""},
		{"Basic tok-a", ""},
		{"Bearer tok-", ""},
		{"Bearer tok-ab", ""},
		{"Bearer ", ""},
		{"bearer tok-a", "old"},
		{"Bearer  tok-a", ""},
	} {
		r, _ := http.NewRequest(http.MethodPost, "/", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		name, ok := authenticate(r, creds)
		if ok != (tc.name != "") || name != tc.name {
			t.Errorf("Authorization %q: got %q %v, want %q", tc.header, name, ok, tc.name)
		}
	}
}

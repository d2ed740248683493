package ingest

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// namedToken is one accepted bearer token. The name is what logs show; the value never leaves this package.
type namedToken struct {
	Name  string `json:"name"`
	Token string `json:"token"`
}

// credential is a token as the server keeps it: its SHA-256, so every comparison is between 32-byte values
// and its timing says nothing about the token's length or prefix.
type credential struct {
	name string
	sum  [sha256.Size]byte
}

// legacyTokenName names the token of the deprecated bearer_token setting in logs.
const legacyTokenName = "bearer_token"

var tokenName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)

// credentials turns tokens (or the deprecated bearer_token) into the credentials requests are checked
// against. None means requests need no token.
func credentials(tokens []namedToken, legacy string) ([]credential, error) {
	if legacy != "" && tokens != nil {
		return nil, fault.ConfigErr(errors.New("settings: bearer_token and tokens are both set"),
			"move the bearer_token value into tokens as {name: …, token: …} and remove bearer_token")
	}
	if legacy != "" {
		tokens = []namedToken{{Name: legacyTokenName, Token: legacy}}
	} else if tokens != nil && len(tokens) == 0 {
		return nil, fault.ConfigErr(errors.New("settings: tokens is an empty list, which would refuse every request"),
			"add a token ({name: …, token: ${ENV}}) or remove tokens to accept requests without one")
	}
	var out []credential
	seen := map[string]bool{}
	for i, t := range tokens {
		switch {
		case !tokenName.MatchString(t.Name):
			return nil, fault.ConfigErr(fmt.Errorf("settings: tokens[%d].name %q is not a token name", i, t.Name),
				"name each token with letters, digits, '_', '.', '-' (at most 64), e.g. \"billing-2026-12\"")
		case seen[t.Name]:
			return nil, fault.ConfigErr(fmt.Errorf("settings: tokens: the name %q appears twice", t.Name),
				"give every token its own name so the logs say which one a client used")
		case t.Token == "":
			return nil, fault.ConfigErr(fmt.Errorf("settings: tokens[%d] (%s) has an empty token", i, t.Name),
				"set the token, usually as ${ENV} of a set environment variable")
		case strings.TrimSpace(t.Token) != t.Token || strings.ContainsAny(t.Token, "\r\n"):
			return nil, fault.ConfigErr(fmt.Errorf("settings: tokens[%d] (%s) starts or ends with white space", i, t.Name),
				"remove the white space around the token (a trailing newline from a secret file is the usual cause)")
		}
		seen[t.Name] = true
		c := credential{name: t.Name, sum: sha256.Sum256([]byte(t.Token))}
		for _, o := range out {
			if subtle.ConstantTimeCompare(o.sum[:], c.sum[:]) == 1 {
				return nil, fault.ConfigErr(fmt.Errorf("settings: tokens %s and %s have the same value", o.name, t.Name),
					"give each token its own value, so that removing one does not lock out the clients of the other")
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// authenticate returns the name of the token the request carries, comparing against every credential in
// constant time (no early exit, so the timing does not say which one matched).
func authenticate(r *http.Request, creds []credential) (string, bool) {
	got, ok := bearerToken(r)
	if !ok {
		return "", false
	}
	sum := sha256.Sum256([]byte(got))
	match := -1
	for i, c := range creds {
		if subtle.ConstantTimeCompare(sum[:], c.sum[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return "", false
	}
	return creds[match].name, true
}

// bearerToken returns the token of an Authorization header; the scheme is case-insensitive (RFC 7235).
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return token, ok && strings.EqualFold(scheme, "Bearer")
}

// authLog logs, by token name, the first request each token authorises (what an operator rotating a token
// looks for: is the old one still in use?) and refused requests, at most once per interval with a count of
// those it left out, so a client hammering with a wrong token cannot flood the log.
type authLog struct {
	interval time.Duration

	mu         sync.Mutex
	used       map[string]time.Time
	lastRefuse time.Time
	suppressed int
}

func newAuthLog() *authLog {
	return &authLog{interval: 10 * time.Second, used: map[string]time.Time{}}
}

func (l *authLog) accepted(name string, r *http.Request) {
	l.mu.Lock()
	_, seen := l.used[name]
	l.used[name] = time.Now()
	l.mu.Unlock()
	if !seen {
		slog.Info("first request with token", "token", name, "remote", r.RemoteAddr, "path", r.URL.Path)
	}
	slog.Debug("request authorised", "token", name, "remote", r.RemoteAddr, "path", r.URL.Path)
}

func (l *authLog) refused(r *http.Request) {
	now := time.Now()
	l.mu.Lock()
	if now.Sub(l.lastRefuse) < l.interval {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	n := l.suppressed
	l.lastRefuse, l.suppressed = now, 0
	l.mu.Unlock()
	reason := "no bearer token"
	if _, ok := bearerToken(r); ok {
		reason = "a bearer token that matches none of tokens"
	}
	slog.Warn("refused a request (401)", "reason", reason, "remote", r.RemoteAddr, "path", r.URL.Path, "refusals_not_logged", n)
}

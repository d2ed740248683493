package queryserve

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Token is one client's bearer token. The name is what the log says; the secret is never logged.
type Token struct {
	Client string
	Secret string
}

// auth checks every call's `authorization: Bearer <token>` header against the tokens. Each presented token is
// compared with every known one in constant time (over their SHA-256, so that length tells nothing either),
// and the loop does not stop at a match: the time taken says nothing about which token, or how much of one,
// was right.
type auth struct {
	tokens []Token
	sums   [][sha256.Size]byte
	log    *slog.Logger
}

func newAuth(tokens []Token, log *slog.Logger) (*auth, error) {
	a := &auth{tokens: tokens, log: log}
	seen := map[string]bool{}
	for _, t := range tokens {
		switch {
		case t.Client == "":
			return nil, errors.New("a token needs a client name")
		case t.Secret == "":
			return nil, fmt.Errorf("client %s: empty token", t.Client)
		case len(t.Secret) < 16:
			return nil, fmt.Errorf("client %s: the token is %d characters; use at least 16 random ones (e.g. openssl rand -hex 32)", t.Client, len(t.Secret))
		case seen[t.Client]:
			return nil, fmt.Errorf("client %s has two tokens", t.Client)
		}
		seen[t.Client] = true
		a.sums = append(a.sums, sha256.Sum256([]byte(t.Secret)))
	}
	return a, nil
}

type clientKey struct{}

// clientName is the authenticated client of a call ("" without authentication).
func clientName(ctx context.Context) string {
	n, _ := ctx.Value(clientKey{}).(string)
	return n
}

var errUnauthenticated = status.Error(codes.Unauthenticated, "skippr serve: a bearer token is required (header authorization: Bearer <token>) and this one is missing or not known")

// check returns ctx carrying the client's name, or Unauthenticated. Without tokens the name is the client
// certificate's, under mutual TLS (the handshake verified it), else none.
func (a *auth) check(ctx context.Context, method string) (context.Context, error) {
	if len(a.tokens) == 0 {
		if p, ok := peer.FromContext(ctx); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
				if n := certName(ti.State); n != "" {
					return context.WithValue(ctx, clientKey{}, n), nil
				}
			}
		}
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	client, ok := a.verify(md.Get("authorization"))
	if !ok {
		a.log.Info("refused a call without a known token", "method", method)
		return ctx, errUnauthenticated
	}
	return context.WithValue(ctx, clientKey{}, client), nil
}

// certName is the common name of a verified client certificate ("" without one).
func certName(st tls.ConnectionState) string {
	if len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return ""
	}
	return "cert:" + st.VerifiedChains[0][0].Subject.CommonName
}

// verify returns the client whose token the authorization header values carry ("Bearer <token>").
func (a *auth) verify(values []string) (string, bool) {
	if len(a.tokens) == 0 {
		return "", true
	}
	var presented string
	for _, v := range values {
		if p, ok := strings.CutPrefix(v, "Bearer "); ok {
			presented = strings.TrimSpace(p)
		}
	}
	sum := sha256.Sum256([]byte(presented))
	match := -1
	for i, known := range a.sums {
		if subtle.ConstantTimeCompare(sum[:], known[:]) == 1 {
			match = i
		}
	}
	if presented == "" || match < 0 {
		return "", false
	}
	return a.tokens[match].Client, true
}

func (a *auth) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := a.check(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (a *auth) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := a.check(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &authedStream{ServerStream: ss, ctx: ctx})
}

type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *authedStream) Context() context.Context { return s.ctx }

// CheckTokens checks the tokens as the server will (each named, distinct, at least 16 characters), so a bad
// one is refused before the plugins start.
func CheckTokens(tokens []Token) error {
	_, err := newAuth(tokens, slog.New(slog.DiscardHandler))
	return err
}

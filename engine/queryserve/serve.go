package queryserve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/flight/flightsql"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Listen says how the server meets its clients.
type Listen struct {
	// Tokens: each call must carry one of them (none: no authentication, allowed on a loopback address only).
	Tokens []Token
	// TLS, when set, is the listener's TLS configuration (ServerTLS builds one that reloads its files).
	TLS *tls.Config
}

// CheckExposure refuses to serve without tokens or client certificates on an address other hosts can reach:
// anyone who can connect could read every table.
func CheckExposure(addr string, l Listen) error {
	if len(l.Tokens) > 0 || RequiresClientCerts(l.TLS) {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("address %s is reachable from other hosts and no client token is set: give each client a token (--token NAME=ENV_VAR) or a certificate (--tls-client-ca), or listen on 127.0.0.1", addr)
}

// Serve answers Flight SQL on lis until ctx ends, then lets running calls finish for up to grace and stops.
func (s *Server) Serve(ctx context.Context, lis net.Listener, l Listen, grace time.Duration) error {
	a, err := newAuth(l.Tokens, s.log)
	if err != nil {
		return err
	}
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.unary), grpc.ChainStreamInterceptor(a.stream)}
	if l.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(l.TLS)))
	}
	g := grpc.NewServer(opts...)
	flight.RegisterFlightServiceServer(g, actions{FlightServer: flightsql.NewFlightServerWithAllocator(s, s.mem), s: s})
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(grace):
		g.Stop()
	}
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

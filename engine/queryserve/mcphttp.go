package queryserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// ServeMCPHTTP serves the MCP tools over streamable HTTP at http(s)://addr/mcp, with l's tokens and TLS,
// until the returned stop is called (which waits up to 5 s for requests in flight). A listen failure is
// returned at once; a failure while serving is logged.
func (s *Server) ServeMCPHTTP(addr string, l Listen) (stop func(context.Context), err error) {
	h, err := s.MCPHandler(l.Tokens)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--mcp-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	hs := &http.Server{Handler: mux, TLSConfig: l.TLS, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		var err error
		if l.TLS != nil {
			err = hs.ServeTLS(lis, "", "")
		} else {
			err = hs.Serve(lis)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("MCP server stopped", "err", err)
		}
	}()
	s.log.Info("serving MCP", "mcp_addr", lis.Addr().String(), "path", "/mcp")
	return func(ctx context.Context) {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	}, nil
}

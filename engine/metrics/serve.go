package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves /metrics, /healthz and /readyz.
func (r *Registry) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{r}, Registry: r.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := r.Ready()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, why)
	})
	return mux
}

// Listen binds addr; Serve then serves on it. Split so that a bad address fails before any pipeline starts.
func (r *Registry) Listen(ctx context.Context, addr string) (net.Listener, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w (set --metrics-addr or metrics.addr to a free host:port)", addr, err)
	}
	return ln, nil
}

// Serve serves Handler on ln until ctx ends.
func (r *Registry) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: r.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: serve on %s: %w", ln.Addr(), err)
	}
	return nil
}

// slogPrinter routes promhttp's error log to the registry's logger.
type slogPrinter struct{ r *Registry }

func (p slogPrinter) Println(v ...any) { p.r.log.Warn("metrics: scrape", "err", fmt.Sprint(v...)) }

// Start makes a registry and, when addr is not empty, serves it there until ctx ends (port 0 picks a free
// port; the bound address is logged). A bad address fails here, before any pipeline starts.
func Start(ctx context.Context, log *slog.Logger, addr string) (*Registry, error) {
	reg := New(log)
	if addr == "" {
		return reg, nil
	}
	ln, err := reg.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	log.Info("metrics listening", "addr", ln.Addr().String(), "paths", "/metrics /healthz /readyz")
	go func() {
		if err := reg.Serve(ctx, ln); err != nil {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	return reg, nil
}

package ingest

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// server is the HTTP listener. Its settings are those of the latest Read.
type server struct {
	src    *Source
	listen string       // as configured
	tls    *tlsSettings // as configured; nil: plain HTTP
	addr   string       // as bound
	http   *http.Server
	cfg    atomic.Pointer[settings]
	auth   *authLog
}

func startServer(src *Source, cfg *settings) (*server, error) {
	var tlsCfg *tls.Config
	if cfg.TLS != nil {
		var err error
		if tlsCfg, err = serverTLS(cfg.TLS); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, listenErr(cfg.Listen, err)
	}
	srv := &server{src: src, listen: cfg.Listen, tls: cfg.TLS, addr: ln.Addr().String(), auth: newAuthLog()}
	srv.cfg.Store(cfg)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/streams/{stream}", srv.post)
	mux.HandleFunc("GET /healthz", srv.healthz)
	mux.HandleFunc("/v1/streams/{stream}", methodNotAllowed("POST"))
	mux.HandleFunc("/healthz", methodNotAllowed("GET"))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &requestError{Status: http.StatusNotFound, Msg: fmt.Sprintf("no such endpoint: %s %s (POST /v1/streams/{stream}, GET /healthz)", r.Method, r.URL.Path)})
	})
	srv.http = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn),
		TLSConfig:         tlsCfg,
	}
	go func() {
		serve := srv.http.Serve
		if tlsCfg != nil {
			// The certificate comes from TLSConfig.GetCertificate, so no file names here.
			serve = func(ln net.Listener) error { return srv.http.ServeTLS(ln, "", "") }
		}
		if err := serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("http server stopped", "addr", srv.addr, "err", err)
		}
	}()
	return srv, nil
}

func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, &requestError{Status: http.StatusMethodNotAllowed, Msg: fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, allow)})
	}
}

func (srv *server) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.http.Shutdown(ctx); err != nil {
		srv.http.Close()
	}
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, e *requestError) {
	b, err := json.Marshal(e)
	if err != nil {
		b = []byte(`{"error":"internal error"}`)
	}
	switch e.Status {
	case http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "1")
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="skippr"`)
	}
	writeJSON(w, e.Status, append(b, '\n'))
}

func (srv *server) healthz(w http.ResponseWriter, _ *http.Request) {
	if srv.src.current() == nil {
		writeJSON(w, http.StatusServiceUnavailable, []byte(`{"status":"not reading"}`+"\n"))
		return
	}
	writeJSON(w, http.StatusOK, []byte(`{"status":"ok"}`+"\n"))
}

// bodyFormat reads the Content-Type and Content-Encoding headers.
func bodyFormat(r *http.Request) (format, bool, *requestError) {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	var f format
	switch {
	case err != nil && ct != "":
		return 0, false, &requestError{Status: http.StatusUnsupportedMediaType, Msg: fmt.Sprintf("Content-Type %q: %v", ct, err)}
	case mt == "application/json":
		f = formatJSON
	case mt == "application/x-ndjson", mt == "application/ndjson":
		f = formatNDJSON
	default:
		return 0, false, &requestError{Status: http.StatusUnsupportedMediaType, Msg: fmt.Sprintf("Content-Type %q is not supported: send application/json (an object or an array of objects) or application/x-ndjson (one object per line)", ct)}
	}
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return f, false, nil
	case "gzip", "x-gzip":
		return f, true, nil
	default:
		return 0, false, &requestError{Status: http.StatusUnsupportedMediaType, Msg: fmt.Sprintf("Content-Encoding %q is not supported: send gzip or no encoding", enc)}
	}
}

// readBody reads the whole body, decoded, refusing more than limit bytes before or after decoding.
func readBody(w http.ResponseWriter, r *http.Request, gz bool, limit int64) ([]byte, *requestError) {
	tooLarge := &requestError{Status: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf("the body exceeds body_limit (%d bytes, before and after gzip decoding); split it into several requests", limit)}
	if r.ContentLength > limit {
		return nil, tooLarge
	}
	var rd io.Reader = http.MaxBytesReader(w, r.Body, limit)
	if gz {
		zr, err := gzip.NewReader(rd)
		if err != nil {
			var mb *http.MaxBytesError
			if errors.As(err, &mb) {
				return nil, tooLarge
			}
			return nil, badRequest("Content-Encoding gzip, but the body is not gzip: %v", err)
		}
		defer zr.Close()
		rd = zr
	}
	data, err := readAllLimit(rd, limit)
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &mb), errors.Is(err, errTooLarge):
		return nil, tooLarge
	case err != nil && gz:
		return nil, badRequest("gzip body: %v", err)
	case err != nil:
		return nil, badRequest("read body: %v", err)
	}
	return data, nil
}

var errTooLarge = errors.New("too large")

// readAllLimit reads r to its end, failing with errTooLarge past limit bytes.
func readAllLimit(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, errTooLarge
	}
	return data, nil
}

type okBody struct {
	Records int `json:"records"`
}

// post takes one request: everything is parsed, checked, inferred and built before anything is emitted,
// and the answer waits for the engine's Ack of the request's checkpoint.
func (srv *server) post(w http.ResponseWriter, r *http.Request) {
	cfg := srv.cfg.Load()
	if len(cfg.creds) > 0 {
		token, ok := authenticate(r, cfg.creds)
		if !ok {
			srv.auth.refused(r)
			writeError(w, &requestError{Status: http.StatusUnauthorized, Msg: "missing or wrong bearer token (Authorization: Bearer <token>)"})
			return
		}
		srv.auth.accepted(token, r)
	}
	name := r.PathValue("stream")
	sc, ok := cfg.Streams[name]
	if !ok {
		writeError(w, &requestError{Status: http.StatusNotFound, Msg: fmt.Sprintf("no stream %q (streams: %s)", name, strings.Join(cfg.streamNames(), ", "))})
		return
	}
	f, gz, rerr := bodyFormat(r)
	if rerr != nil {
		writeError(w, rerr)
		return
	}
	body, rerr := readBody(w, r, gz, cfg.BodyLimit)
	if rerr != nil {
		writeError(w, rerr)
		return
	}
	// ack_timeout counts from here, so a slow upload does not eat the time the pipeline has.
	received := time.Now()

	var entry *idemEntry
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		if len(key) > 255 || strings.IndexFunc(key, func(c rune) bool { return c < 0x21 || c > 0x7e }) >= 0 {
			writeError(w, badRequest("Idempotency-Key must be 1 to 255 visible ASCII characters"))
			return
		}
		var done bool
		if entry, done = srv.claim(w, r, idemKey{stream: name, key: key}, sha256.Sum256(body), received.Add(cfg.ackTimeout)); done {
			return
		}
	}
	// Until the request's job takes over, a failure forgets the key so a retry is processed afresh.
	release := func() {
		if entry != nil {
			srv.src.idem.release(entry)
		}
	}

	recs, rerr := decodeRecords(body, f)
	if rerr == nil {
		var rows []row
		if rows, rerr = toRows(recs, sc.keys); rerr == nil {
			srv.submit(w, r, name, rows, entry, cfg, received)
			return
		}
	}
	release()
	writeError(w, rerr)
}

// claim handles an Idempotency-Key: it answers a retry of an acknowledged request itself (done), waits for a
// request still in flight, and otherwise returns the entry the caller now owns.
func (srv *server) claim(w http.ResponseWriter, r *http.Request, k idemKey, fp [32]byte, deadlineAt time.Time) (*idemEntry, bool) {
	deadline := time.NewTimer(time.Until(deadlineAt))
	defer deadline.Stop()
	for {
		e, res := srv.src.idem.claim(k, fp, time.Now())
		switch res {
		case claimed:
			return e, false
		case replay:
			w.Header().Set("Idempotent-Replayed", "true")
			writeJSON(w, http.StatusOK, e.resp)
			return nil, true
		case mismatch:
			writeError(w, &requestError{Status: http.StatusUnprocessableEntity, Msg: fmt.Sprintf("Idempotency-Key %q was used with a different body for stream %s", k.key, k.stream)})
			return nil, true
		}
		select {
		case <-e.done:
		case <-deadline.C:
			writeError(w, unavailable("the request with Idempotency-Key %q is still in flight (not yet durable); retry", k.key))
			return nil, true
		case <-r.Context().Done():
			return nil, true
		}
	}
}

// submit hands the rows to the running Read and answers once the engine acknowledges them, or with a 503
// once ack_timeout has passed since the body was read. The request's fate (and its Idempotency-Key's) is
// followed in a goroutine, so this handler never waits past the deadline, even behind a slow emission.
func (srv *server) submit(w http.ResponseWriter, r *http.Request, name string, rows []row, entry *idemEntry, cfg *settings, received time.Time) {
	resp, err := json.Marshal(okBody{Records: len(rows)})
	if err != nil {
		panic(err)
	}
	resp = append(resp, '\n')
	if len(rows) == 0 {
		// Nothing to make durable.
		if entry != nil {
			srv.src.idem.complete(entry, resp, cfg.idempotencyWindow, time.Now())
		}
		writeJSON(w, http.StatusOK, resp)
		return
	}
	sess := srv.src.current()
	if sess == nil {
		if entry != nil {
			srv.src.idem.release(entry)
		}
		writeError(w, unavailable("%v (no pipeline is running this source); retry", errUnavailable))
		return
	}
	ctx, cancel := context.WithDeadline(r.Context(), received.Add(cfg.ackTimeout))
	defer cancel()
	type submitted struct {
		j    *job
		rerr *requestError
	}
	ch := make(chan submitted, 1)
	go func() {
		j, rerr := sess.submit(ctx, name, rows, received)
		ch <- submitted{j, rerr}
		if entry == nil {
			return
		}
		// The key's fate follows the data, not this response: a retry after a 503 for a slow ack still
		// finds the first request and gets its 200 once the ack comes.
		if rerr != nil {
			srv.src.idem.release(entry)
			return
		}
		<-j.done
		if j.err == nil {
			srv.src.idem.complete(entry, resp, cfg.idempotencyWindow, time.Now())
		} else {
			srv.src.idem.release(entry)
		}
	}()
	timeout := unavailable("the data was not confirmed durable within ack_timeout (%s); retry, with the same Idempotency-Key to avoid a duplicate", cfg.ackTimeout)
	var sub submitted
	select {
	case sub = <-ch:
	case <-ctx.Done():
		if r.Context().Err() == nil {
			writeError(w, timeout)
		}
		return
	}
	if sub.rerr != nil {
		writeError(w, sub.rerr)
		return
	}
	select {
	case <-sub.j.done:
		if sub.j.err != nil {
			writeError(w, unavailable("the Read stopped before the data was durable; retry"))
			return
		}
		writeJSON(w, http.StatusOK, resp)
	case <-ctx.Done():
		if r.Context().Err() == nil {
			writeError(w, timeout)
		}
	}
}

// listenErr: a port still held (often by this source's previous process, which is going away) is worth a
// retry; any other refusal (no such address, a privileged port) needs another listen setting.
func listenErr(addr string, err error) error {
	err = fmt.Errorf("listen %s: %w", addr, err)
	if errors.Is(err, syscall.EADDRINUSE) {
		return fault.TransientErr(err)
	}
	return fault.ConfigErr(err, "set the connection's listen to a free host:port this user may bind")
}

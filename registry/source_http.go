package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = 30 * time.Second
	// No Client.Timeout: a large binary on a slow link must not be cut off;
	// the caller's context bounds the whole transfer.
	return &http.Client{Transport: t}
}

// httpSource reads a registry served by any static web server or bucket
// website. No authentication: registries are public by design.
type httpSource struct {
	url    string
	base   *url.URL
	client *http.Client
}

func (s *httpSource) URL() string { return s.url }

func (s *httpSource) Open(ctx context.Context, rel string) (io.ReadCloser, int64, error) {
	u := *s.base
	if rel != "" {
		if err := checkRelPath(rel); err != nil {
			return nil, 0, err
		}
		u = *u.JoinPath(strings.Split(rel, "/")...)
	}
	target := u.String()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("GET %s: %w: %v", target, ErrInvalid, err)
	}
	req.Header.Set("User-Agent", "skippr-registry-client")
	// Identity encoding keeps Content-Length equal to the bytes we hash.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := s.client.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, 0, fmt.Errorf("GET %s: %w", target, ctxErr)
		}
		return nil, 0, fmt.Errorf("GET %s: %w: %v", target, ErrUnreachable, unwrapURLError(err))
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return &sizedReader{r: resp.Body, c: resp.Body, want: resp.ContentLength, name: "GET " + target}, resp.ContentLength, nil
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		resp.Body.Close()
		return nil, 0, fmt.Errorf("GET %s: %w: HTTP %s", target, ErrNotFound, resp.Status)
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		resp.Body.Close()
		return nil, 0, fmt.Errorf("GET %s: %w: HTTP %s", target, ErrUnreachable, resp.Status)
	default:
		resp.Body.Close()
		return nil, 0, fmt.Errorf("GET %s: HTTP %s (registries must serve files without authentication)", target, resp.Status)
	}
}

// unwrapURLError drops the "Get URL:" prefix *url.Error adds; our message
// already names the URL.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

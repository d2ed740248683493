package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Source fetches the objects of one registry. Implementations: file://,
// http(s):// and s3://. Callers verify every byte they get (signature for the
// index, size and sha256 for binaries), so a Source only moves bytes.
type Source interface {
	// Open returns the object at rel, a slash-separated path relative to the
	// registry's base URL ("" is the base URL itself), and its size in bytes
	// (-1 when the transport does not say). Errors wrap ErrNotFound when the
	// object does not exist and ErrUnreachable when the registry cannot be
	// contacted. The reader fails with an error wrapping ErrUnreachable if the
	// transfer ends before the announced size.
	Open(ctx context.Context, rel string) (io.ReadCloser, int64, error)
	// URL is the base URL, for messages.
	URL() string
}

// SourceOptions configures how sources reach the network.
type SourceOptions struct {
	// HTTPClient is used for http(s) registries; nil means a client with
	// connect and header timeouts but no overall timeout (binaries are large).
	HTTPClient *http.Client
}

// NormalizeURL returns the canonical form of a registry URL, used to compare
// registries in the trust store and the lock file: scheme and host lowercased,
// no trailing slash, a bare absolute path turned into a file:// URL.
// Supported: file:///abs/dir, http(s)://host/path, s3://bucket/prefix (with
// optional ?region=, ?endpoint=, ?path_style=true, ?anonymous=true).
func NormalizeURL(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if filepath.IsAbs(raw) {
		raw = (&url.URL{Scheme: "file", Path: filepath.ToSlash(raw)}).String()
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%w: registry URL %q: %v", ErrInvalid, raw, err)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	u.Host = strings.ToLower(u.Host)
	u.Fragment = ""
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return "", fmt.Errorf("%w: registry URL %q: file URLs take an absolute path, file:///abs/dir", ErrInvalid, raw)
		}
		u.Host = ""
		if !strings.HasPrefix(u.Path, "/") {
			return "", fmt.Errorf("%w: registry URL %q: file URLs take an absolute path, file:///abs/dir", ErrInvalid, raw)
		}
	case "http", "https", "s3":
		if u.Host == "" {
			return "", fmt.Errorf("%w: registry URL %q has no host (or bucket)", ErrInvalid, raw)
		}
	default:
		return "", fmt.Errorf("%w: registry URL %q: scheme must be file, http, https or s3", ErrInvalid, raw)
	}
	if len(u.Path) > 1 {
		u.Path = strings.TrimRight(u.Path, "/")
		u.RawPath = ""
	}
	return u.String(), nil
}

// NewSource returns the Source for a registry base URL (see NormalizeURL).
// For s3:// it loads AWS configuration (credentials from the environment)
// lazily, at the first Open.
func NewSource(rawURL string, opts SourceOptions) (Source, error) {
	norm, err := NormalizeURL(rawURL)
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(norm)
	switch u.Scheme {
	case "file":
		return &fileSource{url: norm, dir: filepath.FromSlash(u.Path)}, nil
	case "http", "https":
		c := opts.HTTPClient
		if c == nil {
			c = defaultHTTPClient()
		}
		return &httpSource{url: norm, base: u, client: c}, nil
	case "s3":
		return newS3Source(norm, u)
	}
	return nil, fmt.Errorf("%w: registry URL %q: unsupported scheme", ErrInvalid, rawURL)
}

// fileSource reads a registry folder on a local or mounted filesystem.
type fileSource struct {
	url string
	dir string
}

func (s *fileSource) URL() string { return s.url }

func (s *fileSource) Open(ctx context.Context, rel string) (io.ReadCloser, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	p := s.dir
	if rel != "" {
		if err := checkRelPath(rel); err != nil {
			return nil, 0, err
		}
		p = filepath.Join(s.dir, filepath.FromSlash(rel))
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("%s: %w: %s does not exist", s.url, ErrNotFound, p)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", s.url, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w", s.url, err)
	}
	if st.IsDir() {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w: %s is a directory", s.url, ErrNotFound, p)
	}
	return &sizedReader{r: f, c: f, want: st.Size(), name: p}, st.Size(), nil
}

// sizedReader turns a transfer that ends before the announced size into a
// clear error instead of a silently short file.
type sizedReader struct {
	r    io.Reader
	c    io.Closer
	n    int64
	want int64 // -1: unknown
	name string
}

func (r *sizedReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += int64(n)
	switch {
	case err == io.EOF && r.want >= 0 && r.n < r.want,
		errors.Is(err, io.ErrUnexpectedEOF):
		return n, fmt.Errorf("%s: %w: transfer truncated after %d of %d bytes", r.name, ErrUnreachable, r.n, r.want)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return n, fmt.Errorf("%s: read after %d bytes: %w", r.name, r.n, err)
	case err != nil && err != io.EOF:
		return n, fmt.Errorf("%s: %w: read after %d bytes: %v", r.name, ErrUnreachable, r.n, err)
	}
	return n, err
}

func (r *sizedReader) Close() error { return r.c.Close() }

// openArtifact opens an artifact's URL: relative URLs through the registry's
// own source, absolute ones through a source for that URL. For an absolute URL
// it first looks for blobs/sha256/<hex> under the registry base, which is
// where Mirror stores such artifacts (the signed index must stay verbatim, so
// a mirror cannot rewrite the URL).
func openArtifact(ctx context.Context, src Source, a Artifact, opts SourceOptions) (io.ReadCloser, int64, string, error) {
	if !strings.Contains(a.URL, "://") {
		rc, n, err := src.Open(ctx, a.URL)
		return rc, n, src.URL() + "/" + a.URL, err
	}
	blob := blobPath(a.SHA256)
	rc, n, err := src.Open(ctx, blob)
	if err == nil {
		return rc, n, src.URL() + "/" + blob, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return nil, 0, "", err
	}
	abs, err := NewSource(a.URL, opts)
	if err != nil {
		return nil, 0, "", err
	}
	rc, n, err = abs.Open(ctx, "")
	return rc, n, a.URL, err
}

func blobPath(sha string) string { return "blobs/sha256/" + sha }

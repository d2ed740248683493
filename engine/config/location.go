package config

import (
	"errors"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
)

var schemePrefix = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// location is a parsed URL-or-path value.
type location struct {
	scheme string   // lower case: file, s3, http, https, …
	url    string   // normalized
	dir    string   // absolute directory, for file
	u      *url.URL // for other schemes
}

// parseLocation reads a URL or a plain path. Plain paths and file: URLs are file
// locations; relative ones resolve against the config directory. Errors never repeat the
// value: the caller shows it (or hides it when it came from the environment).
func (l *loader) parseLocation(text string) (location, error) {
	if !schemePrefix.MatchString(text) {
		dir, err := l.resolvePath(text)
		if err != nil {
			return location{}, err
		}
		return location{scheme: walSchemeFile, dir: dir, url: fileURL(dir)}, nil
	}
	u, err := url.Parse(text)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return location{}, &detailError{full: "not a valid URL: " + err.Error(), generic: "not a valid URL"}
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != walSchemeFile {
		return location{scheme: scheme, u: u, url: u.String()}, nil
	}
	if u.Host != "" && u.Host != "localhost" {
		return location{}, errors.New("a file URL has no host: write file:///absolute/path, or a plain path such as ./wal")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return location{}, errors.New("a file URL takes no user, query or fragment")
	}
	p := u.Path
	if u.Opaque != "" { // file:relative/path
		if p, err = url.PathUnescape(u.Opaque); err != nil {
			return location{}, &detailError{full: "not a valid URL: " + err.Error(), generic: "not a valid URL"}
		}
	}
	dir, err := l.resolvePath(filepath.FromSlash(p))
	if err != nil {
		return location{}, err
	}
	return location{scheme: walSchemeFile, dir: dir, url: fileURL(dir)}, nil
}

// resolvePath makes p absolute against the config directory. A leading ~ is refused
// rather than silently taken as a directory named "~".
func (l *loader) resolvePath(p string) (string, error) {
	switch {
	case strings.TrimSpace(p) == "":
		return "", errors.New("empty path")
	case p == "~" || strings.HasPrefix(p, "~/"):
		return "", errors.New("~ is not expanded; write ${HOME}/… instead")
	case !filepath.IsAbs(p):
		p = filepath.Join(l.dir, p)
	}
	return filepath.Clean(p), nil
}

func fileURL(dir string) string {
	return (&url.URL{Scheme: walSchemeFile, Path: filepath.ToSlash(dir)}).String()
}

const (
	walSchemeFile = "file"
	walSchemeS3   = "s3"
)

var s3Bucket = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// s3Location checks an s3://bucket/prefix URL and returns bucket and prefix.
func s3Location(u *url.URL) (bucket, prefix string, err error) {
	switch {
	case u.Opaque != "":
		return "", "", errors.New("want s3://bucket/prefix")
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Port() != "":
		return "", "", errors.New("an s3 URL is s3://bucket/prefix, without user, port, query or fragment (set wal.s3.endpoint for a custom endpoint)")
	case !s3Bucket.MatchString(u.Host):
		return "", "", errors.New("the bucket is not a valid S3 bucket name (3-63 lower-case letters, digits, dots and hyphens)")
	}
	return u.Host, strings.Trim(u.Path, "/"), nil
}

// detailError is an error whose full message quotes part of the value; scalar.redact
// swaps in the generic one for values from the environment.
type detailError struct{ full, generic string }

func (e *detailError) Error() string { return e.full }

package ingest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// tlsSettings is the tls setting: the listener speaks HTTPS with this key pair.
type tlsSettings struct {
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file"`
	// ClientCAFile, when set, makes every client present a certificate signed by one of its CAs.
	ClientCAFile string `json:"client_ca_file"`
}

func (t *tlsSettings) validate() error {
	if t.CertFile == "" || t.KeyFile == "" {
		return fault.ConfigErr(errors.New("settings: tls needs both cert_file and key_file"),
			"set tls.cert_file to the PEM certificate (chain) and tls.key_file to its PEM private key")
	}
	return nil
}

// sameTLS reports whether two settings describe the same listener; a change means a new listener.
func sameTLS(a, b *tlsSettings) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// check loads everything once, as a listener would, and also refuses an expired certificate: Check is where
// a person is watching.
func (t *tlsSettings) check(now time.Time) error {
	cert, err := loadKeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return err
	}
	if err := notExpired(t.CertFile, cert, now); err != nil {
		return err
	}
	if t.ClientCAFile != "" {
		if _, err := loadCAPool(t.ClientCAFile); err != nil {
			return err
		}
	}
	return nil
}

func loadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	for _, f := range []struct{ key, path string }{{"tls.cert_file", certFile}, {"tls.key_file", keyFile}} {
		if _, err := os.ReadFile(f.path); err != nil {
			return nil, fault.ConfigErr(fmt.Errorf("settings: %s: %w", f.key, err),
				fmt.Sprintf("point %s at a file the plugin can read (an absolute path; check its permissions)", f.key))
		}
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fault.ConfigErr(fmt.Errorf("settings: tls: certificate %s with key %s: %w", certFile, keyFile, err),
			"give tls.cert_file a PEM certificate and tls.key_file the PEM private key it was issued for")
	}
	return &cert, nil
}

func notExpired(certFile string, cert *tls.Certificate, now time.Time) error {
	leaf := cert.Leaf
	if leaf == nil {
		return nil
	}
	if now.After(leaf.NotAfter) {
		return fault.ConfigErr(fmt.Errorf("settings: tls.cert_file %s: the certificate for %s expired on %s", certFile, leaf.Subject, leaf.NotAfter.UTC().Format(time.RFC3339)),
			"renew the certificate and write it to tls.cert_file (a running plugin picks it up at the next connection)")
	}
	return nil
}

func loadCAPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fault.ConfigErr(fmt.Errorf("settings: tls.client_ca_file: %w", err),
			"point tls.client_ca_file at a file the plugin can read (an absolute path; check its permissions)")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fault.ConfigErr(fmt.Errorf("settings: tls.client_ca_file %s holds no PEM certificate", file),
			"put the PEM certificates (-----BEGIN CERTIFICATE-----) of the CAs that sign client certificates in tls.client_ca_file")
	}
	return pool, nil
}

// serverTLS returns the listener's TLS configuration. The key pair and the client CAs are re-read when their
// files change, so a renewed certificate is served from the next connection without a restart. A new file
// that does not load (half written, a key that does not match) is logged and the previous one kept serving.
//
// Files are stat'ed at each handshake rather than watched: a stat of a cached inode is far cheaper than the
// handshake's public-key work, needs no goroutine and no dependency, and sees every way certificates get
// replaced — in place, by rename, or by the symlink swap of a Kubernetes secret volume, which a watcher on
// the file itself misses.
func serverTLS(t *tlsSettings) (*tls.Config, error) {
	pair := &reloading[*tls.Certificate]{what: "certificate", files: []string{t.CertFile, t.KeyFile},
		load: func() (*tls.Certificate, error) { return loadKeyPair(t.CertFile, t.KeyFile) },
		// An expired certificate at start is served (with an error logged), so that renewing it repairs
		// the source without a restart; an expired replacement is not taken over the one in service.
		valid: func(c *tls.Certificate) error { return notExpired(t.CertFile, c, time.Now()) }}
	if err := pair.init(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Set here because http.Server adds them only to its own config, not to one GetConfigForClient
		// returns (client certificates would otherwise turn HTTP/2 off).
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return pair.get(), nil
		},
	}
	if t.ClientCAFile == "" {
		return cfg, nil
	}
	cas := &reloading[*x509.CertPool]{what: "client CA file", files: []string{t.ClientCAFile},
		load: func() (*x509.CertPool, error) { return loadCAPool(t.ClientCAFile) }}
	if err := cas.init(); err != nil {
		return nil, err
	}
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	base := cfg.Clone()
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.ClientCAs = cas.get()
		return c, nil
	}
	return cfg, nil
}

// reloading holds a value loaded from files and loads it again when a file's identity, size or modification
// time changes.
type reloading[T any] struct {
	what  string
	files []string
	load  func() (T, error)
	// valid, if set, vets a loaded value: a first value that fails it is served anyway (and logged), a
	// replacement that fails it is not taken.
	valid func(T) error

	mu     sync.Mutex
	val    T
	stamp  []os.FileInfo // of the files val was loaded from
	failed []os.FileInfo // of the files that last failed to load: not read again until they change
	errMsg string        // of the last failure, so one bad file is logged once and not at every handshake
}

func (r *reloading[T]) init() error {
	// Stat before reading: a file that changes in between then looks changed at the next handshake.
	stamp, serr := stat(r.files)
	v, err := r.load()
	if err != nil {
		return err
	}
	if serr != nil {
		stamp = nil
	}
	if r.valid != nil {
		if err := r.valid(v); err != nil {
			slog.Error("tls: serving a "+r.what+" that is not valid", "files", r.files, "err", err, "fix", fault.FixOf(err))
		}
	}
	r.val, r.stamp = v, stamp
	return nil
}

func (r *reloading[T]) get() T {
	r.mu.Lock()
	defer r.mu.Unlock()
	stamp, err := stat(r.files)
	if err == nil && (sameStamp(stamp, r.stamp) || sameStamp(stamp, r.failed)) {
		return r.val
	}
	var v T
	if err == nil {
		v, err = r.load()
	}
	if err == nil && r.valid != nil {
		err = r.valid(v)
	}
	if err != nil {
		r.failed = stamp
		if msg := err.Error(); msg != r.errMsg {
			r.errMsg = msg
			slog.Error("tls: the changed "+r.what+" was not loaded; still serving the previous one", "files", r.files, "err", err, "fix", fault.FixOf(err))
		}
		return r.val
	}
	r.val, r.stamp, r.failed, r.errMsg = v, stamp, nil, ""
	slog.Info("tls: reloaded the "+r.what, "files", r.files)
	return v
}

func stat(files []string) ([]os.FileInfo, error) {
	out := make([]os.FileInfo, len(files))
	for i, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return nil, err
		}
		out[i] = fi
	}
	return out, nil
}

func sameStamp(a, b []os.FileInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !os.SameFile(a[i], b[i]) || !a[i].ModTime().Equal(b[i].ModTime()) || a[i].Size() != b[i].Size() {
			return false
		}
	}
	return true
}

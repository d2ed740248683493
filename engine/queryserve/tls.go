package queryserve

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// ServerTLS is a TLS configuration serving the key pair in certFile and keyFile, re-read when either file
// changes, so a renewed certificate is served from the next connection without a restart. A replacement that
// does not load (half written, a key that does not match) is logged and the previous pair kept. As the HTTP
// source does, the files are stat'ed at each handshake rather than watched: far cheaper than the handshake
// itself, and it sees replacement in place, by rename and by a Kubernetes secret volume's symlink swap.
//
// With clientCAFile (mutual TLS), every client must present a certificate that one of the file's CAs signed;
// the file is re-read the same way, so a CA can be added or rotated without a restart. The client's name
// (in the log, and the call's client without tokens) is its certificate's subject common name.
func ServerTLS(certFile, keyFile, clientCAFile string, log *slog.Logger) (*tls.Config, error) {
	r := &reloadingPair{cert: certFile, key: keyFile, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}, GetCertificate: r.get}
	if clientCAFile == "" {
		return base, nil
	}
	ca := &reloadingCA{file: clientCAFile, log: log}
	if err := ca.load(); err != nil {
		return nil, err
	}
	base.ClientAuth = tls.RequireAndVerifyClientCert
	// The pool is chosen per handshake: tls.Config's ClientCAs is read without a lock, so a reload replaces
	// the config the handshake uses rather than the pool inside a shared one.
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.GetConfigForClient = nil
		c.ClientCAs = ca.get()
		return c, nil
	}
	return base, nil
}

// RequiresClientCerts says whether cfg makes every client present a verified certificate.
func RequiresClientCerts(cfg *tls.Config) bool {
	return cfg != nil && cfg.ClientAuth == tls.RequireAndVerifyClientCert
}

type reloadingCA struct {
	file  string
	log   *slog.Logger
	mu    sync.Mutex
	pool  *x509.CertPool
	stamp fileStamp
}

func (r *reloadingCA) load() error {
	fi, err := os.Stat(r.file)
	if err != nil {
		return fmt.Errorf("tls: client CA: %w", err)
	}
	pem, err := os.ReadFile(r.file)
	if err != nil {
		return fmt.Errorf("tls: client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("tls: client CA file %s holds no PEM certificate", r.file)
	}
	r.pool, r.stamp = pool, fileStamp{fi.Size(), fi.ModTime()}
	return nil
}

func (r *reloadingCA) get() *x509.CertPool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fi, err := os.Stat(r.file); err == nil && (fileStamp{fi.Size(), fi.ModTime()}) != r.stamp {
		if err := r.load(); err != nil {
			r.log.Error("keeping the client CAs in service: their replacement does not load", "err", err)
			r.stamp = fileStamp{fi.Size(), fi.ModTime()}
		} else {
			r.log.Info("trusting renewed client CAs", "file", r.file)
		}
	}
	return r.pool
}

type reloadingPair struct {
	cert, key string
	log       *slog.Logger
	mu        sync.Mutex
	pair      *tls.Certificate
	stamp     [2]fileStamp
}

type fileStamp struct {
	size int64
	mod  time.Time
}

func (r *reloadingPair) stamps() ([2]fileStamp, error) {
	var out [2]fileStamp
	for i, f := range []string{r.cert, r.key} {
		fi, err := os.Stat(f)
		if err != nil {
			return out, err
		}
		out[i] = fileStamp{fi.Size(), fi.ModTime()}
	}
	return out, nil
}

func (r *reloadingPair) load() error {
	st, err := r.stamps()
	if err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	pair, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		return fmt.Errorf("tls: certificate %s with key %s: %w", r.cert, r.key, err)
	}
	r.pair, r.stamp = &pair, st
	return nil
}

func (r *reloadingPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, err := r.stamps(); err == nil && st != r.stamp {
		if err := r.load(); err != nil {
			r.log.Error("keeping the certificate in service: its replacement does not load", "err", err)
			r.stamp = st // logged once per change, not at every handshake
		} else {
			r.log.Info("serving a renewed certificate", "cert", r.cert)
		}
	}
	return r.pair, nil
}

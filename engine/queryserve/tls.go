package queryserve

import (
	"crypto/tls"
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
func ServerTLS(certFile, keyFile string, log *slog.Logger) (*tls.Config, error) {
	r := &reloadingPair{cert: certFile, key: keyFile, log: log}
	if err := r.load(); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}, GetCertificate: r.get}, nil
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

package queryserve

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writePair writes a self-signed certificate for cn and its key.
func writePair(t *testing.T, certFile, keyFile, cn string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func servedCN(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	c, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.Subject.CommonName
}

// TestServerTLSReloads: a renewed pair is served from the next handshake; a replacement that does not load
// leaves the pair in service; a missing pair at start is an error.
func TestServerTLSReloads(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if _, err := ServerTLS(cert, key, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("no files: no error")
	}
	writePair(t, cert, key, "first")
	cfg, err := ServerTLS(cert, key, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if cn := servedCN(t, cfg); cn != "first" {
		t.Fatalf("served %q", cn)
	}
	// Renewed: new files (a later mtime, as a renewal writes them).
	writePair(t, cert, key, "second")
	later := time.Now().Add(2 * time.Second)
	os.Chtimes(cert, later, later)
	os.Chtimes(key, later, later)
	if cn := servedCN(t, cfg); cn != "second" {
		t.Fatalf("after renewal served %q, want second", cn)
	}
	// A broken replacement: the renewed pair stays in service.
	if err := os.WriteFile(cert, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cn := servedCN(t, cfg); cn != "second" {
		t.Fatalf("after a broken replacement served %q, want second", cn)
	}
}

package queryserve

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
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
	if _, err := ServerTLS(cert, key, "", slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("no files: no error")
	}
	writePair(t, cert, key, "first")
	cfg, err := ServerTLS(cert, key, "", slog.New(slog.DiscardHandler))
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

// issue writes a certificate for cn signed by parent (nil: self-signed, a CA) and its key, and returns both.
func issue(t *testing.T, certFile, keyFile, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
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
	if keyFile != "" {
		if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

// TestMutualTLS: with a client CA file, a client without a certificate, or with one another CA signed, is
// refused in the handshake; one the CA signed is served and named by its common name; a CA file replaced
// while serving is trusted from the next handshake (and the old CA no longer); the exposure rule accepts
// client certificates instead of tokens.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	f := func(n string) string { return filepath.Join(dir, n) }
	writePair(t, f("server.pem"), f("server.key"), "localhost")
	ca1, ca1Key := issue(t, f("ca.pem"), "", "ca one", nil, nil)
	issue(t, f("alice.pem"), f("alice.key"), "alice", ca1, ca1Key)
	other, otherKey := issue(t, f("other-ca.pem"), "", "ca two", nil, nil)
	issue(t, f("mallory.pem"), f("mallory.key"), "mallory", other, otherKey)

	cfg, err := ServerTLS(f("server.pem"), f("server.key"), f("ca.pem"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if !RequiresClientCerts(cfg) {
		t.Fatal("a client CA does not require client certificates")
	}
	if err := CheckExposure("0.0.0.0:1", Listen{TLS: cfg}); err != nil {
		t.Fatalf("client certificates on a reachable address refused: %v", err)
	}
	if _, err := ServerTLS(f("server.pem"), f("server.key"), f("server.key"), slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("a client CA file without a certificate was accepted")
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	names := make(chan string, 8)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if tc.Handshake() == nil {
				names <- certName(tc.ConnectionState())
				tc.Write([]byte("ok"))
			}
			tc.Close()
		}
	}()
	dial := func(who string) error {
		cc := &tls.Config{InsecureSkipVerify: true} // the server's own certificate is not what is tested here
		if who != "" {
			pair, err := tls.LoadX509KeyPair(f(who+".pem"), f(who+".key"))
			if err != nil {
				t.Fatal(err)
			}
			cc.Certificates = []tls.Certificate{pair}
		}
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", lis.Addr().String(), cc)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 2)
		_, err = io.ReadFull(c, buf) // TLS 1.3 reports a refused client certificate at the first read
		return err
	}
	if err := dial(""); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if err := dial("mallory"); err == nil {
		t.Fatal("a client certificate of another CA was served")
	}
	if err := dial("alice"); err != nil {
		t.Fatalf("alice refused: %v", err)
	}
	if n := <-names; n != "cert:alice" {
		t.Fatalf("client named %q", n)
	}
	// The CA rotated: the file now holds the other CA.
	pemBytes, err := os.ReadFile(f("other-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f("ca.pem"), pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(2 * time.Second)
	os.Chtimes(f("ca.pem"), later, later)
	if err := dial("mallory"); err != nil {
		t.Fatalf("after the CA file changed, its client refused: %v", err)
	}
	if n := <-names; n != "cert:mallory" {
		t.Fatalf("client named %q", n)
	}
	if err := dial("alice"); err == nil {
		t.Fatal("after the CA file changed, the old CA's client was still served")
	}
}

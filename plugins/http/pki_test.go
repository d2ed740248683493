package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testCA is a certificate authority the test makes, with files written to a temp dir.
type testCA struct {
	t      *testing.T
	dir    string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	CAFile string // PEM of the CA certificate
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{t: t, dir: t.TempDir(), cert: cert, key: key}
	ca.CAFile = filepath.Join(ca.dir, "ca.pem")
	writePEM(t, ca.CAFile, "CERTIFICATE", der)
	return ca
}

// pool is a root pool that trusts only this CA.
func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

type leaf struct {
	der  []byte
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
}

// issue signs a certificate for 127.0.0.1 (server) or a client, valid from notBefore to notAfter.
func (ca *testCA) issue(cn string, client bool, notBefore, notAfter time.Time) leaf {
	ca.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ca.t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(ca.t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	if client {
		tmpl.ExtKeyUsage, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		ca.t.Fatal(err)
	}
	return leaf{der: der, key: key, cert: cert}
}

// valid issues a certificate valid for a day.
func (ca *testCA) valid(cn string, client bool) leaf {
	return ca.issue(cn, client, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

// expired issues a certificate that expired an hour ago.
func (ca *testCA) expired(cn string, client bool) leaf {
	return ca.issue(cn, client, time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
}

// write writes the certificate and key as PEM files into dir, replacing them by rename (as a certificate
// manager does) so the plugin never reads half a file.
func (l leaf) write(t *testing.T, certFile, keyFile string) {
	t.Helper()
	kder, err := x509.MarshalPKCS8PrivateKey(l.key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "PRIVATE KEY", kder)
	writePEM(t, certFile, "CERTIFICATE", l.der)
}

// tlsCert is the certificate as a client presents it.
func (l leaf) tlsCert() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{l.der}, PrivateKey: l.key, Leaf: l.cert}
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func serial(t *testing.T) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

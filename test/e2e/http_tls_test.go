package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
	"github.com/skippr-dev/skippr/test/harness"
)

// TestHTTPSourceOverTLS runs `skippr sync` with the http source serving HTTPS and a named token taken from
// the environment: records posted by a client that trusts the test's CA and sends the token reach the
// destination; a wrong token, a client of another CA and plain HTTP leave nothing. `skippr connect` then
// reports a client CA file without certificates with its fix.
func TestHTTPSourceOverTLS(t *testing.T) {
	e := harness.NewEnv(t)
	const token = "ingest-token-4711"
	e.ExtraEnv = append(e.ExtraEnv, "INGEST_TOKEN="+token)
	roots, certFile, keyFile := serverCert(t, e.Dir)
	addrFile, out := filepath.Join(e.Dir, "http.addr"), filepath.Join(e.Dir, "out")
	config := func(clientCA string) string {
		tlsExtra := ""
		if clientCA != "" {
			tlsExtra = ", client_ca_file: " + clientCA
		}
		return fmt.Sprintf(`connections:
  in:
    plugin: http
    version: "~> 0.1"
    settings:
      listen: 127.0.0.1:0
      address_file: %s
      tls: { cert_file: %s, key_file: %s%s }
      tokens:
        - { name: billing, token: "${INGEST_TOKEN}" }
      streams: { orders: { primary_key: /id } }
  out:
    plugin: testdest
    version: "~> 0.1"
    settings: { dir: %s }
pipelines:
  orders:
    source: in
    destinations: [out]
    wal:
      url: file://%s
`, addrFile, certFile, keyFile, tlsExtra, out, filepath.Join(e.Dir, "wal"))
	}
	e.WriteConfig(config(""))
	e.MustRun("connect", "in")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := e.Cmd(ctx, "sync")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var addr string
	harness.WaitFor(t, 60*time.Second, func() bool {
		b, err := os.ReadFile(addrFile)
		addr = strings.TrimSpace(string(b))
		return err == nil && addr != ""
	})
	client := func(roots *x509.CertPool) *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	}
	post := func(hc *http.Client, scheme, auth, body string) (int, error) {
		req, err := http.NewRequest(http.MethodPost, scheme+"://"+addr+"/v1/streams/orders", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+auth)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	good := client(roots)
	for _, b := range []string{`[{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]`, `{"id": 3, "name": "c"}`} {
		if code, err := post(good, "https", token, b); err != nil || code != http.StatusOK {
			t.Fatalf("POST %s over TLS: %d %v\n%s", b, code, err, stderr.String())
		}
	}
	if code, err := post(good, "https", "not-the-token", `{"id": 90}`); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d %v, want 401", code, err)
	}
	if _, err := post(client(x509.NewCertPool()), "https", token, `{"id": 91}`); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("client of another CA: %v, want a refused certificate", err)
	}
	if code, _ := post(http.DefaultClient, "http", token, `{"id": 92}`); code != http.StatusBadRequest {
		t.Fatalf("plain HTTP to the TLS port: %d, want 400", code)
	}
	if code, err := post(good, "https", token, `{"id": 4, "name": "d"}`); err != nil || code != http.StatusOK {
		t.Fatalf("POST after the refusals: %d %v", code, err)
	}
	// Everything acknowledged is in the WAL; let apply finish, then stop politely.
	time.Sleep(2 * time.Second)
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	e.MustRun("sync", "--once")

	st, err := filedest.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	rows := st.Tables["orders"]
	want := map[string]string{"1": "a", "2": "b", "3": "c", "4": "d"}
	if len(rows) != len(want) {
		t.Fatalf("destination rows %v, want ids 1-4 only", rows)
	}
	for id, name := range want {
		if rows[id]["name"] != name {
			t.Errorf("row %s: %v, want name %s", id, rows[id], name)
		}
	}
	if strings.Contains(stderr.String(), token) {
		t.Errorf("skippr's log shows the token:\n%s", stderr.String())
	}

	// A client CA file that holds no certificate is reported by connect, with the fix.
	empty := filepath.Join(e.Dir, "empty-ca.pem")
	if err := os.WriteFile(empty, []byte("# the CA goes here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.WriteConfig(config(empty))
	r := e.Run("connect", "in")
	if r.Code == 0 || !strings.Contains(r.Stderr, "holds no PEM certificate") || !strings.Contains(r.Stderr, "to fix:") {
		t.Fatalf("connect with an empty client CA file: exit %d\n%s", r.Code, r.Stderr)
	}
}

// serverCert makes a CA and a certificate for 127.0.0.1 signed by it, writes the certificate and key as PEM
// files into dir, and returns a pool that trusts the CA.
func serverCert(t *testing.T, dir string) (*x509.CertPool, string, string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "skippr e2e CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{certFile, "CERTIFICATE", der}, {keyFile, "PRIVATE KEY", kder}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, certFile, keyFile
}

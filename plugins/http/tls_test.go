package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
)

// httpsClient makes a new connection per request (so each request is a handshake of its own), trusts roots
// only, and presents cert if given.
func httpsClient(roots *x509.CertPool, cert ...tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: roots}
	if len(cert) == 1 {
		// Always present it: Go's client on its own sends only a certificate of a CA the server lists as
		// acceptable, and the test must see the server refuse one of another CA.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert[0], nil }
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: cfg}}
}

// httpsReading is a Read of a plugin listening with TLS.
func httpsReading(t *testing.T, p *plugin) (*reading, string) {
	t.Helper()
	r := p.read(t, nil)
	return r, "https://" + strings.TrimPrefix(r.base, "http://")
}

// mustPost posts with hc and expects status.
func mustPost(t *testing.T, r *reading, hc *http.Client, base string, q req, status int) response {
	t.Helper()
	ch := make(chan response, 1)
	go func() {
		res, err := doPostWith(hc, base, q)
		if err != nil {
			res = response{status: -1, raw: err.Error()}
		}
		ch <- res
	}()
	if status == http.StatusOK {
		r.ack(r.nextChange().checkpoint)
	}
	res := waitResponse(t, ch, 30*time.Second)
	if res.status != status {
		t.Fatalf("POST %s: status %d, want %d: %s", q.body, res.status, status, res.raw)
	}
	return res
}

// refusedHandshake posts with hc and expects the TLS handshake to fail with an error containing want.
func refusedHandshake(t *testing.T, r *reading, hc *http.Client, base, want string) {
	t.Helper()
	res, err := doPostWith(hc, base, req{body: []byte(`{"id":666}`), headers: map[string]string{"Authorization": "Bearer tok-new"}})
	if err == nil {
		t.Fatalf("the request was answered %d %s; want a failed handshake (%s)", res.status, res.raw, want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("request failed with %v; want an error containing %q", err, want)
	}
	r.expectNone(noWait, "a refused handshake")
}

// servedSerial connects and returns the serial number of the certificate the server presented.
func servedSerial(t *testing.T, hc *http.Client, base string) *big.Int {
	t.Helper()
	resp, err := hc.Get(base + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: %d", resp.StatusCode)
	}
	return resp.TLS.PeerCertificates[0].SerialNumber
}

func TestHTTPSourceTLS(t *testing.T) {
	bin := conformance.Build(t, ".")
	ca, otherCA := newTestCA(t, "skippr test CA"), newTestCA(t, "some other CA")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	server := ca.valid("127.0.0.1", false)
	server.write(t, certFile, keyFile)
	tokens := func(names ...string) []map[string]string {
		var out []map[string]string
		for _, n := range names {
			out = append(out, map[string]string{"name": n, "token": "tok-" + n})
		}
		return out
	}
	bearer := func(name string) map[string]string { return map[string]string{"Authorization": "Bearer tok-" + name} }

	t.Run("TLS, named tokens and rotation of both", func(t *testing.T) {
		p := startPlugin(t, bin, map[string]any{
			"tls":    map[string]any{"cert_file": certFile, "key_file": keyFile},
			"tokens": tokens("old", "new"),
		})
		r, base := httpsReading(t, p)
		good := httpsClient(ca.pool())

		// Both tokens are accepted while both are configured.
		mustPost(t, r, good, base, req{body: []byte(`{"id":1}`), headers: bearer("old")}, http.StatusOK)
		mustPost(t, r, good, base, req{body: []byte(`{"id":2}`), headers: bearer("new")}, http.StatusOK)

		// Refusals, each emitting nothing.
		mustPost(t, r, good, base, req{body: []byte(`{"id":3}`)}, http.StatusUnauthorized)
		r.expectNone(noWait, "no token")
		mustPost(t, r, good, base, req{body: []byte(`{"id":3}`), headers: map[string]string{"Authorization": "Bearer tok-olx"}}, http.StatusUnauthorized)
		r.expectNone(noWait, "a wrong token")
		refusedHandshake(t, r, httpsClient(otherCA.pool()), base, "certificate signed by unknown authority")
		refusedHandshake(t, r, httpsClient(x509.NewCertPool()), base, "certificate signed by unknown authority")

		old11 := httpsClient(ca.pool())
		old11.Transport.(*http.Transport).TLSClientConfig.MinVersion = tls.VersionTLS10
		old11.Transport.(*http.Transport).TLSClientConfig.MaxVersion = tls.VersionTLS11
		refusedHandshake(t, r, old11, base, "protocol version")

		// Plain HTTP to the TLS port: Go's server answers 400 without reading the request.
		res, err := doPost(r.base, req{body: []byte(`{"id":4}`), headers: bearer("new")})
		if res.status != http.StatusBadRequest || !strings.Contains(res.raw, "HTTPS") {
			t.Fatalf("plain HTTP to the TLS port: %d %q %v", res.status, res.raw, err)
		}
		r.expectNone(noWait, "plain HTTP to the TLS port")

		// The certificate renewed on disk is served from the next connection, without a new Read.
		first := servedSerial(t, good, base)
		if first.Cmp(server.cert.SerialNumber) != 0 {
			t.Fatalf("served serial %s, want %s", first, server.cert.SerialNumber)
		}
		renewed := ca.valid("127.0.0.1", false)
		renewed.write(t, certFile, keyFile)
		if got := servedSerial(t, good, base); got.Cmp(renewed.cert.SerialNumber) != 0 {
			t.Fatalf("after renewal on disk the server presents serial %s, want the renewed %s", got, renewed.cert.SerialNumber)
		}
		// A replacement that does not load (a key that is not the certificate's) or has expired is not
		// taken: the renewed certificate keeps serving.
		mismatched := ca.valid("127.0.0.1", false)
		mismatched.write(t, certFile, filepath.Join(dir, "unused.key"))
		if got := servedSerial(t, good, base); got.Cmp(renewed.cert.SerialNumber) != 0 {
			t.Fatalf("after a mismatched key pair was written the server presents %s, want %s still", got, renewed.cert.SerialNumber)
		}
		ca.expired("127.0.0.1", false).write(t, certFile, keyFile)
		if got := servedSerial(t, good, base); got.Cmp(renewed.cert.SerialNumber) != 0 {
			t.Fatalf("after an expired certificate was written the server presents %s, want %s still", got, renewed.cert.SerialNumber)
		}
		// A certificate file that is gone (mid-rotation) does not stop the service either.
		if err := os.Remove(certFile); err != nil {
			t.Fatal(err)
		}
		if got := servedSerial(t, good, base); got.Cmp(renewed.cert.SerialNumber) != 0 {
			t.Fatalf("with the certificate file removed the server presents %s, want %s still", got, renewed.cert.SerialNumber)
		}
		mustPost(t, r, good, base, req{body: []byte(`{"id":5}`), headers: bearer("new")}, http.StatusOK)

		// Rotation: the next Read's settings drop "old"; the listener stays, the old token is refused.
		r.stop()
		var s map[string]any
		if err := json.Unmarshal(p.settings, &s); err != nil {
			t.Fatal(err)
		}
		s["tokens"] = tokens("new")
		p.settings, _ = json.Marshal(s)
		renewed.write(t, certFile, keyFile)
		r2, base2 := httpsReading(t, p)
		if base2 != base {
			t.Fatalf("the listener moved from %s to %s on a token change", base, base2)
		}
		mustPost(t, r2, good, base, req{body: []byte(`{"id":6}`), headers: bearer("old")}, http.StatusUnauthorized)
		r2.expectNone(noWait, "the removed token")
		mustPost(t, r2, good, base, req{body: []byte(`{"id":7}`), headers: bearer("new")}, http.StatusOK)

		// Logs name the tokens, and never show a token.
		logs := p.c.StderrTail()
		for _, want := range []string{`"token":"old"`, `"token":"new"`, "refused a request (401)", "reloaded the certificate", "still serving the previous one"} {
			if !strings.Contains(logs, want) {
				t.Errorf("plugin log lacks %s:\n%s", want, logs)
			}
		}
		if strings.Contains(logs, "tok-") {
			t.Errorf("plugin log shows a token:\n%s", logs)
		}
	})

	t.Run("client certificates", func(t *testing.T) {
		clientCA := newTestCA(t, "client CA")
		p := startPlugin(t, bin, map[string]any{
			"tls":    map[string]any{"cert_file": certFile, "key_file": keyFile, "client_ca_file": clientCA.CAFile},
			"tokens": tokens("new"),
		})
		server.write(t, certFile, keyFile)
		r, base := httpsReading(t, p)
		clientCert := clientCA.valid("billing", true).tlsCert()
		withCert := httpsClient(ca.pool(), clientCert)
		mustPost(t, r, withCert, base, req{body: []byte(`{"id":1}`), headers: bearer("new")}, http.StatusOK)
		// HTTP/2 stays on with client certificates.
		h2 := httpsClient(ca.pool(), clientCert)
		h2.Transport.(*http.Transport).ForceAttemptHTTP2 = true
		if resp, err := h2.Get(base + "/healthz"); err != nil || resp.ProtoMajor != 2 {
			t.Fatalf("GET /healthz with HTTP/2 allowed: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		// A client certificate does not stand in for the token.
		mustPost(t, r, withCert, base, req{body: []byte(`{"id":2}`)}, http.StatusUnauthorized)
		r.expectNone(noWait, "a client certificate without a token")

		refusedHandshake(t, r, httpsClient(ca.pool()), base, "certificate required")
		refusedHandshake(t, r, httpsClient(ca.pool(), otherCA.valid("billing", true).tlsCert()), base, "unknown certificate authority")
		refusedHandshake(t, r, httpsClient(ca.pool(), clientCA.expired("billing", true).tlsCert()), base, "expired certificate")
		// A certificate from the CA of the server's own certificate is not one from client_ca_file.
		refusedHandshake(t, r, httpsClient(ca.pool(), ca.valid("billing", true).tlsCert()), base, "unknown certificate authority")

		// The next good request is the next thing in the log.
		mustPost(t, r, withCert, base, req{body: []byte(`{"id":3}`), headers: bearer("new")}, http.StatusOK)

		// A new client CA written over client_ca_file takes effect at the next connection.
		nextCA := newTestCA(t, "next client CA")
		caPEM, err := os.ReadFile(nextCA.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(caPEM)
		writePEM(t, clientCA.CAFile, "CERTIFICATE", block.Bytes)
		refusedHandshake(t, r, withCert, base, "unknown certificate authority")
		mustPost(t, r, httpsClient(ca.pool(), nextCA.valid("billing", true).tlsCert()), base,
			req{body: []byte(`{"id":4}`), headers: bearer("new")}, http.StatusOK)
		// One without certificates is not taken.
		writePEM(t, clientCA.CAFile, "PRIVATE KEY", []byte("nothing"))
		mustPost(t, r, httpsClient(ca.pool(), nextCA.valid("billing", true).tlsCert()), base,
			req{body: []byte(`{"id":5}`), headers: bearer("new")}, http.StatusOK)
	})

	t.Run("an expired certificate at start is served until renewed on disk", func(t *testing.T) {
		d := t.TempDir()
		cf, kf := filepath.Join(d, "c.pem"), filepath.Join(d, "k.pem")
		ca.expired("127.0.0.1", false).write(t, cf, kf)
		p := startPlugin(t, bin, map[string]any{"tls": map[string]any{"cert_file": cf, "key_file": kf}})
		r, base := httpsReading(t, p)
		good := httpsClient(ca.pool())
		refusedHandshake(t, r, good, base, "certificate has expired")
		renewed := ca.valid("127.0.0.1", false)
		renewed.write(t, cf, kf)
		mustPost(t, r, good, base, req{body: []byte(`{"id":1}`)}, http.StatusOK)
	})

	t.Run("check names the bad file and the fix", func(t *testing.T) {
		p := startPlugin(t, bin, nil)
		d := t.TempDir()
		noCerts := filepath.Join(d, "empty-ca.pem")
		writePEM(t, noCerts, "PRIVATE KEY", []byte("not a certificate"))
		otherKey := filepath.Join(d, "other.key")
		ca.valid("x", false).write(t, filepath.Join(d, "other.pem"), otherKey)
		expCert, expKey := filepath.Join(d, "exp.pem"), filepath.Join(d, "exp.key")
		ca.expired("127.0.0.1", false).write(t, expCert, expKey)
		missing := filepath.Join(d, "missing.pem")
		for _, tc := range []struct {
			name     string
			settings map[string]any
			want     []string
		}{
			{"unreadable certificate", map[string]any{"tls": map[string]any{"cert_file": missing, "key_file": keyFile}},
				[]string{"tls.cert_file", missing, "to fix: point tls.cert_file at a file the plugin can read"}},
			{"unreadable key", map[string]any{"tls": map[string]any{"cert_file": certFile, "key_file": missing}},
				[]string{"tls.key_file", missing, "to fix:"}},
			{"key of another certificate", map[string]any{"tls": map[string]any{"cert_file": certFile, "key_file": otherKey}},
				[]string{certFile, "private key does not match public key", "to fix: give tls.cert_file a PEM certificate and tls.key_file the PEM private key it was issued for"}},
			{"CA file without certificates", map[string]any{"tls": map[string]any{"cert_file": certFile, "key_file": keyFile, "client_ca_file": noCerts}},
				[]string{"client_ca_file " + noCerts + " holds no PEM certificate", "to fix:"}},
			{"expired certificate", map[string]any{"tls": map[string]any{"cert_file": expCert, "key_file": expKey}},
				[]string{expCert, "expired on", "to fix: renew the certificate"}},
			{"key without certificate", map[string]any{"tls": map[string]any{"key_file": keyFile}},
				[]string{"tls needs both cert_file and key_file"}},
			{"both token settings", map[string]any{"bearer_token": "tok-a", "tokens": tokens("b")},
				[]string{"bearer_token and tokens are both set", "to fix: move the bearer_token value into tokens"}},
			{"duplicate token names", map[string]any{"tokens": []map[string]string{{"name": "a", "token": "tok-1"}, {"name": "a", "token": "tok-2"}}},
				[]string{`the name "a" appears twice`, "to fix:"}},
			{"one value under two names", map[string]any{"tokens": []map[string]string{{"name": "a", "token": "tok-1"}, {"name": "b", "token": "tok-1"}}},
				[]string{"tokens a and b have the same value"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := map[string]any{"listen": "127.0.0.1:0", "streams": map[string]any{"events": map[string]any{}}}
				for k, v := range tc.settings {
					s[k] = v
				}
				raw, _ := json.Marshal(s)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				err := p.c.Check(ctx, raw)
				var ce *client.CheckError
				if !errors.As(err, &ce) {
					t.Fatalf("check: %v, want a failed check", err)
				}
				for _, w := range tc.want {
					if !strings.Contains(ce.Message, w) {
						t.Errorf("check says %q; want it to contain %q", ce.Message, w)
					}
				}
				if strings.Contains(ce.Message, "tok-") {
					t.Errorf("check shows a token: %s", ce.Message)
				}
			})
		}
		// The good files pass.
		raw, _ := json.Marshal(map[string]any{"listen": "127.0.0.1:0", "streams": map[string]any{"events": map[string]any{}},
			"tls": map[string]any{"cert_file": certFile, "key_file": keyFile, "client_ca_file": ca.CAFile}, "tokens": tokens("a", "b")})
		if err := p.c.Check(context.Background(), raw); err != nil {
			t.Fatalf("check of good settings: %v", err)
		}
	})
}

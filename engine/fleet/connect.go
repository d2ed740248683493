package fleet

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Target is a parsed --fleet URL: etcd://h1:2379,h2:2379/prefix (etcds:// for TLS).
type Target struct {
	Endpoints []string // host:port
	Prefix    string   // "/prefix", no trailing slash
	TLS       bool
}

// ParseURL parses etcd://host:port[,host:port…]/prefix; etcds:// means TLS.
func ParseURL(raw string) (Target, error) {
	var t Target
	// net/url refuses a list of hosts, so the URL is taken apart by hand.
	scheme, rest, ok := strings.Cut(raw, "://")
	switch {
	case ok && scheme == "etcd":
	case ok && scheme == "etcds":
		t.TLS = true
	default:
		return t, fmt.Errorf("fleet url %q: want etcd://host:2379[,host:2379…]/prefix (or etcds:// for TLS)", raw)
	}
	hosts, path, _ := strings.Cut(rest, "/")
	if strings.Contains(hosts, "@") {
		return t, fmt.Errorf("fleet url %q: credentials do not go in the URL (it is logged); use --etcd-user and SKIPPR_ETCD_PASSWORD", raw)
	}
	if strings.ContainsAny(path, "?#") {
		return t, fmt.Errorf("fleet url %q: query and fragment are not allowed", raw)
	}
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			return t, fmt.Errorf("fleet url %q: empty endpoint in the host list", raw)
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(h, "2379")
		}
		t.Endpoints = append(t.Endpoints, h)
	}
	t.Prefix = "/" + strings.Trim(path, "/")
	if t.Prefix == "/" {
		return t, fmt.Errorf("fleet url %q: name a key prefix for this fleet, as in etcd://h1:2379/skippr", raw)
	}
	return t, nil
}

// ClientOptions are the TLS and auth settings for etcd.
type ClientOptions struct {
	CAFile, CertFile, KeyFile string // PEM files; a client certificate needs both CertFile and KeyFile
	Username, Password        string
}

// Client connects to the fleet's etcd cluster. The connection is lazy: an unreachable cluster shows up in the
// first request, which the worker retries.
func (t Target) Client(o ClientOptions) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Username:             o.Username,
		Password:             o.Password,
		// The client's own zap logs are noise next to ours (it logs every retry of an unreachable member).
		Logger: zap.NewNop(),
	}
	scheme := "http://"
	if t.TLS || o.CAFile != "" || o.CertFile != "" {
		scheme = "https://"
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if o.CAFile != "" {
			pem, err := os.ReadFile(o.CAFile)
			if err != nil {
				return nil, fmt.Errorf("etcd CA file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("etcd CA file %s holds no PEM certificate", o.CAFile)
			}
		}
		if (o.CertFile == "") != (o.KeyFile == "") {
			return nil, fmt.Errorf("etcd client certificate: give both --etcd-cert and --etcd-key")
		}
		if o.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("etcd client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		cfg.TLS = tc
	}
	for _, e := range t.Endpoints {
		cfg.Endpoints = append(cfg.Endpoints, scheme+e)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", t.Endpoints, err)
	}
	return cli, nil
}

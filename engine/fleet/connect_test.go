package fleet

import (
	"slices"
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		in        string
		endpoints []string
		prefix    string
		tls       bool
		err       string
	}{
		{in: "etcd://h1:2379,h2:2379,h3/skippr", endpoints: []string{"h1:2379", "h2:2379", "h3:2379"}, prefix: "/skippr"},
		{in: "etcds://10.0.0.1:2379/a/b/", endpoints: []string{"10.0.0.1:2379"}, prefix: "/a/b", tls: true},
		{in: "etcd://h1:2379", err: "name a key prefix"},
		{in: "http://h1:2379/x", err: "want etcd://host"},
		{in: "etcd://u:p@h1:2379/x", err: "credentials do not go in the URL"},
		{in: "etcd://h1:2379,,h2/x", err: "empty endpoint"},
	} {
		got, err := ParseURL(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got.Endpoints, c.endpoints) || got.Prefix != c.prefix || got.TLS != c.tls {
			t.Errorf("%s: %+v %v", c.in, got, err)
		}
	}
}

package seaweedtest

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

func TestServer(t *testing.T) {
	s := New(t)
	for _, u := range []string{s.S3Endpoint, s.CatalogURI} {
		if !strings.HasPrefix(u, "http://127.0.0.1:") {
			t.Fatalf("endpoint %s is not on 127.0.0.1", u)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wh := s.NewTableBucket(t)
	if !strings.HasPrefix(wh, "s3://t1-testserver") {
		t.Fatalf("warehouse %s", wh)
	}
	// The catalog knows the new bucket as a warehouse: its namespaces can be listed.
	if _, err := s.do(ctx, http.MethodGet, s.CatalogURI+"/v1/"+strings.TrimPrefix(wh, "s3://")+"/namespaces", "s3tables", nil); err != nil {
		t.Fatalf("list namespaces of %s: %v", wh, err)
	}
	if err := s.CreateTableBucket(ctx, strings.TrimPrefix(wh, "s3://")); err == nil {
		t.Fatal("a second table bucket of the same name was created")
	}
	// Requests signed with another secret are refused: the server checks signatures.
	_, err := signedRequest(ctx, aws.Credentials{AccessKeyID: s.AccessKey, SecretAccessKey: "wrong"}, http.MethodGet, s.CatalogURI+"/v1/namespaces", "s3tables", nil)
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("request with a wrong secret: %v, want 403", err)
	}
	s.Stop()
	if s.Running() {
		t.Fatal("server still running after Stop")
	}
	if _, err := http.Get(s.CatalogURI + "/v1/config"); err == nil {
		t.Fatal("catalog still answers after Stop")
	}
}

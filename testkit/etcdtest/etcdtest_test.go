package etcdtest

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// put writes a key through the v3 JSON gateway, which is all this module needs to check the cluster (the
// etcd client library belongs to the root module's tests).
func put(ctx context.Context, endpoint string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+"/v3/kv/put", strings.NewReader(`{"key":"a2V5","value":"dmFs"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return &httpError{resp.StatusCode, string(b)}
	}
	return nil
}

type httpError struct {
	code int
	body string
}

func (e *httpError) Error() string { return e.body }

func TestCluster(t *testing.T) {
	c := New(t, 3)
	ctx := context.Background()
	for _, e := range c.Endpoints() {
		if !strings.HasPrefix(e, "http://127.0.0.1:") {
			t.Fatalf("endpoint %s is not on 127.0.0.1", e)
		}
	}
	if err := put(ctx, c.Endpoints()[0]); err != nil {
		t.Fatalf("put: %v", err)
	}
	// Exactly one member leads, and killing it makes another lead.
	lead, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(lead)
	waitLeader := time.Now().Add(20 * time.Second)
	for {
		next, err := c.Leader(ctx)
		if err == nil && next != lead {
			break
		}
		if time.Now().After(waitLeader) {
			t.Fatalf("no new leader after member %d was killed: %d, %v", lead, next, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := c.Start(lead); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx, lead, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	// One member down: the other two keep quorum and accept writes.
	c.Kill(0)
	if c.Running(0) {
		t.Fatal("member 0 still running after Kill")
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := put(wctx, c.Endpoints()[1]); err != nil {
		t.Fatalf("put with one member down: %v", err)
	}
	// Two down: no quorum, a write cannot succeed.
	c.Kill(1)
	qctx, qcancel := context.WithTimeout(ctx, 3*time.Second)
	defer qcancel()
	if err := put(qctx, c.Endpoints()[2]); err == nil {
		t.Fatal("a write succeeded without quorum")
	}
	// Both come back with their data and the cluster serves again.
	for _, i := range []int{0, 1} {
		if err := c.Start(i); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if err := c.WaitHealthy(ctx, i, 60*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := put(ctx, c.Endpoints()[0]); err != nil {
		t.Fatalf("put after restart: %v", err)
	}
}

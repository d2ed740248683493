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
	// One member down (a follower, so that no election is in the way): the other two keep quorum and accept
	// writes. A loaded machine may need a few tries.
	lead, err = c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	down, up := (lead+1)%3, (lead+2)%3
	c.Kill(down)
	if c.Running(down) {
		t.Fatalf("member %d still running after Kill", down)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := put(wctx, c.Endpoints()[up])
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("put with one member down (member %d), to member %d: %v", down, up, err)
		}
	}
	// Two down: no quorum, a write cannot succeed.
	c.Kill(lead)
	qctx, qcancel := context.WithTimeout(ctx, 3*time.Second)
	defer qcancel()
	if err := put(qctx, c.Endpoints()[up]); err == nil {
		t.Fatal("a write succeeded without quorum")
	}
	// Both come back with their data and the cluster serves again.
	for _, i := range []int{down, lead} {
		if err := c.Start(i); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if err := c.WaitHealthy(ctx, i, 60*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := put(wctx, c.Endpoints()[0])
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("put after restart: %v", err)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/testkit/s3test"
)

// httpLoad drives the HTTP source with a fixed number of requests from concurrent loopback clients and
// measures the latency to the 200, which the plugin sends only once the WAL commit is durable. Apply is paused
// so the figure is the source → WAL path alone.
func httpLoad(ctx context.Context, binDir string, backend string, maxDelay time.Duration, clients, requests, perBody int) {
	tmp, _ := os.MkdirTemp("", "skippr-bench-http-")
	defer os.RemoveAll(tmp)
	walURL, opts := "file://"+filepath.Join(tmp, "wal"), wal.Options{}
	if backend == "s3" {
		if err := os.MkdirAll(filepath.Join(tmp, "s3"), 0o755); err != nil {
			log.Fatal(err)
		}
		srv, err := s3test.Start(ctx, filepath.Join(tmp, "s3"))
		if err != nil {
			log.Fatalf("start versitygw (run `make tools`): %v", err)
		}
		defer srv.Stop()
		bucket := "bench-http"
		if err := srv.CreateBucket(ctx, bucket); err != nil {
			log.Fatal(err)
		}
		walURL = "s3://" + bucket + "/wal"
		opts.S3 = wal.S3Options{Endpoint: srv.Endpoint, Region: "us-east-1", PathStyle: true, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}
	}
	src := startPlugin(ctx, filepath.Join(binDir, "skippr-plugin-http"))
	defer src.Kill()
	dst := startPlugin(ctx, filepath.Join(binDir, "skippr-plugin-testdest"))
	defer dst.Kill()
	l, err := wal.Open(ctx, walURL, opts)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	if err := l.Acquire(ctx); err != nil {
		log.Fatal(err)
	}
	addrFile := filepath.Join(tmp, "addr")
	settings := fmt.Sprintf(`{"listen": "127.0.0.1:0", "address_file": %q, "streams": {"events": {"primary_key": "/id"}}}`, addrFile)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- pipeline.Run(runCtx, pipeline.Config{
			Name:         "bench-http",
			Source:       pipeline.Endpoint[pipeline.Source]{Name: "in", Plugin: connector.Attach(src, []byte(settings))},
			Destinations: []pipeline.Endpoint[pipeline.Destination]{{Name: "out", Plugin: connector.Attach(dst, []byte(fmt.Sprintf(`{"dir": %q}`, filepath.Join(tmp, "out"))))}},
			Log:          l, ExactlyOnce: true, ApplyPaused: true, MaxDelay: maxDelay,
		})
	}()
	var addr string
	for deadline := time.Now().Add(30 * time.Second); addr == ""; {
		if b, err := os.ReadFile(addrFile); err == nil {
			addr = strings.TrimSpace(string(b))
		}
		if time.Now().After(deadline) {
			log.Fatal("http source did not start listening")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		failures  int
	)
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Timeout: 30 * time.Second}
			for r := 0; r < requests/clients; r++ {
				recs := make([]map[string]any, perBody)
				for i := range recs {
					id := (c*requests+r)*perBody + i
					recs[i] = map[string]any{"id": id, "name": fmt.Sprintf("name-%d", id), "amount": float64(id) / 3, "at": "2026-12-02T10:00:00Z", "tags": []string{"a", "b"}}
				}
				body, _ := json.Marshal(recs)
				t0 := time.Now()
				resp, err := hc.Post("http://"+addr+"/v1/streams/events", "application/json", bytes.NewReader(body))
				d := time.Since(t0)
				mu.Lock()
				if err != nil || resp.StatusCode != 200 {
					failures++
				} else {
					latencies = append(latencies, d)
				}
				mu.Unlock()
				if resp != nil {
					resp.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cancel()
	<-done
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	pct := func(p float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[min(len(latencies)-1, int(p*float64(len(latencies))))]
	}
	ok := len(latencies)
	fmt.Printf("| HTTP POST → durable WAL (%s, max_delay %s), %d clients × %d-record bodies | %d | %.0f | — | %.0f req/s; latency to 200: p50 %s, p99 %s; %d failed |\n",
		backend, maxDelay, clients, perBody, ok*perBody, float64(ok*perBody)/elapsed.Seconds(), float64(ok)/elapsed.Seconds(),
		pct(0.50).Round(100*time.Microsecond), pct(0.99).Round(100*time.Microsecond), failures)
}

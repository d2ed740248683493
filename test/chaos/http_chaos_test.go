package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
	"github.com/skippr-dev/skippr/test/harness"
)

// httpRecord is what the test clients post: the schema grows with the id (a new top-level field, then a
// nested one), so schema changes interleave with kills.
func httpRecord(id int) map[string]any {
	r := map[string]any{"id": id, "name": fmt.Sprintf("n-%d", id)}
	if id >= 300 {
		r["amount"] = float64(id) / 4
	}
	if id >= 600 {
		r["address"] = map[string]any{"city": fmt.Sprintf("c%d", id%7), "zip": id % 1000}
	}
	return r
}

// TestHTTPSourceSurvivesSIGKILL posts records from concurrent clients while `skippr sync` is SIGKILLed at random
// moments and restarted: every record that got a 200 must be in the destination exactly once with its values,
// and no rejected (4xx) body may leave a trace.
func TestHTTPSourceSurvivesSIGKILL(t *testing.T) {
	e := harness.NewEnv(t)
	addrFile := filepath.Join(e.Dir, "http.addr")
	out := filepath.Join(e.Dir, "out")
	e.WriteConfig(fmt.Sprintf(`connections:
  in:
    plugin: http
    version: "~> 0.1"
    settings:
      listen: 127.0.0.1:0
      address_file: %s
      ack_timeout: 5s
      type_conflict: reject
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
      group_commit: { max_delay: 20ms }
`, addrFile, out, filepath.Join(e.Dir, "wal")))

	var (
		mu       sync.Mutex
		acked    = map[int]bool{}
		rejected []int
		next     = 0
	)
	const perBody = 10
	post := func(hc *http.Client, addr string, body []byte) (int, error) {
		resp, err := hc.Post("http://"+addr+"/v1/streams/orders", "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	kills := 8
	for round := 0; round <= kills; round++ {
		os.Remove(addrFile)
		ctx, cancel := context.WithCancel(context.Background())
		cmd := e.Cmd(ctx, "sync", "--wait-lock")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var addr string
		harness.WaitFor(t, 30*time.Second, func() bool {
			b, err := os.ReadFile(addrFile)
			addr = strings.TrimSpace(string(b))
			return err == nil && addr != ""
		})
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for c := 0; c < 4; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				hc := &http.Client{Timeout: 10 * time.Second}
				for {
					select {
					case <-stop:
						return
					default:
					}
					mu.Lock()
					first := next
					next += perBody
					mu.Unlock()
					var recs []map[string]any
					for id := first; id < first+perBody; id++ {
						recs = append(recs, httpRecord(id))
					}
					bad := first%70 == 0
					if bad {
						// A type conflict in the last record: the whole body must be rejected.
						recs[len(recs)-1]["name"] = map[string]any{"not": "a string"}
					}
					body, _ := json.Marshal(recs)
					code, err := post(hc, addr, body)
					mu.Lock()
					switch {
					case err == nil && code == 200 && !bad:
						for id := first; id < first+perBody; id++ {
							acked[id] = true
						}
					case err == nil && code == 422 && bad:
						for id := first; id < first+perBody; id++ {
							rejected = append(rejected, id)
						}
					case err == nil && code != 503:
						mu.Unlock()
						t.Errorf("POST ids %d..%d (bad=%v): status %d", first, first+perBody-1, bad, code)
						return
					}
					mu.Unlock()
				}
			}()
		}
		if round < kills {
			time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
			cmd.Process.Signal(syscall.SIGKILL)
		} else {
			time.Sleep(time.Second)
			cmd.Process.Signal(syscall.SIGTERM)
		}
		close(stop)
		wg.Wait()
		cmd.Wait()
		cancel()
	}
	// Apply whatever the last run committed but had not applied yet.
	e.MustRun("sync", "--once")

	st, err := filedest.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	rows := st.Tables["orders"]
	if len(acked) < 100 {
		t.Fatalf("only %d records were acknowledged: the test did not exercise much", len(acked))
	}
	for id := range acked {
		got, ok := rows[fmt.Sprint(id)]
		if !ok {
			t.Fatalf("record %d got a 200 but is not in the destination", id)
		}
		want := httpRecord(id)
		addr, _ := got["address"].(map[string]any)
		if got["name"] != want["name"] || (id >= 300 && got["amount"] != want["amount"]) ||
			(id >= 600 && (addr == nil || addr["city"] != want["address"].(map[string]any)["city"])) {
			t.Fatalf("record %d: destination has %v, posted %v", id, got, want)
		}
	}
	for _, id := range rejected {
		if _, ok := rows[fmt.Sprint(id)]; ok {
			t.Fatalf("record %d was in a rejected (422) body but reached the destination", id)
		}
	}
	t.Logf("%d SIGKILLs; %d records acknowledged, all present; %d records in rejected bodies, none present; destination holds %d rows (%d change rows applied)",
		kills, len(acked), len(rejected), len(rows), st.Rows)
}

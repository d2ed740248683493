package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/test/harness"
)

// TestHTTPToIcebergSchemaEvolution posts records whose schema grows — a new top-level field, then a new
// nested struct, then a new field inside it — and checks that the lake table evolved and holds every record.
func TestHTTPToIcebergSchemaEvolution(t *testing.T) {
	e := harness.NewEnv(t)
	addrFile := filepath.Join(e.Dir, "http.addr")
	lakeSettings := fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(e.Dir, "lake"))
	e.WriteConfig(fmt.Sprintf(`connections:
  in:
    plugin: http
    version: "~> 0.1"
    settings: { listen: "127.0.0.1:0", address_file: %s, streams: { orders: { primary_key: /id } } }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: %s
pipelines:
  orders:
    source: in
    destinations: [lake]
    wal:
      url: file://%s
`, addrFile, lakeSettings, filepath.Join(e.Dir, "wal")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := e.Cmd(ctx, "sync")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var addr string
	harness.WaitFor(t, 60*time.Second, func() bool {
		b, err := os.ReadFile(addrFile)
		addr = strings.TrimSpace(string(b))
		return err == nil && addr != ""
	})
	bodies := []string{
		`[{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]`,
		`{"id": 3, "name": "c", "amount": 9.5}`,
		`{"id": 4, "name": "d", "amount": 1, "address": {"city": "Oslo"}}`,
		`{"id": 5, "name": "e", "address": {"city": "Lima", "zip": 15001}, "tags": ["x", "y"]}`,
		`[{"id": 2, "_op": "delete"}, {"id": 1, "name": "a2", "amount": 2.25}]`,
	}
	for _, b := range bodies {
		resp, err := http.Post("http://"+addr+"/v1/streams/orders", "application/json", strings.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST %s: %d\n%s", b, resp.StatusCode, stderr.String())
		}
	}
	// Everything acknowledged is in the WAL; let apply finish, then stop politely.
	time.Sleep(2 * time.Second)
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	e.MustRun("sync", "--once")

	got := map[string]string{}
	for id, row := range harness.ScanLake(t, lakeSettings, "orders") {
		delete(row, "id")
		b, _ := json.Marshal(row)
		got[id] = string(b)
	}
	want := map[string]string{
		"1": `{"address":null,"amount":2.25,"name":"a2","tags":null}`,
		"3": `{"address":null,"amount":9.5,"name":"c","tags":null}`,
		"4": `{"address":{"city":"Oslo","zip":null},"amount":1,"name":"d","tags":null}`,
		"5": `{"address":{"city":"Lima","zip":15001},"amount":null,"name":"e","tags":["x","y"]}`,
	}
	if len(got) != len(want) {
		t.Fatalf("lake rows: %v, want %v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("id %s: lake %s, want %s", id, got[id], w)
		}
	}
	// The grown schema, nested struct fields and lists included, reads the same through skippr query.
	q := e.QueryJSON(`SELECT id, name, address.city AS city, address.zip AS zip, tags[2] AS tag2 FROM lake.orders ORDER BY id`, false)
	if s := harness.Show(q); s != `[{"city":null,"id":1,"name":"a2","tag2":null,"zip":null},{"city":null,"id":3,"name":"c","tag2":null,"zip":null},`+
		`{"city":"Oslo","id":4,"name":"d","tag2":null,"zip":null},{"city":"Lima","id":5,"name":"e","tag2":"y","zip":15001}]` {
		t.Fatalf("skippr query over the evolved table: %s", s)
	}
}

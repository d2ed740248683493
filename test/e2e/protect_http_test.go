package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
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

// TestProtectedColumnsHTTP (issue #32 item 4, the http source): exclude_columns and hash_columns of a stream
// are applied in the plugin before anything is emitted. Records carrying a clear email (hashed), ssn (excluded,
// also inside nested values) and pin (hashed) are posted while apply is paused, so the WAL still
// holds their entries when it is searched; then applied. No file under the test's directory (WAL, testdest's
// files, the engine's state), no output of any run and no answer to a client holds a clear value or the salt;
// the destination holds the HMACs computed here. A key field, a field both excluded and hashed, and an empty
// salt are refused at start. New rules on a running pipeline apply from the next request on, with a note.
func TestProtectedColumnsHTTP(t *testing.T) {
	e := harness.NewEnvWith(t, "http", "testdest")
	e.ExtraEnv = append(e.ExtraEnv, "EMAIL_SALT="+protectSalt)
	addrFile, out, walDir := filepath.Join(e.Dir, "http.addr"), filepath.Join(e.Dir, "out"), filepath.Join(e.Dir, "wal")
	config := func(rules, apply string) {
		e.WriteConfig(fmt.Sprintf(`connections:
  in:
    plugin: http
    version: "~> 0.1"
    settings:
      listen: "127.0.0.1:0"
      address_file: %s
      type_conflict: reject
      streams: { people: { primary_key: /id, %s } }
  out:
    plugin: testdest
    version: ">= 0.1"
    settings: { dir: %s }
pipelines:
  orders:
    source: in
    destinations: [out]
    wal:
      url: file://%s
      compression: none
%s`, addrFile, rules, out, walDir, apply))
	}
	var outputs []string
	refused := func(rules string, want ...string) {
		t.Helper()
		config(rules, "")
		r := e.Run("sync", "--once")
		outputs = append(outputs, r.Stdout, r.Stderr)
		if r.Code == 0 {
			t.Fatalf("rules %s: sync --once succeeded, want a refusal", rules)
		}
		for _, w := range want {
			if !strings.Contains(r.Stderr, w) {
				t.Fatalf("rules %s: the refusal does not say %q:\n%s", rules, w, r.Stderr)
			}
		}
	}
	refused(`exclude_columns: [id]`, "key column id cannot be excluded")
	refused(`exclude_columns: [email], hash_columns: { email: { salt: "${EMAIL_SALT}" } }`, "column email is both excluded and hashed")
	refused(`hash_columns: { email: { salt: "" } }`, "salt")
	if err := os.RemoveAll(walDir); err != nil {
		t.Fatal(err)
	}

	const rules = `exclude_columns: [ssn], hash_columns: { email: { salt: "${EMAIL_SALT}" }, pin: { salt: "${EMAIL_SALT}" } }`
	config(rules, "    apply: { paused: true }\n")
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
	post := func(body string, status int) {
		t.Helper()
		resp, err := http.Post("http://"+addr+"/v1/streams/people", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		outputs = append(outputs, string(b))
		if resp.StatusCode != status {
			t.Fatalf("POST %s: %d %s, want %d\n%s", body, resp.StatusCode, b, status, stderr.String())
		}
	}
	post(`[{"id": 1, "name": "a", "email": "u1-CLEARMAIL@example.com", "ssn": "CLEARSSN-1", "pin": "CLEARPIN-1"},
		{"id": 2, "name": "b", "email": null, "ssn": {"nested": "CLEARSSN-2"}, "pin": null}]`, 200)
	post(`{"id": 3, "name": "c", "email": "u3-CLEARMAIL@example.com", "ssn": ["CLEARSSN-3"], "pin": "CLEARPIN-3"}`, 200)
	// A hashed field whose value does not fit its column: the refusal must not quote it (a number would be).
	post(`{"id": 4, "email": "u4-CLEARMAIL@example.com", "pin": 40044004}`, 422)
	if answer := outputs[len(outputs)-1]; strings.Contains(answer, "40044004") || !strings.Contains(answer, "not shown") {
		t.Fatalf("the refusal of a hashed value that does not fit: %s", answer)
	}
	// A type conflict in an excluded field is no conflict: the field is gone before types are inferred.
	post(`[{"id": 2, "_op": "delete"}, {"id": 5, "email": "u5-CLEARMAIL@example.com", "ssn": 5, "pin": "CLEARPIN-5"}]`, 200)

	// The WAL holds the entries (apply is paused), hashed: the digest is there, no clear value is.
	digest := hmacHex(protectSalt, "u1-CLEARMAIL@example.com")
	found := false
	filepath.WalkDir(walDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			found = found || strings.Contains(string(b), digest)
		}
		return nil
	})
	if !found {
		t.Fatalf("no WAL file holds %s: the search for clear values would see nothing", digest)
	}
	grepTree(t, walDir, nil, "CLEARMAIL", "CLEARSSN", "CLEARPIN", protectSalt)
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	outputs = append(outputs, stderr.String())

	config(rules, "")
	r := e.MustRun("sync", "--once")
	outputs = append(outputs, r.Stdout, r.Stderr)
	st, err := filedest.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	got := st.Tables["people"]
	want := map[string][2]any{ // email, pin
		"1": {hmacHex(protectSalt, "u1-CLEARMAIL@example.com"), hmacHex(protectSalt, "CLEARPIN-1")},
		"3": {hmacHex(protectSalt, "u3-CLEARMAIL@example.com"), hmacHex(protectSalt, "CLEARPIN-3")},
		"5": {hmacHex(protectSalt, "u5-CLEARMAIL@example.com"), hmacHex(protectSalt, "CLEARPIN-5")},
	}
	if len(got) != len(want) {
		t.Fatalf("destination rows %v, want ids 1, 3, 5", got)
	}
	for id, w := range want {
		row := got[id]
		if _, ok := row["ssn"]; ok {
			t.Fatalf("row %s carries the excluded field ssn: %v", id, row)
		}
		if row["email"] != w[0] || row["pin"] != w[1] {
			t.Fatalf("row %s: email %v, pin %v, want %v, %v", id, row["email"], row["pin"], w[0], w[1])
		}
	}
	files := grepTree(t, e.Dir, outputs, "CLEARMAIL", "CLEARSSN", "CLEARPIN", protectSalt)
	t.Logf("rows hashed as expected; %d files and %d outputs hold no clear value", files, len(outputs))

	// Another salt on a running pipeline: a push source cannot copy the stream again, so the new rules apply
	// from the next request on, and the log says so.
	e.ExtraEnv = append(e.ExtraEnv, "EMAIL_SALT=another-salt")
	if r := e.MustRun("sync", "--once"); !strings.Contains(r.Stderr, "the new rules apply from the next request on") || !strings.Contains(r.Stderr, "stream=people") {
		t.Fatalf("the sync under new rules did not say so:\n%s", r.Stderr)
	}
}

package client_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

func buildProbe(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "skippr-plugin-probe")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/probe")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, b)
	}
	return out
}

func checksum(t *testing.T, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return s[:]
}

func TestStart(t *testing.T) {
	bin := buildProbe(t)
	good := checksum(t, bin)
	bad := append([]byte{}, good...)
	bad[0] ^= 0xff
	for _, tc := range []struct {
		name    string
		env     []string
		sum     []byte
		wantErr string
	}{
		{name: "verified", sum: good},
		{name: "unverified local override", sum: nil},
		{name: "tampered binary", sum: bad, wantErr: "SHA-256 differs"},
		{name: "protocol the host does not speak", sum: good, env: []string{"PROBE_PROTOCOL=2"}, wantErr: "this engine speaks protocol versions [1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.Start(context.Background(), client.Config{Path: bin, SHA256: tc.sum, Env: tc.env, StartTimeout: 20 * time.Second})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("start: %v", err)
				}
				defer c.Kill()
				if sp, err := c.Spec(context.Background()); err != nil || sp.Name != "probe" {
					t.Fatalf("spec = %v, %v", sp, err)
				}
				return
			}
			if err == nil {
				c.Kill()
				t.Fatalf("start succeeded, want error containing %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tc.wantErr)
			}
			if strings.Contains(tc.wantErr, "protocol") && !errors.Is(err, client.ErrProtocol) {
				t.Fatalf("error %v is not ErrProtocol", err)
			}
		})
	}
}

// A batch far over gRPC's 4 MiB message limit crosses the boundary intact, in chunks.
func TestLargeBatch(t *testing.T) {
	bin := buildProbe(t)
	c, err := client.Start(context.Background(), client.Config{Path: bin, SHA256: checksum(t, bin), Env: []string{"PROBE_ROWS=20000", "PROBE_WIDTH=1000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := c.Read(ctx, []byte(`{}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := rs.Next()
	if err != nil {
		t.Fatal(err)
	}
	if m.Batch == nil || m.Batch.Rows != 20000 || len(m.Batch.IPC) < 19<<20 {
		t.Fatalf("want one 20000-row batch over 19 MiB, got %+v rows, %d bytes", m.Batch != nil, len(m.Batch.IPC))
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	recs, _, err := protocol.DecodeRecords(mem, m.Batch.IPC)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		r.Release()
	}
	mem.AssertSize(t, 0)
}

// A plugin that dies mid-read is an error carrying its stderr tail.
func TestCrashSurfacesStderr(t *testing.T) {
	bin := buildProbe(t)
	c, err := client.Start(context.Background(), client.Config{Path: bin, SHA256: checksum(t, bin), Env: []string{"PROBE_ROWS=10", "PROBE_CRASH=1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := c.Read(ctx, []byte(`{}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, err = rs.Next()
		if err != nil {
			break
		}
	}
	// The process exit may be noticed a moment after the stream breaks.
	deadline := time.Now().Add(5 * time.Second)
	for !c.Exited() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !c.Exited() {
		t.Fatalf("plugin still running after crash; read error: %v", err)
	}
	for !strings.Contains(c.StderrTail(), "about to crash on purpose") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(c.StderrTail(), "about to crash on purpose") {
		t.Fatalf("stderr tail %q lacks the plugin's last words", c.StderrTail())
	}
}

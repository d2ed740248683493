package client_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
		{name: "protocol the host does not speak", sum: good, env: []string{"PROBE_PROTOCOL=1"},
			wantErr: "plugin probe 0.0.1 (skippr-plugin-probe) offers protocol versions [1], this engine speaks protocol versions [2]"},
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

// Host and plugin settle on the highest protocol version both speak; a plugin of this SDK still runs under an
// engine that speaks only 1, and a plugin sharing no version with the host is refused with what it offers.
func TestNegotiation(t *testing.T) {
	bin := buildProbe(t)
	sum := checksum(t, bin)
	for _, tc := range []struct {
		name    string
		offers  string // PROBE_PROTOCOL; "" is the SDK's default
		host    []int
		want    int
		offered []int // on refusal
	}{
		{name: "this SDK and this engine", host: []int{protocol.Version}, want: 2},
		{name: "this SDK under an engine that speaks only 1", host: []int{1}, want: 1},
		{name: "host speaking 1 and 2 picks 2", offers: "2,1", host: []int{1, 2}, want: 2},
		{name: "v1-only plugin under this engine", offers: "1", host: []int{protocol.Version}, offered: []int{1}},
		{name: "plugin newer than the engine", offers: "3", host: []int{protocol.Version}, offered: []int{3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var env []string
			if tc.offers != "" {
				env = []string{"PROBE_PROTOCOL=" + tc.offers}
			}
			c, err := client.Start(context.Background(), client.Config{Path: bin, SHA256: sum, Env: env, Protocols: tc.host, StartTimeout: 20 * time.Second})
			if tc.offered == nil {
				if err != nil {
					t.Fatalf("start: %v", err)
				}
				defer c.Kill()
				if c.Protocol != tc.want {
					t.Fatalf("negotiated protocol %d, want %d", c.Protocol, tc.want)
				}
				if _, err := c.Spec(context.Background()); err != nil {
					t.Fatalf("spec over protocol %d: %v", c.Protocol, err)
				}
				return
			}
			if err == nil {
				c.Kill()
				t.Fatalf("start succeeded over protocol %d, want a refusal", c.Protocol)
			}
			var pe *client.ProtocolError
			if !errors.As(err, &pe) || !errors.Is(err, client.ErrProtocol) {
				t.Fatalf("error %v is not a *ProtocolError wrapping ErrProtocol", err)
			}
			if pe.Name != "probe" || pe.Version != "0.0.1" || !slices.Equal(pe.Offered, tc.offered) || !slices.Equal(pe.Host, tc.host) {
				t.Fatalf("refusal names plugin %q %q offering %v to host %v; want probe 0.0.1 offering %v to %v", pe.Name, pe.Version, pe.Offered, pe.Host, tc.offered, tc.host)
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

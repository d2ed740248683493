package client_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/client"
)

// hostEnv makes this test binary act as an engine: start the probe plugin and wait to be killed.
const hostEnv = "SKIPPR_CLIENT_TEST_HOST"

func TestMain(m *testing.M) {
	if bin := os.Getenv(hostEnv); bin != "" {
		c, err := client.Start(context.Background(), client.Config{Path: bin, Env: []string{"PROBE_INFO=" + os.Getenv("PROBE_INFO")}, StartTimeout: time.Minute})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer c.Kill()
		select {}
	}
	os.Exit(m.Run())
}

// A SIGKILLed engine cannot stop its plugins; the kernel must, at once (Pdeathsig), not the plugin's parent
// watch a tick later.
func TestPluginDiesWithKilledHost(t *testing.T) {
	bin := buildProbe(t)
	info := filepath.Join(t.TempDir(), "probe-info")
	host := exec.Command(os.Args[0], "-test.run=^$")
	host.Env = append(os.Environ(), hostEnv+"="+bin, "PROBE_INFO="+info)
	host.Stderr = os.Stderr
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	defer host.Process.Kill()
	var pid, sig int
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := os.ReadFile(info)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			if _, err := fmt.Sscan(string(b), &pid, &sig); err != nil {
				t.Fatalf("probe info %q: %v", b, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the probe plugin never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	if sig != int(syscall.SIGKILL) {
		t.Errorf("plugin started with parent-death signal %d, want SIGKILL (%d)", sig, syscall.SIGKILL)
	}
	// Give the handshake time to finish, so the kill lands on a plugin that is serving.
	time.Sleep(200 * time.Millisecond)
	if !running(pid) {
		t.Fatalf("plugin %d exited before the host was killed", pid)
	}
	killed := time.Now()
	if err := host.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	host.Wait()
	for running(pid) {
		if time.Since(killed) > 500*time.Millisecond {
			t.Fatalf("plugin %d still running %s after its host was SIGKILLed", pid, time.Since(killed).Round(time.Millisecond))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("plugin gone %s after the host's SIGKILL", time.Since(killed).Round(time.Millisecond))
}

// running reports whether pid exists and is not a zombie: an orphan that died waits for init to reap it.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

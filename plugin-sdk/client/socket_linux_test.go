package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/client"
)

// dialEnv makes this test binary try to connect to the Unix socket it names, as whatever user runs it.
const dialEnv = "SKIPPR_CLIENT_TEST_DIAL"

func init() {
	if path := os.Getenv(dialEnv); path != "" {
		c, err := net.Dial("unix", path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			if errors.Is(err, os.ErrPermission) {
				os.Exit(3)
			}
			os.Exit(1)
		}
		c.Close()
		os.Exit(0)
	}
}

// The plugin connection carries no TLS (go-plugin's AutoMTLS is off); what keeps other local users off it is
// the socket's directory, which only this user may enter, and which goes with the plugin.
func TestSocketIsPrivate(t *testing.T) {
	bin := buildProbe(t)
	c, err := client.Start(context.Background(), client.Config{Path: bin, SHA256: checksum(t, bin), StartTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill()
	if sp, err := c.Spec(context.Background()); err != nil || sp.Name != "probe" {
		t.Fatalf("spec = %v, %v", sp, err)
	}
	addr := c.Addr()
	if addr == nil || addr.Network() != "unix" {
		t.Fatalf("plugin address %v, want a Unix socket", addr)
	}
	dir := filepath.Dir(addr.String())
	if dir == filepath.Clean(os.TempDir()) {
		t.Fatalf("socket %s sits in the shared temp directory", addr)
	}
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 || int(st.Sys().(*syscall.Stat_t).Uid) != os.Getuid() {
		t.Fatalf("socket directory %s: mode %v uid %d, want 0700 owned by uid %d", dir, st.Mode().Perm(), st.Sys().(*syscall.Stat_t).Uid, os.Getuid())
	}

	if os.Getuid() == 0 {
		// Another user really is refused: this test binary, copied where that user may run it, dials the
		// socket as nobody (65534).
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		pub, err := os.MkdirTemp("", "skippr-dial-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(pub)
		if err := os.Chmod(pub, 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		dialer := filepath.Join(pub, "dial")
		if err := os.WriteFile(dialer, b, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(dialer)
		cmd.Env = []string{dialEnv + "=" + addr.String()}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("another user dialling the plugin's socket: %v (%s), want permission denied", err, out)
		}
	}

	c.Kill()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket directory %s after Kill: %v, want it removed", dir, err)
	}
}

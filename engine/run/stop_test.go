package run

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/metrics"
	"github.com/skippr-dev/skippr/engine/pluginhost"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/testkit/s3test"
)

// A hard stop — what a fleet worker does to every pipeline when its etcd lease runs out, usually because its link
// is cut, and what a second signal does to `skippr sync` — returns within a second even when the WAL's S3 server
// no longer answers, with every plugin process gone: the plugins are killed at once, and the WAL lease is left
// to the next holder's higher epoch (fleet) or released after them within hardReleaseWait (sync). Before, the
// stop released the lease first (waiting up to 10 s on the unreachable server) and then asked each plugin in
// turn to exit (up to 2 s each). A frozen server (SIGSTOP) accepts connections and never answers, as across a
// cut link. With the server answering, sync's hard stop still releases the lease: the next writer takes it at
// once.
func TestHardStop(t *testing.T) {
	srv := s3test.New(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	gen, dest := testplugins.Build(t, "datagen"), testplugins.Build(t, "testdest")
	for _, tc := range []struct {
		name   string
		epoch  uint64 // a fleet election's (Run), or 0 (`skippr sync`: Pipeline)
		frozen bool   // S3 stops answering just before the stop
		// starting: the stop comes while the destination's plugin waits for its handshake (a (re)start,
		// or a takeover), not while the pipeline runs.
		starting bool
	}{
		{"fleet: S3 unreachable", 7, true, false},
		{"sync: S3 unreachable", 0, true, false},
		// sync releases the lease when S3 answers; a fleet holder leaves it to its successor's higher epoch.
		{"sync: S3 answering", 0, false, false},
		{"fleet: while a plugin starts", 7, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := srv.NewBucket(t)
			dir := t.TempDir()
			dest := dest
			if tc.starting {
				dest = slowStart(t, dest)
			}
			yml := fmt.Sprintf(`connections:
  gen:
    plugin: datagen
    path: %q
    settings: { seed: 7, rows: 0, rows_per_second: 2000, batch_size: 100 }
  out:
    plugin: testdest
    path: %q
    settings: { dir: %q }
pipelines:
  p:
    source: gen
    destinations: [out]
    wal:
      url: s3://%s/p
      s3: { endpoint: %s, region: us-east-1, path_style: true }
      group_commit: { max_bytes: 64KiB, max_delay: 50ms }
`, gen, dest, filepath.Join(dir, "out"), b.Name, srv.Endpoint)
			cfg, err := config.Parse(filepath.Join(dir, "skippr.yml"), []byte(yml), os.LookupEnv)
			if err != nil {
				t.Fatal(err)
			}
			reg := metrics.New(nil)
			r := &Runner{Config: cfg, Home: filepath.Join(dir, "home"), Host: &pluginhost.Host{}, Metrics: reg,
				Logger: testLogger(), Progress: time.Hour}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ended := make(chan error, 1)
			go func() {
				if tc.epoch != 0 {
					ended <- r.Run(ctx, "p", tc.epoch)
					return
				}
				p, _ := cfg.Pipeline("p")
				ended <- r.Pipeline(ctx, p, false, 0)
			}()
			// Running for real: entries committed to S3 and applied, the WAL lease held. Or, starting: the
			// source's plugin up and the destination's waiting to say its handshake.
			for deadline := time.Now().Add(2 * time.Minute); ; {
				if tc.starting {
					if ps := pluginProcesses(t); len(ps) == 2 && slices.ContainsFunc(ps, func(p string) bool { return strings.HasSuffix(p, " "+slowComm) }) {
						break
					}
				} else if l, ok := reg.Pipeline("p").Lag(); ok && l.Committed > 2 && l.Applied > 2 {
					break
				}
				select {
				case err := <-ended:
					t.Fatalf("the pipeline ended before it committed: %v", err)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatal("no entries committed and applied after 2 minutes")
				}
				time.Sleep(50 * time.Millisecond)
			}
			if n := len(pluginProcesses(t)); n != 2 {
				t.Fatalf("%d plugin processes run, want 2", n)
			}
			if tc.frozen {
				if err := srv.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				defer srv.Signal(syscall.SIGCONT)
			}
			t0 := time.Now()
			cancel()
			select {
			case err := <-ended:
				took := time.Since(t0)
				t.Logf("hard stop took %s (err %v)", took.Round(time.Millisecond), err)
				// The bound the fleet promises; the release alone used to wait 10 s on an unreachable S3.
				if took > time.Second {
					t.Fatalf("the hard stop took %s, over 1 s", took.Round(time.Millisecond))
				}
			case <-time.After(time.Minute):
				t.Fatal("the hard stop did not return within a minute")
			}
			if ps := pluginProcesses(t); len(ps) > 0 {
				t.Fatalf("plugin processes still run after the hard stop: %v", ps)
			}
			if tc.frozen || tc.starting {
				return
			}
			wl, err := wal.Open(context.Background(), "s3://"+b.Name+"/p", wal.Options{S3: wal.S3Options{Endpoint: srv.Endpoint,
				Region: s3test.Region, PathStyle: true, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}})
			if err != nil {
				t.Fatal(err)
			}
			defer wl.Close()
			if err := wl.Acquire(context.Background()); err != nil {
				t.Fatalf("the WAL lease was not released at the hard stop: %v", err)
			}
		})
	}
}

// slowComm is the process name (/proc/PID/comm, 15 bytes at most) of slowStart's plugin.
const slowComm = "skippr-plugin-s"

// slowStart returns a plugin that waits 30 s before it becomes bin (same process, exec): a plugin whose
// handshake line is slow in coming, as a big binary's is on a loaded host. A stop must not wait for it: go-plugin
// holds its client's lock until the handshake, and a kill through go-plugin waited for that lock.
func slowStart(t *testing.T, bin string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "skippr-plugin-slowstart")
	script := fmt.Sprintf("#!/usr/bin/perl\nsleep 30;\nexec {%q} %q or die \"exec: $!\";\n", bin, bin)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// pluginProcesses lists this process's children that run a plugin binary (skippr-plugin-*), zombies aside.
func pluginProcesses(t *testing.T) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses, so split at the last ')'.
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 2 || fields[0] == "Z" || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		if comm := s[open+1 : end]; strings.HasPrefix(comm, "skippr-plugin") {
			out = append(out, strings.TrimSpace(s[:open])+" "+comm)
		}
	}
	return out
}

// testLogger logs to stderr (not t.Log: a plugin's last lines may come after the test ended).
func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

package run

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/metrics"
	"github.com/skippr-dev/skippr/engine/pluginhost"
	"github.com/skippr-dev/skippr/engine/redact"
	"github.com/skippr-dev/skippr/internal/testplugins"
)

// TestStartPhasesLogged runs datagen (one row) → testdest, real plugin processes, and reads the log as a
// bench does (JSON): "pipeline started" names every start phase in the order a run passes them, none negative
// and none before the one before it, each plugin's steps, and "first row read" ends the start after the WAL.
// The origin is the process's start when the Runner has it (here an hour back, so every phase is past it),
// else the run's own start.
func TestStartPhasesLogged(t *testing.T) {
	gen, dest := testplugins.Build(t, "datagen"), testplugins.Build(t, "testdest")
	const hourMS = float64(time.Hour / time.Millisecond)
	for _, tc := range []struct {
		name    string
		started time.Time
		runMS   func(float64) bool
	}{
		{"since the process", time.Now().Add(-time.Hour), func(ms float64) bool { return ms >= hourMS }},
		{"since the run", time.Time{}, func(ms float64) bool { return ms >= 0 && ms < hourMS }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			yml := fmt.Sprintf(`connections:
  gen:
    plugin: datagen
    path: %s
    settings: { seed: 1, rows: 1 }
  out:
    plugin: testdest
    path: %s
    settings: { dir: %s }
pipelines:
  orders:
    source: gen
    destinations: [out]
    wal: { url: file://%s }
`, gen, dest, filepath.Join(dir, "out"), filepath.Join(dir, "wal"))
			cfg, err := config.Parse(filepath.Join(dir, "skippr.yml"), []byte(yml), os.LookupEnv)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, nil))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			reg, err := metrics.Start(ctx, log, "")
			if err != nil {
				t.Fatal(err)
			}
			r := &Runner{Config: cfg, Home: dir, Host: &pluginhost.Host{}, Metrics: reg, Logger: log, Redact: redact.New(),
				Progress: time.Hour, Once: true, Started: tc.started}
			if err := r.Pipeline(ctx, cfg.Pipelines[0], false, 0); err != nil {
				t.Fatalf("run: %v\n%s", err, buf.String())
			}
			started, startedLine := logLine(t, buf.String(), "pipeline started")
			first, _ := logLine(t, buf.String(), "first row read")
			phases := []string{phaseRun, phasePlugins, phaseChecks, phaseWAL}
			prev, at := 0.0, -1
			for _, ph := range phases {
				key := ph + "_ms"
				ms, ok := started[key].(float64)
				i := strings.Index(startedLine, `"`+key+`":`)
				if !ok || i < 0 || ms < prev || i < at {
					t.Fatalf("%s = %v (at %d of the line, the phase before at %d, %v ms): want every phase in order, none before the one before\n%s",
						key, started[key], i, at, prev, startedLine)
				}
				prev, at = ms, i
			}
			if ms := started[phaseRun+"_ms"].(float64); !tc.runMS(ms) {
				t.Errorf("run_ms = %v: not measured from the origin asked (Runner.Started %v)", ms, tc.started)
			}
			if ms, ok := first[phaseFirstRow+"_ms"].(float64); !ok || ms < prev {
				t.Errorf("first_row_ms = %v, want at or after wal_ms %v", first[phaseFirstRow+"_ms"], prev)
			}
			plugins, _ := started["plugin"].(map[string]any)
			for _, conn := range []string{"gen", "out"} {
				steps, _ := plugins[conn].(map[string]any)
				for _, step := range []string{"resolve_ms", "exec_ms", "spec_ms"} {
					if ms, ok := steps[step].(float64); !ok || ms < 0 {
						t.Errorf("plugin.%s.%s = %v, want ≥ 0\n%s", conn, step, steps[step], startedLine)
					}
				}
				// Exec starts a process and shakes hands over gRPC: never 0.0 ms, unlike a local path's resolve.
				if ms, _ := steps["exec_ms"].(float64); ms <= 0 {
					t.Errorf("plugin.%s.exec_ms = %v: the exec was not timed", conn, steps["exec_ms"])
				}
			}
		})
	}
}

// logLine is the one JSON log line with message msg, decoded and as written.
func logLine(t *testing.T, log, msg string) (map[string]any, string) {
	t.Helper()
	var found []string
	for _, line := range strings.Split(log, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			found = append(found, line)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d lines %q in the log, want 1:\n%s", len(found), msg, log)
	}
	var m map[string]any
	_ = json.Unmarshal([]byte(found[0]), &m)
	return m, found[0]
}

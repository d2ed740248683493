package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// startBench measures the start of an hourly job (issue #31 item 2: from `skippr sync --once` to the source's
// first row ≤ 300 ms): runs times `skippr sync --once` with plugins installed from a signed registry and
// stamped as verified by a first run, and prints each start phase that skippr logs ("pipeline started",
// "first row read"; engine/run/startlog.go) with p50/p90/max, beside baselines taken in the same run, one of
// each before every measured run: exec of `true`, of `skippr --version`, and of each plugin binary printing
// its info (exec and the Go runtime's start, no handshake) — the floor under any start.
//
// datagen (1 row) → testdest starts from a fresh WAL each time: every run snapshots its row. With withPG, an
// hourly Postgres job too: one row inserted before each run, the same WAL and slot kept between runs, so the
// first row is a streamed change.
func startBench(ctx context.Context, binDir string, runs int, withPG, steps bool) {
	dir, err := os.MkdirTemp("", "skippr-bench-start-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s := &startRun{dir: dir, skippr: absBin(binDir, "skippr"), plugins: map[string]string{}, steps: steps}
	names := []string{"datagen", "testdest"}
	if withPG {
		names = append(names, "postgres")
	}
	for _, n := range names {
		s.plugins[n] = absBin(binDir, "skippr-plugin-"+n)
	}
	s.registry(names)
	fmt.Printf("\n## Start of an hourly job: `skippr sync --once`, %d runs each — %s UTC, %d cores, load average %s\n",
		runs, time.Now().UTC().Format("2006-01-02 15:04"), runtime.NumCPU(), loadAverage())

	out := filepath.Join(dir, "out")
	s.config(`  src:
    plugin: datagen
    version: "0.1.0"
    settings: { seed: 1, rows: 1 }
`, out)
	s.warmUp(ctx, "datagen", "testdest")
	gen := s.measure(ctx, runs, []string{"datagen", "testdest"}, func() {
		_ = os.RemoveAll(filepath.Join(dir, "wal"))
		_ = os.RemoveAll(out)
	})
	gen.print("datagen (1 row, fresh WAL: a snapshot) → testdest", []string{"datagen", "testdest"})
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		fmt.Printf("\nlargest process of all these runs (skippr or a plugin; RUSAGE_CHILDREN): %s\n", mib(ru.Maxrss<<10))
	}
	if withPG {
		if err := s.postgres(ctx, runs, out); err != nil {
			log.Fatal(err)
		}
	}
}

func absBin(dir, name string) string {
	p, err := filepath.Abs(filepath.Join(dir, name))
	if err == nil {
		_, err = os.Stat(p)
	}
	if err != nil {
		log.Fatalf("%v (build skippr and the plugins first: `make build`)", err)
	}
	return p
}

type startRun struct {
	dir, skippr string
	plugins     map[string]string // plugin name → binary
	pubKey      string
	steps       bool // run at --log-level debug and read the Postgres source's step lines
}

// sourceSteps are the Postgres source's debug lines timing its start (plugins/postgres/source/warm.go), and
// their steps in the order they run; the bench prints each as "<line>.<step>".
var sourceSteps = []struct {
	msg, key string
	steps    []string
}{
	{"check timing", "check", []string{"connect", "role_slot", "tables", "publication", "replication", "total"}},
	{"read timing", "read", []string{"warm", "connect", "renamed_patterns", "tables", "filters", "publications", "slot", "replication_session", "start_replication", "total"}},
}

// registry publishes the plugins into a registry signed with a key of its own, as users install them.
func (s *startRun) registry(names []string) {
	reg, keys := filepath.Join(s.dir, "registry"), filepath.Join(s.dir, "keys")
	s.mustRun("registry", "keygen", "--out", keys)
	for _, n := range names {
		s.mustRun("registry", "add", reg, s.plugins[n], "--name", n, "--version", "0.1.0", "--os", "linux", "--arch", "amd64", "--quiet")
	}
	s.mustRun("registry", "sign", reg, "--key", filepath.Join(keys, "skippr-ed25519.key"))
	s.pubKey = filepath.Join(keys, "skippr-ed25519.pub")
}

// config writes skippr.yml: the source connection src given, testdest writing to out.
func (s *startRun) config(src, out string) {
	cfg := fmt.Sprintf(`registries:
  - url: file://%s
    key_files: [%s]
connections:
%s  out:
    plugin: testdest
    version: "0.1.0"
    settings: { dir: %s }
pipelines:
  job:
    source: src
    destinations: [out]
    wal: { url: file://%s }
`, filepath.Join(s.dir, "registry"), s.pubKey, src, out, filepath.Join(s.dir, "wal"))
	if err := os.WriteFile(filepath.Join(s.dir, "skippr.yml"), []byte(cfg), 0o644); err != nil {
		log.Fatal(err)
	}
}

func (s *startRun) command(ctx context.Context, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "SKIPPR_HOME="+filepath.Join(s.dir, "home"))
	return cmd
}

func (s *startRun) mustRun(args ...string) {
	if out, err := s.command(context.Background(), s.skippr, args...).CombinedOutput(); err != nil {
		log.Fatalf("skippr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// startSample is one run: skippr's phases (ms since its command began, in main), the bench's clock, skippr's peak RSS.
type startSample struct {
	phases    map[string]float64 // run_ms … first_row_ms, and "<connection>.<step>_ms"
	firstRow  time.Duration      // exec → the "first row read" line's time
	whole     time.Duration      // exec → exit
	rss       int64              // skippr's own peak RSS
	cpu       time.Duration      // skippr's user + system CPU (its own, not the plugins')
	baselines map[string]time.Duration
	baseCPU   map[string]time.Duration
	baseOrder []string
	log       string // skippr's stderr
}

// run runs `skippr sync --once` once and reads its start from its JSON log.
func (s *startRun) run(ctx context.Context) startSample {
	args := []string{"--log-format", "json", "sync", "--once"}
	if s.steps {
		args = append([]string{"--log-level", "debug"}, args...)
	}
	cmd := s.command(ctx, s.skippr, args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = nil, &stderr
	began := time.Now()
	err := cmd.Run()
	whole := time.Since(began)
	if err != nil {
		log.Fatalf("skippr sync --once: %v\n%s", err, stderr.String())
	}
	smp := startSample{phases: map[string]float64{}, whole: whole, cpu: cpuOf(cmd.ProcessState)}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		smp.rss = ru.Maxrss << 10
	}
	sc := bufio.NewScanner(bytes.NewReader(stderr.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var raw map[string]any
		if json.Unmarshal(sc.Bytes(), &raw) == nil {
			for _, ss := range sourceSteps {
				if raw["msg"] != ss.msg {
					continue
				}
				for _, st := range ss.steps {
					if v, ok := raw[st+"_ms"].(float64); ok {
						smp.phases[ss.key+"."+st] = v
					}
				}
			}
		}
		var line struct {
			Time   time.Time                     `json:"time"`
			Msg    string                        `json:"msg"`
			Plugin map[string]map[string]float64 `json:"plugin"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		var attrs map[string]any
		_ = json.Unmarshal(sc.Bytes(), &attrs)
		switch line.Msg {
		case "pipeline started":
			for _, k := range []string{"run_ms", "plugins_ms", "checks_ms", "wal_ms"} {
				smp.phases[k], _ = attrs[k].(float64)
			}
			for conn, steps := range line.Plugin {
				for step, ms := range steps {
					smp.phases[conn+"."+step] = ms
				}
			}
		case "first row read":
			smp.phases["first_row_ms"], _ = attrs["first_row_ms"].(float64)
			smp.firstRow = line.Time.Sub(began)
		}
	}
	smp.log = stderr.String()
	return smp
}

// baseline times one exec of bin with args to its exit, wall and CPU (its exit code is not looked at: the
// floor is the exec).
func (s *startRun) baseline(ctx context.Context, bin string, args ...string) (time.Duration, time.Duration) {
	cmd := s.command(ctx, bin, args...)
	began := time.Now()
	_ = cmd.Run()
	return time.Since(began), cpuOf(cmd.ProcessState)
}

// cpuOf is a finished process's user + system CPU: on a loaded machine the figure that moves least.
func cpuOf(ps *os.ProcessState) time.Duration {
	if ps == nil {
		return 0
	}
	return ps.UserTime() + ps.SystemTime()
}

type startSeries struct{ samples []startSample }

// warmUp runs `skippr sync --once` until the plugins are installed and stamped as verified, as they are for
// every hourly run but the first: registry/verified.go stamps a binary only once it is racyWindow (2 s) older
// than its hash, so the run that installs it, and any within 2 s, hash it instead.
func (s *startRun) warmUp(ctx context.Context, plugins ...string) {
	deadline := time.Now().Add(time.Minute)
	for {
		s.run(ctx)
		stamped := 0
		for _, n := range plugins {
			if _, err := os.Stat(filepath.Join(s.dir, "home", "plugins", n, "0.1.0", ".verified")); err == nil {
				stamped++
			}
		}
		if stamped == len(plugins) {
			return
		}
		if time.Now().After(deadline) {
			log.Fatalf("plugins %v: not stamped as verified after a minute of runs (see registry/verified.go)", plugins)
		}
		time.Sleep(time.Second)
	}
}

// measure takes runs samples, each after one of every baseline (of the plugins named); before runs before
// each run.
func (s *startRun) measure(ctx context.Context, runs int, pluginNames []string, before func()) *startSeries {
	out := &startSeries{}
	truePath, err := exec.LookPath("true")
	if err != nil {
		log.Fatal(err)
	}
	for range runs {
		base, cpu := map[string]time.Duration{}, map[string]time.Duration{}
		order := []string{"exec `true`", "exec `skippr --version`"}
		base[order[0]], cpu[order[0]] = s.baseline(ctx, truePath)
		base[order[1]], cpu[order[1]] = s.baseline(ctx, s.skippr, "--version")
		for _, n := range pluginNames {
			k := fmt.Sprintf("exec `skippr-plugin-%s --skippr-plugin-info`", n)
			base[k], cpu[k] = s.baseline(ctx, s.plugins[n], "--skippr-plugin-info")
			order = append(order, k)
		}
		before()
		smp := s.run(ctx)
		if _, ok := smp.phases["first_row_ms"]; !ok {
			log.Fatalf("skippr sync --once logged no \"first row read\":\n%s", smp.log)
		}
		smp.baselines, smp.baseCPU, smp.baseOrder = base, cpu, order
		out.samples = append(out.samples, smp)
	}
	return out
}

// print writes the series as a Markdown table; plugins are the source's and the destination's plugin names.
func (st *startSeries) print(title string, plugins []string) {
	fmt.Printf("\n### %s\n\n", title)
	fmt.Println("| phase | p50 ms | p90 ms | max ms | CPU p50 ms |")
	fmt.Println("|---|---:|---:|---:|---:|")
	durMS := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	cpuLine := func(name string, get func(startSample) float64, cpu func(startSample) time.Duration) {
		var xs, cs []float64
		for _, smp := range st.samples {
			xs = append(xs, get(smp))
			if cpu != nil {
				cs = append(cs, durMS(cpu(smp)))
			}
		}
		c := "—"
		if cpu != nil {
			c = fmt.Sprintf("%.0f", quantile(cs, 0.5))
		}
		fmt.Printf("| %s | %.1f | %.1f | %.1f | %s |\n", name, quantile(xs, 0.5), quantile(xs, 0.9), quantile(xs, 1), c)
	}
	line := func(name string, get func(startSample) float64) { cpuLine(name, get, nil) }
	phase := func(k string) func(startSample) float64 { return func(s startSample) float64 { return s.phases[k] } }
	line("skippr: config loaded, plugin host built (`run_ms`, since the command began in main)", phase("run_ms"))
	line("skippr: both plugins started, in parallel (`plugins_ms`)", phase("plugins_ms"))
	for i, conn := range []string{"src", "out"} {
		line(fmt.Sprintf("  %s (%s): resolve: lock, verified stamp", conn, plugins[i]), phase(conn+".resolve_ms"))
		line(fmt.Sprintf("  %s (%s): exec, handshake, /proc/PID/exe check", conn, plugins[i]), phase(conn+".exec_ms"))
		line(fmt.Sprintf("  %s (%s): spec, settings check", conn, plugins[i]), phase(conn+".spec_ms"))
	}
	line("skippr: checks and capabilities done (`checks_ms`)", phase("checks_ms"))
	st.stepLines(line, "check")
	line("skippr: WAL opened and acquired (`wal_ms`)", phase("wal_ms"))
	st.stepLines(line, "read")
	line("**skippr: source's first row read (`first_row_ms`)**", phase("first_row_ms"))
	line("**exec → first row** (bench clock: includes the Go runtime's start before main)", func(s startSample) float64 { return durMS(s.firstRow) })
	cpuLine("whole process: exec → exit (commit, apply, summary); CPU: skippr's own", func(s startSample) float64 { return durMS(s.whole) },
		func(s startSample) time.Duration { return s.cpu })
	for _, k := range st.samples[0].baseOrder {
		cpuLine("baseline, same run: "+k, func(s startSample) float64 { return durMS(s.baselines[k]) },
			func(s startSample) time.Duration { return s.baseCPU[k] })
	}
	var rss []float64
	for _, smp := range st.samples {
		rss = append(rss, float64(smp.rss))
	}
	fmt.Printf("\nskippr's peak RSS: p50 %s, max %s\n", mib(int64(quantile(rss, 0.5))), mib(int64(quantile(rss, 1))))
}

// stepLines prints the source's steps of one debug line (key: check or read), those every sample has: the
// Read's first step is "warm" when it took a passed check's sessions, "connect" when it opened its own.
func (st *startSeries) stepLines(line func(string, func(startSample) float64), key string) {
	for _, ss := range sourceSteps {
		if ss.key != key {
			continue
		}
		for _, step := range ss.steps {
			k := key + "." + step
			all := true
			for _, smp := range st.samples {
				_, ok := smp.phases[k]
				all = all && ok
			}
			if all {
				line(fmt.Sprintf("  source's %s (debug line %q): %s", key, ss.msg, step), func(s startSample) float64 { return s.phases[k] })
			}
		}
	}
}

// quantile is the nearest-rank q-quantile of xs (q = 1: the max).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// postgres measures an hourly Postgres job: a table of one row snapshotted by a first run, then one row
// inserted before each measured run, which streams it from the kept slot into the kept WAL.
func (s *startRun) postgres(ctx context.Context, runs int, out string) error {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	srv, err := pgtest.Start(sctx, pgtest.Options{})
	cancel()
	defer pgtest.RemoveTemplate()
	if err != nil {
		return fmt.Errorf("start postgres (apt-get install -y %s): %w", pgtest.AptPackage, err)
	}
	defer func() {
		if err := srv.Stop(); err != nil {
			log.Printf("stop postgres: %v", err)
		}
	}()
	pg := &pgBench{srv: srv, db: "bench"}
	if err := pg.admin(ctx, `CREATE DATABASE bench`); err != nil {
		return err
	}
	if err := pg.exec(ctx, `CREATE TABLE hourly (id bigint PRIMARY KEY, note text, at timestamptz DEFAULT now()); INSERT INTO hourly (id, note) VALUES (0, 'first')`); err != nil {
		return err
	}
	_ = os.RemoveAll(filepath.Join(s.dir, "wal"))
	_ = os.RemoveAll(out)
	s.config(fmt.Sprintf(`  src:
    plugin: postgres
    version: "0.1.0"
    settings: { host: %s, port: %d, user: postgres, database: bench, sslmode: disable, tables: [public.hourly] }
`, srv.Host, srv.Port), out)
	s.warmUp(ctx, "postgres", "testdest") // also creates slot and publication, and snapshots the first row
	next := int64(1)
	series := s.measure(ctx, runs, []string{"postgres", "testdest"}, func() {
		if err := pg.exec(ctx, `INSERT INTO hourly (id, note) VALUES ($1, 'hourly')`, next); err != nil {
			log.Fatal(err)
		}
		next++
	})
	var version string
	_ = pg.queryRow(ctx, `SHOW server_version`, &version)
	series.print(fmt.Sprintf("Postgres %s (testkit/pgtest) → testdest: one row inserted before each run, streamed from the kept slot into the kept WAL", version), []string{"postgres", "testdest"})
	return nil
}

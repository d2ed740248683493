package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// walBackend is where a fault test keeps its WAL, and how it removes one object from it.
type walBackend struct {
	url, extra string
	inspect    []string // `wal inspect` arguments
	remove     func(t *testing.T, key string)
}

func walBackends(t *testing.T, e *harness.Env) map[string]func() walBackend {
	return map[string]func() walBackend{
		"local": func() walBackend {
			dir := filepath.Join(e.Dir, "wal")
			return walBackend{url: "file://" + dir, inspect: []string{"wal", "inspect", "file://" + dir, "--json"}, remove: func(t *testing.T, key string) {
				if err := os.Remove(filepath.Join(dir, filepath.FromSlash(key))); err != nil {
					t.Fatal(err)
				}
			}}
		},
		"s3": func() walBackend {
			b := harness.Versity.Get(t).NewBucket(t)
			e.ExtraEnv = []string{"AWS_ACCESS_KEY_ID=" + b.AccessKey, "AWS_SECRET_ACCESS_KEY=" + b.SecretKey}
			return walBackend{
				url:     "s3://" + b.Name + "/faults",
				inspect: []string{"wal", "inspect", "s3://" + b.Name + "/faults", "--json", "--s3-endpoint", b.Endpoint, "--s3-region", "us-east-1", "--s3-path-style"},
				extra:   fmt.Sprintf("      s3: { endpoint: %s, region: us-east-1, path_style: true }\n", b.Endpoint),
				remove: func(t *testing.T, key string) {
					if _, err := b.Client.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(b.Name), Key: aws.String("faults/" + key)}); err != nil {
						t.Fatal(err)
					}
				},
			}
		},
	}
}

// A commit record missing in the middle of the log, and a destination reset under an exactly-once pipeline,
// stop `sync --once` at once in state failed, on local disk and on S3. The cases run side by side: each has its
// own Env (home, directory, WAL) and, on S3, its own bucket, and most of each is waiting for plugin processes.
func TestWALFaultsFailAtOnce(t *testing.T) {
	for _, backend := range []string{"local", "s3"} {
		t.Run(backend+"/missing commit record", func(t *testing.T) {
			t.Parallel()
			e := harness.NewEnv(t)
			w := walBackends(t, e)[backend]()
			// Paced, so a loaded machine's slow commits do not gather every batch into one or two entries.
			cfg := harness.PipelineConfig(`{ rows: 3000, batch_size: 100, rows_per_second: 1500 }`, filepath.Join(e.Dir, "out"), "", w.url, w.extra+"      group_commit: { max_bytes: 1KiB }\n")
			e.WriteConfig(cfg + "    apply: { paused: true }\n")
			e.MustRun("sync", "--once")
			var inspect struct {
				LastSeq uint64 `json:"last_seq"`
			}
			r := e.MustRun(w.inspect...)
			if err := json.Unmarshal([]byte(r.Stdout), &inspect); err != nil || inspect.LastSeq < 3 {
				t.Fatalf("wal inspect: %v, want 3 entries or more\n%s", err, r.Stdout)
			}
			mid := (inspect.LastSeq + 1) / 2
			w.remove(t, fmt.Sprintf("commits/%020d.json", mid))
			e.WriteConfig(cfg)
			e.SyncFails("resnapshot", "re-snapshot the affected tables", fmt.Sprintf("entry %d is missing: entry %d is followed by entry %d", mid, mid-1, mid+1))
		})
		t.Run(backend+"/destination reset", func(t *testing.T) {
			t.Parallel()
			e := harness.NewEnv(t)
			w := walBackends(t, e)[backend]()
			out := filepath.Join(e.Dir, "out")
			e.WriteConfig(harness.PipelineConfig(`{ rows: 2000, batch_size: 200 }`, out, "", w.url, w.extra+"      group_commit: { max_bytes: 1KiB }\n"))
			e.MustRun("sync", "--once")
			if err := os.RemoveAll(out); err != nil {
				t.Fatal(err)
			}
			e.SyncFails("resnapshot", "give the pipeline a new name", "destination out has applied up to WAL sequence 0", "needs a fresh pipeline")
		})
	}
}

// A destination directory the plugin cannot create fails the destination's check: the pipeline is refused at
// start (exit 2), with the plugin's fix.
func TestDestinationDirFailsAtOnce(t *testing.T) {
	e := harness.NewEnv(t)
	file := filepath.Join(e.Dir, "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.WriteConfig(harness.PipelineConfig(`{ rows: 100 }`, filepath.Join(file, "out"), "", "file://"+filepath.Join(e.Dir, "wal"), ""))
	e.SyncRefused("set the connection's dir", "check of destination out failed", "a-file/out is not writable")
}

// A delivery guarantee a destination cannot honour (exactly-once into a destination that records no applied
// sequence numbers) is refused at start: exit 2, class config, the setting that gets past it.
func TestRefusedGuaranteeFailsAtOnce(t *testing.T) {
	e := harness.NewEnv(t)
	e.WriteConfig(harness.PipelineConfig(`{ rows: 100 }`, filepath.Join(e.Dir, "out"), ", at_least_once: true", "file://"+filepath.Join(e.Dir, "wal"), ""))
	e.SyncRefused("set `delivery: at-least-once`", "asks for exactly-once, but destination out cannot honour it")
}

// A Postgres source whose slot was dropped needs a re-snapshot (exit 1), a value its Arrow type cannot hold a
// person's choice (data, exit 1), and a wrong password a new setting (the check fails: refused at start, exit
// 2): each stops `sync --once` at once in state failed, with the plugin's class and fix.
func TestPostgresSourceFaultsFailAtOnce(t *testing.T) {
	src := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sc, err := pgx.Connect(ctx, src.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close(context.Background())
	harness.CreateOrders(t, ctx, sc, 500)
	s := src.Server
	config := func(e *harness.Env, user, password string) {
		e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %s, port: %d, user: %s, password: "%s", database: %s, sslmode: disable, tables: [public.orders], slot: faults, publication: faults }
  out:
    plugin: testdest
    version: ">= 0.1"
    settings: { dir: %s }
pipelines:
  orders:
    source: src
    destinations: [out]
    wal:
      url: file://%s
`, s.Host, s.Port, user, password, src.Name, filepath.Join(e.Dir, "out"), filepath.Join(e.Dir, "wal")))
	}

	t.Run("dropped slot", func(t *testing.T) {
		e := harness.NewEnv(t)
		config(e, "postgres", "")
		e.MustRun("sync", "--once")
		if _, err := sc.Exec(ctx, `SELECT pg_drop_replication_slot('faults')`); err != nil {
			t.Fatal(err)
		}
		e.SyncFails("resnapshot", "re-snapshot", "replication slot faults does not exist")
	})
	// A value the column's Arrow type cannot hold, under the default on_unrepresentable: fail, is a data
	// fault: failed at once with the table, column, key and value, never a restart loop.
	t.Run("unrepresentable value", func(t *testing.T) {
		if _, err := sc.Exec(ctx, `CREATE TABLE odd_price (id int PRIMARY KEY, n numeric(10,2)); INSERT INTO odd_price VALUES (1, 1.50), (2, 'NaN')`); err != nil {
			t.Fatal(err)
		}
		e := harness.NewEnv(t)
		e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %s, port: %d, user: postgres, database: %s, sslmode: disable, tables: [public.odd_price], slot: faults_odd, publication: faults_odd }
  out:
    plugin: testdest
    version: ">= 0.1"
    settings: { dir: %s }
pipelines:
  orders:
    source: src
    destinations: [out]
    wal:
      url: file://%s
`, s.Host, s.Port, src.Name, filepath.Join(e.Dir, "out"), filepath.Join(e.Dir, "wal")))
		e.SyncFails("data", "set on_unrepresentable: null_and_record", "table public.odd_price, column n, key id=2: value NaN")
	})
	t.Run("wrong password", func(t *testing.T) {
		e := harness.NewEnv(t)
		r := s.CreateRole(t, "REPLICATION")
		config(e, r.Name, "not-"+r.Password)
		e.SyncRefused("set the connection's password", "check of source src failed", "wrong password")
	})
}

// A value from ${ENV} never reaches stderr or the status file: not in a plugin's error (a directory it cannot
// create), not in a plugin's name.
func TestSecretsRedacted(t *testing.T) {
	e := harness.NewEnv(t)
	const dirSecret, pluginSecret = "s3cr3t-dir-value", "s3cr3t-plugin-value"
	e.ExtraEnv = []string{"SKIPPR_DIR_SECRET=" + dirSecret, "SKIPPR_PLUGIN_SECRET=" + pluginSecret}
	e.WriteConfig(harness.PipelineConfig(`{ rows: 100 }`, `"/proc/${SKIPPR_DIR_SECRET}/out"`, "", "file://"+filepath.Join(e.Dir, "wal"), ""))
	e.SyncRefused("set the connection's dir", "/proc/${SKIPPR_DIR_SECRET}/out is not writable")
	r := e.Run("sync", "--once")
	var files []string
	filepath.WalkDir(filepath.Join(e.Home, "state"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			files = append(files, string(b))
		}
		return nil
	})
	if len(files) == 0 {
		t.Fatal("no status file")
	}
	for _, out := range append(files, r.Stderr, e.Run("status").Stdout, e.Run("status", "--json").Stdout) {
		if strings.Contains(out, dirSecret) {
			t.Fatalf("the secret leaked:\n%s", out)
		}
	}

	e.WriteConfig(strings.Replace(harness.PipelineConfig(`{ rows: 100 }`, filepath.Join(e.Dir, "out"), "", "file://"+filepath.Join(e.Dir, "wal2"), ""),
		"plugin: testdest", "plugin: ${SKIPPR_PLUGIN_SECRET}", 1))
	r = e.Run("sync", "--once")
	if r.Code == 0 || strings.Contains(r.Stderr, pluginSecret) || !strings.Contains(r.Stderr, "${SKIPPR_PLUGIN_SECRET}") {
		t.Fatalf("sync with a secret plugin name: exit %d\n%s", r.Code, r.Stderr)
	}
}

// A transient fault (the destination plugin process killed under it) is retried, shown as retrying, and
// `sync --once` still ends with every row exactly once.
func TestTransientFaultRetriesAndRecovers(t *testing.T) {
	e := harness.NewEnv(t)
	gen := `{ seed: 3, rows: 20000, rows_per_second: 5000, batch_size: 250 }`
	out := filepath.Join(e.Dir, "out")
	e.WriteConfig(harness.PipelineConfig(gen, out, "", "file://"+filepath.Join(e.Dir, "wal"), "      group_commit: { max_bytes: 16KiB, max_delay: 50ms }\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := e.Cmd(ctx, "sync", "--once")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := 0
	for end := time.Now().Add(60 * time.Second); pid == 0 && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		pid = harness.ChildByName(cmd.Process.Pid, "testdest")
	}
	if pid == 0 {
		t.Fatalf("no testdest process within 60s:\n%s", stderr.String())
	}
	time.Sleep(time.Second)
	syscall.Kill(pid, syscall.SIGKILL)
	// The status file says retrying, with the attempt and the error, until the next run publishes.
	sawRetrying := false
	for end := time.Now().Add(20 * time.Second); !sawRetrying && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		var rows []harness.StatusRow
		if json.Unmarshal([]byte(e.Run("status", "--json").Stdout), &rows) == nil && len(rows) == 1 &&
			rows[0].State == "retrying" && rows[0].Fault != nil && rows[0].Fault.Attempt == 1 && rows[0].Fault.Message != "" {
			sawRetrying = true
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sync --once after a transient fault: %v\n%s", err, stderr.String())
	}
	if !sawRetrying || !strings.Contains(stderr.String(), "restarting from the last durable point") {
		t.Fatalf("no retrying state seen (status: %v):\n%s", sawRetrying, stderr.String())
	}
	harness.Compare(t, out, harness.Want(t, gen))
}

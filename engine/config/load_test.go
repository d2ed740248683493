package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// writeConfig writes body to skippr.yml in a fresh directory and returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "skippr.yml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func envOf(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

// errorLines splits a joined error into its lines.
func errorLines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

const fullConfig = `registries:                      # optional; plugin registries this config trusts
  - url: file:///srv/skippr-registry
    keys: ["skippr-ed25519-public BASE64..."]     # inline public keys, or
    key_files: [./keys/dev.pub]                   # paths relative to the config file
connections:
  gen:
    plugin: datagen              # plugin name in a registry
    version: "~> 0.1"            # hashicorp/go-version constraint; validate syntax here
    path: ./bin/skippr-plugin-datagen   # optional local override (unverified; relative to the config file)
    settings:                    # free-form; validated against the plugin's JSON Schema later
      rows: 1000
      password: ${PG_PASSWORD}   # ${VAR} from the environment; ${VAR:-default}; $${ is a literal ${
  sink:
    plugin: testdest
    version: ">= 0.1"
    settings: { dir: /tmp/out }
pipelines:
  orders:
    source: gen                  # a connection name
    destinations: [sink]         # one or more connection names (also accept ` + "`destination: sink`" + `)
    streams: [orders, customers] # optional; empty = all discovered streams
    delivery: exactly-once       # or at-least-once (default exactly-once)
    wal:
      url: file:///var/lib/skippr/wal/orders   # or s3://bucket/prefix ; relative file paths resolved against the config dir
      s3: { endpoint: http://127.0.0.1:9000, region: us-east-1, path_style: true }
      group_commit: { max_bytes: 8MiB, max_delay: 200ms }   # sizes accept B/KiB/MiB/GiB, durations Go syntax
      max_unapplied_bytes: 1GiB  # backpressure bound
    apply: { paused: false }     # a switch to pause the apply loop (rows stay in the WAL)
  audit:
    source: gen
    destination: sink
    delivery: at-least-once
    wal:
      url: s3://skippr-wal/audit/
      s3: { endpoint: http://127.0.0.1:9000 }
      compression: zstd          # s2 (default), zstd or none
    apply: { paused: true }
`

func TestLoadFull(t *testing.T) {
	path := writeConfig(t, fullConfig)
	dir := filepath.Dir(path)
	cfg, err := Load(path, envOf(map[string]string{"PG_PASSWORD": "hunter2"}))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	at := func(line, col int) Pos { return Pos{File: path, Line: line, Column: col} }

	if cfg.Path != path || cfg.Dir != dir {
		t.Errorf("Path, Dir = %q, %q; want %q, %q", cfg.Path, cfg.Dir, path, dir)
	}
	wantReg := []*Registry{{
		URL:      "file:///srv/skippr-registry",
		Keys:     []string{"skippr-ed25519-public BASE64..."},
		KeyFiles: []string{filepath.Join(dir, "keys", "dev.pub")},
		Pos:      at(2, 5),
	}}
	if !reflect.DeepEqual(cfg.Registries, wantReg) {
		t.Errorf("Registries = %+v; want %+v", cfg.Registries[0], wantReg[0])
	}

	if got := cfg.ConnectionNames(); !reflect.DeepEqual(got, []string{"gen", "sink"}) {
		t.Errorf("ConnectionNames = %v", got)
	}
	gen, ok := cfg.Connection("gen")
	if !ok {
		t.Fatal("connection gen not found")
	}
	if gen.Plugin != "datagen" || gen.Version != "~> 0.1" || gen.Constraints.String() != "~> 0.1" ||
		gen.Path != filepath.Join(dir, "bin", "skippr-plugin-datagen") || gen.Pos != at(6, 3) {
		t.Errorf("gen = %+v", gen)
	}
	js, err := gen.SettingsJSON()
	if err != nil || string(js) != `{"rows":1000,"password":"hunter2"}` {
		t.Errorf("gen.SettingsJSON = %s, %v", js, err)
	}
	sink, _ := cfg.Connection("sink")
	if js, _ := sink.SettingsJSON(); string(js) != `{"dir":"/tmp/out"}` {
		t.Errorf("sink.SettingsJSON = %s", js)
	}
	if _, ok := cfg.Connection("nope"); ok {
		t.Error("Connection(nope) found something")
	}

	if len(cfg.Pipelines) != 2 || cfg.Pipelines[0].Name != "orders" || cfg.Pipelines[1].Name != "audit" {
		t.Fatalf("pipelines not in file order: %+v", cfg.Pipelines)
	}
	orders, _ := cfg.Pipeline("orders")
	wantOrders := &Pipeline{
		Name:         "orders",
		Source:       "gen",
		Destinations: []string{"sink"},
		Streams:      []string{"orders", "customers"},
		Delivery:     ExactlyOnce,
		WAL: WALConfig{
			URL:               "file:///var/lib/skippr/wal/orders",
			Scheme:            "file",
			Dir:               "/var/lib/skippr/wal/orders",
			S3:                S3Config{Endpoint: "http://127.0.0.1:9000", Region: "us-east-1", PathStyle: true},
			GroupCommit:       GroupCommit{MaxBytes: 8 << 20, MaxDelay: 200 * time.Millisecond},
			MaxUnappliedBytes: 1 << 30,
			Compression:       "s2",
			Pos:               at(23, 5),
		},
		Pos: at(18, 3),
	}
	if !reflect.DeepEqual(orders, wantOrders) {
		t.Errorf("orders =\n%+v\nwant\n%+v", orders, wantOrders)
	}
	audit, _ := cfg.Pipeline("audit")
	if audit.Delivery != AtLeastOnce || !audit.Apply.Paused || !reflect.DeepEqual(audit.Destinations, []string{"sink"}) ||
		audit.WAL.Scheme != "s3" || audit.WAL.Bucket != "skippr-wal" || audit.WAL.Prefix != "audit" ||
		audit.WAL.URL != "s3://skippr-wal/audit" || audit.WAL.S3.Region != "" || audit.WAL.S3.PathStyle || audit.WAL.Compression != "zstd" {
		t.Errorf("audit = %+v", audit)
	}

	for key, want := range map[string]Pos{
		"registries[0].key_files[0]":                  at(4, 17),
		"connections.gen.settings.password":           at(12, 7),
		"connections.sink.settings.dir":               at(16, 17),
		"pipelines.orders.delivery":                   at(22, 5),
		"pipelines.orders.streams[1]":                 at(21, 23),
		"pipelines.orders.wal.group_commit.max_delay": at(26, 40),
		"pipelines.audit.wal.compression":             at(36, 7),
		"pipelines.audit.apply.paused":                at(37, 14),
	} {
		if got, ok := cfg.Pos(key); !ok || got != want {
			t.Errorf("Pos(%s) = %v, %v; want %v", key, got, ok, want)
		}
	}
	if _, ok := cfg.Pos("pipelines.orders.nope"); ok {
		t.Error("Pos of an absent key reported a position")
	}
}

func TestLoadDefaults(t *testing.T) {
	path := writeConfig(t, `connections:
  src: {plugin: datagen}
  dst: {plugin: testdest}
pipelines:
  p:
    source: src
    destination: dst
    wal: {url: state/wal}
`)
	cfg, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(path)
	if len(cfg.Registries) != 0 {
		t.Errorf("Registries = %v", cfg.Registries)
	}
	src, _ := cfg.Connection("src")
	if src.Version != "" || src.Constraints != nil || src.Path != "" || src.Settings.Len() != 0 {
		t.Errorf("src = %+v", src)
	}
	if js, err := src.SettingsJSON(); err != nil || string(js) != "{}" {
		t.Errorf("SettingsJSON = %s, %v", js, err)
	}
	p := cfg.Pipelines[0]
	want := WALConfig{
		URL:               "file://" + filepath.ToSlash(filepath.Join(dir, "state", "wal")),
		Scheme:            "file",
		Dir:               filepath.Join(dir, "state", "wal"),
		GroupCommit:       GroupCommit{MaxBytes: DefaultGroupCommitMaxBytes, MaxDelay: DefaultGroupCommitMaxDelay},
		MaxUnappliedBytes: DefaultMaxUnappliedBytes,
		Compression:       "s2",
		Pos:               Pos{File: path, Line: 8, Column: 5},
	}
	if !reflect.DeepEqual(p.WAL, want) {
		t.Errorf("WAL = %+v\nwant %+v", p.WAL, want)
	}
	if p.Delivery != ExactlyOnce || p.Apply.Paused || p.Streams != nil || !reflect.DeepEqual(p.Destinations, []string{"dst"}) {
		t.Errorf("pipeline = %+v", p)
	}
	dst, _ := cfg.Connection("dst")
	if want := (ApplyLimits{MaxBytes: DefaultApplyMaxBytes, Unset: ApplyKeys{MaxInterval: true, MaxBytes: true, MaxEntries: true}, Pos: Pos{File: path, Line: 3, Column: 3}}); dst.Apply != want {
		t.Errorf("dst.Apply = %+v, want %+v", dst.Apply, want)
	}
}

func TestLoadApplyLimits(t *testing.T) {
	tests := []struct {
		name, apply string
		want        ApplyLimits
	}{
		{"all three", "{max_interval: 1m, max_bytes: 64MiB, max_entries: 10}", ApplyLimits{MaxInterval: time.Minute, MaxBytes: 64 << 20, MaxEntries: 10}},
		{"interval only keeps the default bytes", "{max_interval: 500ms}", ApplyLimits{MaxInterval: 500 * time.Millisecond, MaxBytes: DefaultApplyMaxBytes, Unset: ApplyKeys{MaxBytes: true, MaxEntries: true}}},
		// 0s is stated, not left out: it must override a plugin's proposal.
		{"interval 0s is set", "{max_interval: 0s}", ApplyLimits{MaxBytes: DefaultApplyMaxBytes, Unset: ApplyKeys{MaxBytes: true, MaxEntries: true}}},
		{"entries only", "{max_entries: 1}", ApplyLimits{MaxBytes: DefaultApplyMaxBytes, MaxEntries: 1, Unset: ApplyKeys{MaxInterval: true, MaxBytes: true}}},
		{"empty", "{}", ApplyLimits{MaxBytes: DefaultApplyMaxBytes, Unset: ApplyKeys{MaxInterval: true, MaxBytes: true, MaxEntries: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, strings.Replace(base, "sink: {plugin: testdest}", "sink: {plugin: testdest, apply: "+tt.apply+"}", 1))
			cfg, err := Load(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			sink, _ := cfg.Connection("sink")
			tt.want.Pos = Pos{File: path, Line: 3, Column: 28}
			if sink.Apply != tt.want {
				t.Errorf("Apply = %+v, want %+v", sink.Apply, tt.want)
			}
		})
	}
}

func TestLoadEmpty(t *testing.T) {
	for _, body := range []string{"", "# only a comment\n"} {
		cfg, err := Load(writeConfig(t, body), nil)
		if err != nil || len(cfg.Pipelines)+len(cfg.Connections)+len(cfg.Registries) != 0 {
			t.Errorf("Load(%q) = %+v, %v", body, cfg, err)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yml"), nil)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "nope.yml") {
		t.Errorf("err = %v", err)
	}
}

// base is a valid config that error cases extend; its line numbers are stable:
// line 1 connections, 2 gen, 3 sink, 4 pipelines, 5 orders, 6 source, 7 destinations, 8 wal.
const base = `connections:
  gen: {plugin: datagen}
  sink: {plugin: testdest}
pipelines:
  orders:
    source: gen
    destinations: [sink]
    wal: {url: wal}
`

// syntaxBase is nine lines of valid config that syntax-error cases continue.
const syntaxBase = `registries:
  - url: file:///tmp/r
connections:
  gen:
    plugin: datagen
    settings:
      rows: 10
  out:
    plugin: testdest
`

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		body string
		env  map[string]string
		want []string // FILE is replaced by the config path
	}{
		{
			name: "unknown key with suggestion",
			body: "connections:\n  gen:\n    plugn: datagen\n",
			want: []string{
				`FILE:2:3: connections.gen: missing required key "plugin"`,
				`FILE:3:5: connections.gen.plugn: unknown key; did you mean "plugin"?`,
			},
		},
		{
			name: "unknown key without suggestion",
			body: base + "    colour: blue\n",
			want: []string{`FILE:9:5: pipelines.orders.colour: unknown key (want one of: source, destinations, destination, streams, delivery, wal, apply, fleet)`},
		},
		{
			name: "unknown top-level key",
			body: base + "pipeline: {}\n",
			want: []string{`FILE:9:1: pipeline: unknown key; did you mean "pipelines"?`},
		},
		{
			name: "metrics address without a port",
			body: base + "metrics: {addr: localhost}\n",
			want: []string{`FILE:9:11: metrics.addr: "localhost" is not host:port (for example 127.0.0.1:9464): address localhost: missing port in address`},
		},
		{
			name: "unknown key in a flow mapping deep down",
			body: base + "    apply: {pasued: true}\n",
			want: []string{`FILE:9:13: pipelines.orders.apply.pasued: unknown key; did you mean "paused"?`},
		},
		{
			name: "apply limits: bad values",
			body: strings.Replace(base, "sink: {plugin: testdest}", "sink:\n    plugin: testdest\n    apply: {max_interval: 1h-, max_bytes: 0, max_entries: 0}", 1),
			want: []string{
				`FILE:5:13: connections.sink.apply.max_interval: "1h-" is not a duration: want a duration such as 200ms, 2s or 1m30s`,
				`FILE:5:32: connections.sink.apply.max_bytes: must be more than 0 bytes`,
				`FILE:5:46: connections.sink.apply.max_entries: must be at least 1`,
			},
		},
		{
			name: "apply limits: not a number, unknown key",
			body: strings.Replace(base, "sink: {plugin: testdest}", "sink:\n    plugin: testdest\n    apply: {max_entries: 2.5, max_wait: 1s}", 1),
			want: []string{
				`FILE:5:13: connections.sink.apply.max_entries: want a whole number such as 100; got "2.5"`,
				`FILE:5:31: connections.sink.apply.max_wait: unknown key (want one of: max_interval, max_bytes, max_entries)`,
			},
		},
		{
			name: "apply limits on a source",
			body: strings.Replace(base, "gen: {plugin: datagen}", "gen:\n    plugin: datagen\n    apply: {max_interval: 1s}", 1),
			want: []string{`FILE:4:5: connections.gen.apply: connection gen is the source of pipeline orders and no pipeline's destination; apply limits only destinations: remove apply`},
		},
		{
			name: "wrong type: mapping for a list",
			body: strings.Replace(base, "destinations: [sink]", "destinations: {sink: 1}", 1),
			want: []string{
				`FILE:7:5: pipelines.orders.destinations: want a list of connection names; got a mapping`,
			},
		},
		{
			name: "wrong type: string for a boolean",
			body: base + "    apply: {paused: maybe}\n",
			want: []string{`FILE:9:13: pipelines.orders.apply.paused: want true or false; got "maybe"`},
		},
		{
			name: "wrong type: list for a section",
			body: "connections: [gen, sink]\n",
			want: []string{`FILE:1:1: connections: want a mapping of connection names to connections; got a list`},
		},
		{
			name: "wrong type: list for a string",
			body: strings.Replace(base, "source: gen", "source: [gen]", 1),
			want: []string{`FILE:6:5: pipelines.orders.source: want a string; got a list`},
		},
		{
			name: "wrong type: settings not a mapping",
			body: "connections:\n  gen:\n    plugin: datagen\n    settings: [1, 2]\n",
			want: []string{`FILE:4:5: connections.gen.settings: want a mapping of plugin settings; got a list`},
		},
		{
			name: "wrong type: whole document",
			body: "just a string\n",
			want: []string{`FILE:1:1: want a mapping with keys registries, connections, pipelines, metrics, query; got a string`},
		},
		{
			name: "bad enum",
			body: base + "    delivery: exactly-twice\n",
			want: []string{`FILE:9:5: pipelines.orders.delivery: "exactly-twice" is not one of exactly-once, at-least-once`},
		},
		{
			name: "bad enum from the environment does not show the value",
			body: base + "    delivery: ${DELIVERY}\n",
			env:  map[string]string{"DELIVERY": "s3cr3t-value"},
			want: []string{`FILE:9:5: pipelines.orders.delivery: the value of "${DELIVERY}" is not one of exactly-once, at-least-once`},
		},
		{
			name: "values from the environment are never quoted in errors",
			body: strings.Replace(strings.Replace(base, "source: gen", "source: ${SRC}", 1),
				"wal: {url: wal}", "wal:\n      url: ${WAL_URL}\n      max_unapplied_bytes: ${MAXU}", 1),
			env: map[string]string{"SRC": "gne", "WAL_URL": "gs://secret-bucket/x", "MAXU": "12secretunits"},
			want: []string{
				`FILE:6:5: pipelines.orders.source: the value of "${SRC}" names no connection (known: gen, sink)`,
				`FILE:9:7: pipelines.orders.wal.url: the value of "${WAL_URL}": unsupported scheme (want file:// or s3://, or a plain path)`,
				`FILE:10:7: pipelines.orders.wal.max_unapplied_bytes: the value of "${MAXU}" is not a size: unknown unit (use B, KiB, MiB, GiB or TiB)`,
			},
		},
		{
			name: "unknown WAL compression",
			body: strings.Replace(base, "wal: {url: wal}", "wal:\n      url: wal\n      compression: lz4", 1),
			want: []string{`FILE:10:7: pipelines.orders.wal.compression: "lz4" is not one of s2, zstd, none`},
		},
		{
			name: "bad size unit",
			body: strings.Replace(base, "wal: {url: wal}", "wal:\n      url: wal\n      group_commit: {max_bytes: 8MB}", 1),
			want: []string{`FILE:10:22: pipelines.orders.wal.group_commit.max_bytes: "8MB" is not a size: unknown unit "MB" (use B, KiB, MiB, GiB or TiB)`},
		},
		{
			name: "bad size number",
			body: strings.Replace(base, "wal: {url: wal}", "wal:\n      url: wal\n      max_unapplied_bytes: lots", 1),
			want: []string{`FILE:10:7: pipelines.orders.wal.max_unapplied_bytes: "lots" is not a size: want a whole number of bytes with an optional unit B, KiB, MiB, GiB or TiB, e.g. 8MiB`},
		},
		{
			name: "zero size",
			body: strings.Replace(base, "wal: {url: wal}", "wal:\n      url: wal\n      max_unapplied_bytes: 0", 1),
			want: []string{`FILE:10:7: pipelines.orders.wal.max_unapplied_bytes: must be more than 0 bytes`},
		},
		{
			name: "bad duration",
			body: strings.Replace(base, "wal: {url: wal}", "wal:\n      url: wal\n      group_commit:\n        max_delay: 200", 1),
			want: []string{`FILE:11:9: pipelines.orders.wal.group_commit.max_delay: "200" is not a duration: want a duration such as 200ms, 2s or 1m30s`},
		},
		{
			name: "negative duration",
			body: strings.Replace(base, "wal: {url: wal}", "wal:\n      url: wal\n      group_commit: {max_delay: -1s}", 1),
			want: []string{`FILE:10:22: pipelines.orders.wal.group_commit.max_delay: "-1s" is not a duration: must not be negative`},
		},
		{
			name: "unapplied bound below group commit size",
			body: strings.Replace(base, "wal: {url: wal}", "wal:\n      url: wal\n      group_commit: {max_bytes: 2GiB}", 1),
			want: []string{`FILE:10:22: pipelines.orders.wal.group_commit.max_bytes: max_unapplied_bytes (1073741824) must be at least group_commit.max_bytes (2147483648)`},
		},
		{
			name: "unknown connection",
			body: strings.Replace(base, "source: gen", "source: gne", 1),
			want: []string{`FILE:6:5: pipelines.orders.source: unknown connection "gne"; did you mean "gen"? (known: gen, sink)`},
		},
		{
			name: "unknown destination in a list",
			body: strings.Replace(base, "destinations: [sink]", "destinations: [sink, warehouse]", 1),
			want: []string{`FILE:7:26: pipelines.orders.destinations[1]: unknown connection "warehouse" (known: gen, sink)`},
		},
		{
			name: "no connections at all",
			body: "pipelines:\n  p:\n    source: a\n    destination: b\n    wal: {url: w}\n",
			want: []string{
				`FILE:3:5: pipelines.p.source: unknown connection "a" (no connections are defined)`,
				`FILE:4:5: pipelines.p.destination: unknown connection "b" (no connections are defined)`,
			},
		},
		{
			name: "unset environment variable",
			body: "connections:\n  gen:\n    plugin: datagen\n    settings:\n      password: ${PG_PASSWORD}\n",
			want: []string{`FILE:5:7: connections.gen.settings.password: environment variable PG_PASSWORD is not set (give a default with ${PG_PASSWORD:-value})`},
		},
		{
			name: "several unset variables in one value, other values' secrets not shown",
			body: "connections:\n  gen:\n    plugin: datagen\n    settings:\n      user: ${PG_USER}\n      dsn: postgres://${PG_USER}:${PG_PASSWORD}@${PG_HOST}/db\n",
			env:  map[string]string{"PG_USER": "admin-secret"},
			want: []string{`FILE:6:7: connections.gen.settings.dsn: environment variables PG_PASSWORD, PG_HOST are not set`},
		},
		{
			name: "yaml syntax error in a flow mapping",
			body: "connections:\n  gen:\n    plugin: datagen\n    settings: {a: ${X}\n",
			want: []string{`FILE:4:15: YAML syntax: did not find expected ',' or '}' (could not find flow mapping end token '}')`},
		},
		{
			name: "unterminated reference in a quoted value",
			body: "connections:\n  gen:\n    plugin: datagen\n    settings: {a: \"${X\"}\n",
			want: []string{`FILE:4:16: connections.gen.settings.a: unterminated "${" (write "$${" for a literal "${")`},
		},
		{
			name: "bad variable name",
			body: "connections:\n  gen:\n    plugin: ${1PLUGIN}\n",
			want: []string{`FILE:3:5: connections.gen.plugin: invalid variable name "1PLUGIN" in "${1PLUGIN}" (want letters, digits and _, not starting with a digit)`},
		},
		{
			name: "bad version constraint",
			body: "connections:\n  gen:\n    plugin: datagen\n    version: \"~> banana\"\n",
			want: []string{`FILE:4:5: connections.gen.version: "~> banana" is not a version constraint (examples: "~> 0.1", ">= 0.1, < 1.0")`},
		},
		{
			name: "yaml syntax error",
			body: "connections:\n  gen:\n    plugin: datagen\n   version: 1\n",
			want: []string{`FILE:4:4: YAML syntax: did not find expected key (value is not allowed in this context)`},
		},
		{
			name: "yaml syntax error: tab",
			body: "connections:\n\tgen: {}\n",
			want: []string{`FILE:2:1: YAML syntax: found character that cannot start any token (found character '\t' that cannot start any token)`},
		},
		{
			// yaml.v3 alone said line 11 (where it gave up) and line 4 (where the mapping
			// began) for these two.
			name: "yaml syntax error: missing colon on line 10",
			body: syntaxBase + "    settings\n      dir: /tmp/x\n",
			want: []string{`FILE:10:5: YAML syntax: could not find expected ':' (unexpected key name)`},
		},
		{
			name: "yaml syntax error: bad indent on line 12",
			body: syntaxBase + "    settings:\n      dir: /tmp/x\n     bad: 1\n",
			want: []string{`FILE:12:6: YAML syntax: did not find expected key (value is not allowed in this context)`},
		},
		{
			name: "second document",
			body: base + "---\nconnections: {}\n",
			want: []string{`FILE:9:1: a config file holds one YAML document, found a second one (remove the --- separator)`},
		},
		{
			name: "missing required keys name the parent",
			body: "connections:\n  gen: {plugin: datagen}\npipelines:\n  orders:\n    streams: [a]\n",
			want: []string{
				`FILE:4:3: pipelines.orders: missing required key "source"`,
				`FILE:4:3: pipelines.orders: missing required key "destinations"`,
				`FILE:4:3: pipelines.orders: missing required key "wal"`,
			},
		},
		{
			name: "required key without a value",
			body: strings.Replace(base, "wal: {url: wal}", "wal:\n      url:", 1),
			want: []string{`FILE:9:7: pipelines.orders.wal.url: needs a value`},
		},
		{
			name: "empty required string",
			body: "connections:\n  gen: {plugin: \"\"}\n",
			want: []string{`FILE:2:9: connections.gen.plugin: must not be empty`},
		},
		{
			name: "destination and destinations",
			body: base + "    destination: sink\n",
			want: []string{`FILE:9:5: pipelines.orders.destination: use destination or destinations, not both`},
		},
		{
			name: "empty destinations",
			body: strings.Replace(base, "destinations: [sink]", "destinations: []", 1),
			want: []string{`FILE:7:5: pipelines.orders.destinations: needs at least one connection name`},
		},
		{
			name: "duplicate list items",
			body: strings.Replace(base, "destinations: [sink]", "destinations: [sink, gen, sink]", 1),
			want: []string{`FILE:7:31: pipelines.orders.destinations[2]: "sink" is listed twice (first at pipelines.orders.destinations[0])`},
		},
		{
			name: "duplicate key",
			body: base + "    source: sink\n",
			want: []string{`FILE:9:5: pipelines.orders.source: duplicate key (first defined on line 6)`},
		},
		{
			name: "bad names",
			body: "connections:\n  \"my conn\": {plugin: \"data gen\"}\n",
			want: []string{
				`FILE:2:3: connections["my conn"]: connection name "my conn" must start with a letter or digit and hold only letters, digits, '-' and '_' (at most 64)`,
				`FILE:2:15: connections["my conn"].plugin: "data gen" is not a plugin name (letters, digits, '.', '-' and '_')`,
			},
		},
		{
			name: "registry without keys, bad url scheme, duplicate",
			body: "registries:\n  - url: ./reg\n  - url: ftp://example.com/reg\n    keys: [k]\n  - url: reg/../reg\n    key_files: [k.pub]\n",
			want: []string{
				`FILE:2:5: registries[0]: needs at least one public key in keys or key_files`,
				`FILE:3:5: registries[1].url: "ftp://example.com/reg": unsupported scheme "ftp" (want file, http or https, or a plain path)`,
				`FILE:5:5: registries[2].url: registry "reg/../reg" is listed twice (first at registries[0].url)`,
			},
		},
		{
			name: "wal url problems",
			body: "connections:\n  a: {plugin: x}\npipelines:\n" +
				"  p1: {source: a, destination: a, wal: {url: \"s3://Bad_Bucket/x\"}}\n" +
				"  p2: {source: a, destination: a, wal: {url: \"gs://b/x\"}}\n" +
				"  p3: {source: a, destination: a, wal: {url: \"file://host/x\"}}\n" +
				"  p4: {source: a, destination: a, wal: {url: \"~/wal\", s3: {endpoint: \"127.0.0.1:9000\"}}}\n",
			want: []string{
				`FILE:4:41: pipelines.p1.wal.url: "s3://Bad_Bucket/x": the bucket is not a valid S3 bucket name (3-63 lower-case letters, digits, dots and hyphens)`,
				`FILE:5:41: pipelines.p2.wal.url: "gs://b/x": unsupported scheme "gs" (want file:// or s3://, or a plain path)`,
				`FILE:6:41: pipelines.p3.wal.url: "file://host/x": a file URL has no host: write file:///absolute/path, or a plain path such as ./wal`,
				`FILE:7:41: pipelines.p4.wal.url: "~/wal": ~ is not expanded; write ${HOME}/… instead`,
				`FILE:7:60: pipelines.p4.wal.s3.endpoint: "127.0.0.1:9000" is not an http:// or https:// URL with a host`,
			},
		},
		{
			name: "overlapping WALs",
			body: "connections:\n  a: {plugin: x}\npipelines:\n" +
				"  p1: {source: a, destination: a, wal: {url: wal}}\n" +
				"  p2: {source: a, destination: a, wal: {url: ./wal/p2}}\n" +
				"  p3: {source: a, destination: a, wal: {url: s3://bucket/wal}}\n" +
				"  p4: {source: a, destination: a, wal: {url: s3://bucket/wal2}}\n" +
				"  p5: {source: a, destination: a, wal: {url: s3://bucket/wal/}}\n",
			want: []string{
				`FILE:5:41: pipelines.p2.wal.url: WAL location overlaps pipelines.p1.wal.url (FILE:4:41); every pipeline needs its own WAL`,
				`FILE:8:41: pipelines.p5.wal.url: WAL location overlaps pipelines.p3.wal.url (FILE:6:41); every pipeline needs its own WAL`,
			},
		},
		{
			name: "alias cycle in settings",
			body: "connections:\n  gen:\n    plugin: datagen\n    settings:\n      loop: &l [*l]\n",
			want: []string{`FILE:5:17: connections.gen.settings.loop[0]: an alias refers to a list that contains it`},
		},
		{
			name: "value not representable in JSON",
			body: "connections:\n  gen:\n    plugin: datagen\n    settings: {ratio: .inf, when: !custom x}\n",
			want: []string{
				`FILE:4:16: connections.gen.settings.ratio: ".inf" cannot be represented in JSON`,
				`FILE:4:29: connections.gen.settings.when: unsupported YAML tag !custom`,
			},
		},
		{
			name: "many errors at once, in file order",
			body: "registries:\n  - url: http://reg.example\n    keys: [k]\n    extra: 1\n" +
				"connections:\n  gen: {plugin: datagen, version: \"1..2\"}\n" +
				"pipelines:\n  orders:\n    source: nope\n    destinations: [gen]\n    delivery: twice\n    wal: {url: s3://b}\n",
			want: []string{
				`FILE:4:5: registries[0].extra: unknown key (want one of: url, keys, key_files)`,
				`FILE:6:26: connections.gen.version: "1..2" is not a version constraint (examples: "~> 0.1", ">= 0.1, < 1.0")`,
				`FILE:9:5: pipelines.orders.source: unknown connection "nope" (known: gen)`,
				`FILE:11:5: pipelines.orders.delivery: "twice" is not one of exactly-once, at-least-once`,
				`FILE:12:11: pipelines.orders.wal.url: "s3://b": the bucket is not a valid S3 bucket name (3-63 lower-case letters, digits, dots and hyphens)`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.body)
			cfg, err := Load(path, envOf(tt.env))
			if err == nil {
				t.Fatalf("Load succeeded: %+v", cfg)
			}
			var want []string
			for _, w := range tt.want {
				want = append(want, strings.ReplaceAll(w, "FILE", path))
			}
			if got := errorLines(err); !reflect.DeepEqual(got, want) {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Pos.File != path {
				t.Errorf("errors.As(*Error) = %v, %+v", ce != nil, ce)
			}
			for _, v := range tt.env {
				if strings.Contains(err.Error(), v) {
					t.Errorf("error reveals the environment value %q: %v", v, err)
				}
			}
		})
	}
}

func TestInterpolationInConfig(t *testing.T) {
	path := writeConfig(t, `connections:
  gen:
    plugin: ${PLUGIN:-datagen}
    settings:
      port: ${PORT}
      ratio: ${RATIO}
      quoted_port: "${PORT}"
      pin: ${PIN}
      flag: ${FLAG}
      nothing: ${EMPTY:-}
      fallback: ${UNSET:-fallback value}
      empty_is_unset: ${EMPTY:-used}
      set_but_empty: ${EMPTY}
      literal: $${NOT_A_VAR} costs $$5 and $x
      dsn: postgres://app:${PW}@db:5432/app
      explicit: !!str ${PORT}
      list:
        - ${PORT}
        - "${PORT}"
        - plain
      ${KEY}: keys are not interpolated
pipelines:
  p:
    source: gen
    destination: gen
    wal:
      url: ${WAL_ROOT}/p
      group_commit: {max_bytes: "${GC_BYTES:-4MiB}"}
    apply:
      paused: ${PAUSED}
`)
	cfg, err := Load(path, envOf(map[string]string{
		"PORT": "5432", "RATIO": "0.25", "PIN": "0123", "FLAG": "true", "EMPTY": "",
		"PW": "s3cr3t", "WAL_ROOT": "/var/lib/wal", "PAUSED": "true",
	}))
	if err != nil {
		t.Fatal(err)
	}
	gen := cfg.Connections[0]
	if gen.Plugin != "datagen" {
		t.Errorf("Plugin = %q", gen.Plugin)
	}
	js, _ := gen.SettingsJSON()
	want := `{"port":5432,"ratio":0.25,"quoted_port":"5432","pin":"0123","flag":true,"nothing":"",` +
		`"fallback":"fallback value","empty_is_unset":"used","set_but_empty":"",` +
		`"literal":"${NOT_A_VAR} costs $$5 and $x","dsn":"postgres://app:s3cr3t@db:5432/app",` +
		`"explicit":"5432","list":[5432,"5432","plain"],"${KEY}":"keys are not interpolated"}`
	if string(js) != want {
		t.Errorf("SettingsJSON =\n%s\nwant\n%s", js, want)
	}
	p := cfg.Pipelines[0]
	if p.WAL.Dir != "/var/lib/wal/p" || p.WAL.GroupCommit.MaxBytes != 4<<20 || !p.Apply.Paused {
		t.Errorf("pipeline = %+v", p)
	}
	// The escaped literal was written by the user, so it is not redacted; the rest is.
	red := string(gen.Settings.RedactedJSON())
	wantRed := `{"port":"<redacted>","ratio":"<redacted>","quoted_port":"<redacted>","pin":"<redacted>","flag":"<redacted>",` +
		`"nothing":"<redacted>","fallback":"<redacted>","empty_is_unset":"<redacted>","set_but_empty":"<redacted>",` +
		`"literal":"${NOT_A_VAR} costs $$5 and $x","dsn":"<redacted>","explicit":"<redacted>",` +
		`"list":["<redacted>","<redacted>","plain"],"${KEY}":"keys are not interpolated"}`
	if red != wantRed {
		t.Errorf("RedactedJSON =\n%s\nwant\n%s", red, wantRed)
	}
}

// ${…} inside flow collections, the style the README uses: braces and commas of a reference
// are not YAML flow indicators there, and columns stay those of the file.
func TestInterpolationInFlowCollections(t *testing.T) {
	path := writeConfig(t, `connections:
  out:
    plugin: testdest
    settings: { dir: ${OUT_DIR}, port: ${PORT}, csv: ${LIST:-a,b}, list: [${PORT}, "${PORT}", $${LIT}], n: {x: ${PORT}} }
`)
	cfg, err := Load(path, envOf(map[string]string{"OUT_DIR": "/tmp/out", "PORT": "5432"}))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := cfg.Connections[0].SettingsJSON()
	if want := `{"dir":"/tmp/out","port":5432,"csv":"a,b","list":[5432,"5432","${LIT}"],"n":{"x":5432}}`; string(js) != want {
		t.Errorf("SettingsJSON =\n%s\nwant\n%s", js, want)
	}

	path = writeConfig(t, "connections:\n  out:\n    plugin: testdest\n    settings: { dir: ${OUT_DIR}, port: ${PORT} }\n")
	_, err = Load(path, envOf(map[string]string{"OUT_DIR": "/tmp/out"}))
	if got, want := fmt.Sprint(err), path+`:4:34: connections.out.settings.port: environment variable PORT is not set (give a default with ${PORT:-value})`; got != want {
		t.Errorf("error = %s\nwant    %s", got, want)
	}
}

func TestRedaction(t *testing.T) {
	const secret = "hunter2-very-secret"
	path := writeConfig(t, `connections:
  pg:
    plugin: postgres
    settings:
      host: db.internal
      password: ${PG_PASSWORD}
      tls: {key: "${TLS_KEY}", verify: true}
`)
	cfg, err := Load(path, envOf(map[string]string{"PG_PASSWORD": secret, "TLS_KEY": secret}))
	if err != nil {
		t.Fatal(err)
	}
	pg := cfg.Connections[0]
	raw, _ := pg.SettingsJSON()
	if !strings.Contains(string(raw), secret) {
		t.Fatalf("SettingsJSON lost the secret: %s", raw)
	}
	if m := pg.Settings.Map(); m["password"] != secret || m["tls"].(map[string]any)["key"] != secret {
		t.Errorf("Map = %v", m)
	}
	red := pg.Settings.Redacted()
	if red["password"] != RedactedValue || red["host"] != "db.internal" || red["tls"].(map[string]any)["verify"] != true {
		t.Errorf("Redacted = %v", red)
	}

	var logBuf bytes.Buffer
	slog.New(slog.NewJSONHandler(&logBuf, nil)).Info("starting", "settings", pg.Settings, "conn", pg)
	var cfgJSON bytes.Buffer
	enc := json.NewEncoder(&cfgJSON)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(cfg); err != nil {
		t.Fatal(err)
	}
	renderings := map[string]string{
		"String":       pg.Settings.String(),
		"RedactedJSON": string(pg.Settings.RedactedJSON()),
		"%v":           fmt.Sprintf("%v", pg),
		"%+v":          fmt.Sprintf("%+v", *pg),
		"%#v":          fmt.Sprintf("%#v", *pg),
		"slog":         logBuf.String(),
		"json.Marshal": cfgJSON.String(),
	}
	for name, s := range renderings {
		if strings.Contains(s, secret) {
			t.Errorf("%s reveals the secret: %s", name, s)
		}
		if !strings.Contains(s, RedactedValue) {
			t.Errorf("%s shows no redaction marker: %s", name, s)
		}
	}
	if !strings.Contains(logBuf.String(), `"settings":{"host":"db.internal","password":"<redacted>","tls":{"key":"<redacted>","verify":true}}`) {
		t.Errorf("slog output = %s", logBuf.String())
	}
}

func TestRelativePaths(t *testing.T) {
	path := writeConfig(t, `registries:
  - url: ./registry
    key_files: [keys/a.pub, /etc/skippr/b.pub]
  - url: file:reg2
    keys: [k]
  - url: https://plugins.example.com/skippr
    keys: [k]
connections:
  a:
    plugin: x
    path: bin/../bin/skippr-plugin-x
pipelines:
  p1: {source: a, destination: a, wal: {url: "file:wal/p1"}}
  p2: {source: a, destination: a, wal: {url: "file:///abs/wal/p2"}}
  p3: {source: a, destination: a, wal: {url: "../elsewhere/p3"}}
  p4: {source: a, destination: a, wal: {url: "file://localhost/abs/wal/p4"}}
  p5: {source: a, destination: a, wal: {url: "wal/with%20space"}}
`)
	cfg, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(path)
	url := func(p string) string { return "file://" + filepath.ToSlash(p) }
	checks := []struct{ name, got, want string }{
		{"registry 0 url", cfg.Registries[0].URL, url(filepath.Join(dir, "registry"))},
		{"registry 0 key file", cfg.Registries[0].KeyFiles[0], filepath.Join(dir, "keys", "a.pub")},
		{"registry 0 abs key file", cfg.Registries[0].KeyFiles[1], "/etc/skippr/b.pub"},
		{"registry 1 url", cfg.Registries[1].URL, url(filepath.Join(dir, "reg2"))},
		{"registry 2 url", cfg.Registries[2].URL, "https://plugins.example.com/skippr"},
		{"plugin path", cfg.Connections[0].Path, filepath.Join(dir, "bin", "skippr-plugin-x")},
		{"wal p1", cfg.Pipelines[0].WAL.Dir, filepath.Join(dir, "wal", "p1")},
		{"wal p1 url", cfg.Pipelines[0].WAL.URL, url(filepath.Join(dir, "wal", "p1"))},
		{"wal p2", cfg.Pipelines[1].WAL.Dir, "/abs/wal/p2"},
		{"wal p3", cfg.Pipelines[2].WAL.Dir, filepath.Join(filepath.Dir(dir), "elsewhere", "p3")},
		{"wal p4", cfg.Pipelines[3].WAL.Dir, "/abs/wal/p4"},
		{"wal p5", cfg.Pipelines[4].WAL.Dir, filepath.Join(dir, "wal", "with%20space")},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q; want %q", c.name, c.got, c.want)
		}
	}

	// A relative config path resolves against the working directory's view of it.
	t.Chdir(dir)
	cfg, err = Load("skippr.yml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Path != "skippr.yml" || cfg.Dir != dir || cfg.Pipelines[0].WAL.Dir != filepath.Join(dir, "wal", "p1") {
		t.Errorf("relative Load: Path %q Dir %q WAL %q", cfg.Path, cfg.Dir, cfg.Pipelines[0].WAL.Dir)
	}
}

func TestAnchorsAndMerges(t *testing.T) {
	path := writeConfig(t, `connections:
  base: &base
    plugin: datagen
    settings: &common
      rows: 10
      tables: [a, b]
  gen:
    <<: *base
    settings:
      <<: *common
      rows: 20
pipelines:
  p: {source: gen, destinations: [base], wal: {url: w}}
`)
	cfg, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	gen, _ := cfg.Connection("gen")
	js, _ := gen.SettingsJSON()
	if gen.Plugin != "datagen" || string(js) != `{"rows":20,"tables":["a","b"]}` {
		t.Errorf("gen = %+v, settings %s", gen, js)
	}
	// Merged keys keep the position where they are written: in the anchor.
	if p, _ := cfg.Pos("connections.gen.plugin"); p.Line != 3 {
		t.Errorf("Pos(connections.gen.plugin) = %v; want line 3", p)
	}
	if p, _ := cfg.Pos("connections.gen.settings.rows"); p.Line != 11 {
		t.Errorf("Pos(connections.gen.settings.rows) = %v; want line 11", p)
	}
}

func TestManyPipelinesKeepOrder(t *testing.T) {
	var b strings.Builder
	b.WriteString("connections:\n  c: {plugin: x}\npipelines:\n")
	names := []string{"zeta", "alpha", "mid", "beta", "omega", "a1"}
	for _, n := range names {
		fmt.Fprintf(&b, "  %s: {source: c, destination: c, wal: {url: wal/%s}}\n", n, n)
	}
	cfg, err := Load(writeConfig(t, b.String()), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		if cfg.Pipelines[i].Name != n {
			t.Fatalf("Pipelines[%d] = %s; want %s", i, cfg.Pipelines[i].Name, n)
		}
		if p, ok := cfg.Pipeline(n); !ok || p != cfg.Pipelines[i] {
			t.Errorf("Pipeline(%s) = %v, %v", n, p, ok)
		}
	}
}

func TestLoadFleetPin(t *testing.T) {
	cfg, err := Load(writeConfig(t, base+"    fleet: {pin: worker-2}\n"), envOf(nil))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if p, _ := cfg.Pipeline("orders"); p.Fleet.Pin != "worker-2" {
		t.Fatalf("pin %q, want worker-2", p.Fleet.Pin)
	}
	_, err = Load(writeConfig(t, base+"    fleet: {pinned: worker-2}\n"), envOf(nil))
	if err == nil || !strings.Contains(err.Error(), `pipelines.orders.fleet.pinned: unknown key (want one of: pin)`) {
		t.Fatalf("misspelt key: %v", err)
	}
}

// TestLoadQuery: `query: {connection: NAME}` names a connection of the file; a wrong name or key is refused.
func TestLoadQuery(t *testing.T) {
	const conns = "connections:\n  dk: { plugin: duckdb }\n  mine: { plugin: sqlengine }\n"
	for _, tc := range []struct {
		name, query, want, wantErr string
	}{
		{"named", "query: { connection: mine }\n", "mine", ""},
		{"absent", "", "", ""},
		{"unknown", "query: { connection: mien }\n", "", `query.connection: unknown connection "mien"; did you mean "mine"?`},
		{"empty", "query: { connection: \"\" }\n", "", "query.connection: must not be empty"},
		{"unknown key", "query: { engine: mine }\n", "", "query.engine: unknown key"},
		{"server", "query: { server: 127.0.0.1:31337 }\n", "", ""},
		{"server and connection", "query: { connection: mine, server: grpc+tls://q.example:443, server_token: abc }\n", "mine", ""},
		{"server not host:port", "query: { server: localhost }\n", "", `query.server: "localhost" is not host:port`},
		{"token without server", "query: { server_token: abc }\n", "", "query.server_token: is set but query.server is not"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(writeConfig(t, conns+tc.query), nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Query.Connection != tc.want {
				t.Errorf("Query.Connection = %q, want %q", cfg.Query.Connection, tc.want)
			}
		})
	}
}

package dest

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

func TestParseSettings(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, raw, err string
		check          func(t *testing.T, s Settings)
	}{
		{name: "defaults", raw: `{"catalog": {"warehouse": "` + dir + `"}}`, check: func(t *testing.T, s Settings) {
			if s.Catalog.Type != "sql" || s.Catalog.Warehouse != "file://"+dir || s.Catalog.Path != filepath.Join(dir, "catalog.db") ||
				s.Namespace != "skippr" || s.TargetFileSize != 128<<20 || s.FormatVersion != 2 {
				t.Fatalf("%+v", s)
			}
		}},
		{name: "file url and s3", raw: `{"catalog": {"warehouse": "s3://b/p", "path": "` + dir + `/c.db"}, "s3": {"endpoint": "http://127.0.0.1:9", "path_style": true, "access_key_id": "k", "secret_access_key": "s", "region": "r"}}`, check: func(t *testing.T, s Settings) {
			p := s.ioProps()
			if p["s3.endpoint"] != "http://127.0.0.1:9" || p["s3.force-virtual-addressing"] != "false" || p["s3.access-key-id"] != "k" || p["s3.secret-access-key"] != "s" || p["s3.region"] != "r" {
				t.Fatalf("io props %v", p)
			}
		}},
		{name: "no warehouse", raw: `{"catalog": {}}`, err: "catalog.warehouse is required"},
		{name: "s3 warehouse without catalog path", raw: `{"catalog": {"warehouse": "s3://b/p"}}`, err: "catalog.path (the SQLite file) is required"},
		{name: "unknown key", raw: `{"catalog": {"warehouse": "/x"}, "bogus": 1}`, err: "bogus"},
		{name: "bad type", raw: `{"catalog": {"type": "hive", "warehouse": "/x"}}`, err: `catalog.type "hive"`},
		{name: "rest without uri", raw: `{"catalog": {"type": "rest"}}`, err: "catalog.uri is required"},
		{name: "rest with bad uri", raw: `{"catalog": {"type": "rest", "uri": "127.0.0.1:80"}}`, err: "not an http(s) URL"},
		{name: "sql with token", raw: `{"catalog": {"warehouse": "/x", "token": "t"}}`, err: "belong to a rest catalog"},
		{name: "table name with a dot", raw: `{"catalog": {"warehouse": "/x"}, "tables": {"a": "b.c"}}`, err: "tables.a"},
		{name: "bad partition", raw: `{"catalog": {"warehouse": "/x"}, "partitions": {"a": ["weekly(ts)"]}}`, err: "partitions.a"},
		{name: "format version 1", raw: `{"catalog": {"warehouse": "/x"}, "format_version": 1}`, err: "format_version 1"},
		{name: "tiny files", raw: `{"catalog": {"warehouse": "/x"}, "target_file_size": 10}`, err: "below 1 MiB"},
		{name: "relative file url", raw: `{"catalog": {"warehouse": "file://x/y"}}`, err: "absolute path"},
		{name: "gs warehouse", raw: `{"catalog": {"warehouse": "gs://b"}}`, err: "only local paths, file:// and s3://"},
		{name: "empty namespace level", raw: `{"catalog": {"warehouse": "/x"}, "namespace": "a..b"}`, err: "empty level"},
		{name: "metadata column twice", raw: `{"catalog": {"warehouse": "/x"}, "metadata_columns": ["op", "op"]}`, err: `lists "op" twice`},
		{name: "unknown metadata column", raw: `{"catalog": {"warehouse": "/x"}, "metadata_columns": ["when"]}`, err: `unknown column "when"`},
		{name: "bad override", raw: `{"catalog": {"warehouse": "/x"}, "table_options": {"public.a": {"metadata_columns": ["when"]}}}`, err: "table_options.public.a"},
		{name: "soft delete per stream", raw: `{"catalog": {"warehouse": "/x"}, "soft_delete": true, "metadata_columns": ["op"], "table_options": {"public.a": {"soft_delete": false, "history": true}}}`, check: func(t *testing.T, s Settings) {
			a, errA := s.For("public.a")
			b, errB := s.For("public.b")
			if errA != nil || errB != nil || a.SoftDelete || !a.Op || !a.History || !b.SoftDelete || !b.Op || b.History {
				t.Fatalf("public.a %+v (%v), public.b %+v (%v)", a, errA, b, errB)
			}
		}},
		{name: "memory_limit default", raw: `{"catalog": {"warehouse": "/x"}}`, check: func(t *testing.T, s Settings) {
			if s.MemoryLimit != 256<<20 || s.bufferBudget() != 64<<20 {
				t.Fatalf("memory_limit %d, budget %d", s.MemoryLimit, s.bufferBudget())
			}
		}},
		{name: "memory_limit as a size", raw: `{"catalog": {"warehouse": "/x"}, "memory_limit": "256MiB"}`, check: func(t *testing.T, s Settings) {
			if s.MemoryLimit != 256<<20 {
				t.Fatalf("memory_limit %d", s.MemoryLimit)
			}
		}},
		{name: "memory_limit in bytes", raw: `{"catalog": {"warehouse": "/x"}, "memory_limit": 100000000}`, check: func(t *testing.T, s Settings) {
			if s.MemoryLimit != 100000000 {
				t.Fatalf("memory_limit %d", s.MemoryLimit)
			}
		}},
		{name: "memory_limit off", raw: `{"catalog": {"warehouse": "/x"}, "memory_limit": "off"}`, check: func(t *testing.T, s Settings) {
			if s.MemoryLimit != NoMemoryLimit || s.bufferBudget() != 0 {
				t.Fatalf("memory_limit %d, budget %d", s.MemoryLimit, s.bufferBudget())
			}
		}},
		{name: "memory_limit too small", raw: `{"catalog": {"warehouse": "/x"}, "memory_limit": "16MiB"}`, err: "memory_limit 16777216 is below 32 MiB"},
		{name: "memory_limit not a size", raw: `{"catalog": {"warehouse": "/x"}, "memory_limit": "lots"}`, err: `"lots" is not a size`},
		{name: "memory_limit negative", raw: `{"catalog": {"warehouse": "/x"}, "memory_limit": -1}`, err: "negative"},
		{name: "sigv4 takes region and keys from s3", raw: `{"catalog": {"type": "rest", "uri": "http://127.0.0.1:9", "warehouse": "s3://w", "sigv4": {}}, "s3": {"region": "eu-west-1", "access_key_id": "k", "secret_access_key": "s"}}`, check: func(t *testing.T, s Settings) {
			if v := s.Catalog.SigV4; *v != (SigV4Settings{Region: "eu-west-1", Service: "execute-api", AccessKeyID: "k", SecretAccessKey: "s"}) {
				t.Fatalf("sigv4 %+v", v)
			}
		}},
		{name: "sigv4 of its own", raw: `{"catalog": {"type": "rest", "uri": "http://127.0.0.1:9", "sigv4": {"region": "r", "service": "glue", "access_key_id": "k2", "secret_access_key": "s2", "session_token": "t"}}, "s3": {"region": "eu-west-1", "access_key_id": "k", "secret_access_key": "s"}}`, check: func(t *testing.T, s Settings) {
			if v := s.Catalog.SigV4; *v != (SigV4Settings{Region: "r", Service: "glue", AccessKeyID: "k2", SecretAccessKey: "s2", SessionToken: "t"}) {
				t.Fatalf("sigv4 %+v", v)
			}
		}},
		{name: "sigv4 with the default chain", raw: `{"catalog": {"type": "rest", "uri": "http://127.0.0.1:9", "sigv4": {"region": "r"}}}`, check: func(t *testing.T, s Settings) {
			if v := s.Catalog.SigV4; v.AccessKeyID != "" || v.Region != "r" {
				t.Fatalf("sigv4 %+v", v)
			}
		}},
		{name: "sigv4 without region", raw: `{"catalog": {"type": "rest", "uri": "http://127.0.0.1:9", "sigv4": {}}}`, err: "catalog.sigv4.region is required"},
		{name: "sigv4 and token", raw: `{"catalog": {"type": "rest", "uri": "http://127.0.0.1:9", "token": "t", "sigv4": {"region": "r"}}}`, err: "exclude each other"},
		{name: "sigv4 with half a key", raw: `{"catalog": {"type": "rest", "uri": "http://127.0.0.1:9", "sigv4": {"region": "r", "access_key_id": "k"}}}`, err: "both access_key_id and secret_access_key"},
		{name: "sigv4 on a sql catalog", raw: `{"catalog": {"warehouse": "/x", "sigv4": {"region": "r"}}}`, err: "belong to a rest catalog"},
		{name: "sigv4 unknown key", raw: `{"catalog": {"type": "rest", "uri": "http://127.0.0.1:9", "sigv4": {"region": "r", "signing_name": "x"}}}`, err: "signing_name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseSettings(json.RawMessage(tc.raw))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s)
		})
	}
}

func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// Settings that look right but lead nowhere fail every call with an error naming what is wrong.
func TestUnreachableOrUnusableCatalog(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	uri := fmt.Sprintf("http://127.0.0.1:%d", closedPort(t))
	cases := []struct {
		name, raw string
		want      []string
	}{
		{name: "rest catalog on a closed port", raw: `{"catalog": {"type": "rest", "uri": "` + uri + `"}}`, want: []string{"rest catalog " + uri, "connection refused"}},
		{name: "warehouse under a file", raw: `{"catalog": {"warehouse": "` + blocker + `/wh"}}`, want: []string{blocker + "/wh"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := &Destination{}
			defer d.Close()
			raw := json.RawMessage(tc.raw)
			start := time.Now()
			errs := map[string]error{"check": d.Check(ctxT(t), raw)}
			_, errs["apply"] = d.Apply(ctxT(t), serve.ApplyRequest{Settings: raw, Pipeline: "p", Sequence: 1})
			_, errs["last applied"] = d.LastApplied(ctxT(t), raw, "p")
			for call, err := range errs {
				if err == nil {
					t.Fatalf("%s succeeded", call)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: %q does not contain %q", call, err, w)
					}
				}
			}
			if el := time.Since(start); el > 20*time.Second {
				t.Errorf("failing took %s", el)
			}
		})
	}
}

func TestCheckProbesWarehouse(t *testing.T) {
	e := newEnv(t, nil)
	if err := e.d.Check(ctxT(t), e.raw); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(e.dir, "wh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if strings.HasPrefix(en.Name(), ".skippr-check") {
			t.Fatalf("probe %s left behind", en.Name())
		}
	}
	caps, err := e.d.Capabilities(ctxT(t), e.raw)
	if err != nil || !caps.ExactlyOnce || !caps.Deletes || !caps.SchemaEvolution {
		t.Fatalf("capabilities %+v %v", caps, err)
	}
}

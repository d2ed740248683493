package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// AddConnection creates or extends the file, keeps comments, quotes what is not YAML, and replaces only when
// asked to.
func TestAddConnection(t *testing.T) {
	pg := NewConnection{Name: "pg", Plugin: "postgres", Constraint: "~> 0.1",
		Settings: [][2]string{{"host", "127.0.0.1"}, {"port", "5432"}, {"password", "${PG_PASSWORD}"}, {"odd", "a: b: c"}}}
	const pgYAML = "  pg:\n    plugin: postgres\n    version: \"~> 0.1\"\n    settings:\n      host: 127.0.0.1\n      port: 5432\n      password: ${PG_PASSWORD}\n      odd: \"a: b: c\"\n"
	for _, tc := range []struct {
		name    string
		before  *string // nil: no file
		nc      NewConnection
		replace bool
		want    string
		wantErr error
	}{
		{"new file", nil, pg, false, "connections:\n" + pgYAML, nil},
		{"empty file", ptr(""), pg, false, "connections:\n" + pgYAML, nil},
		{"keeps comments", ptr("# mine\nconnections:\n  f:\n    plugin: file # local\n"), pg, false,
			"# mine\nconnections:\n  f:\n    plugin: file # local\n" + pgYAML, nil},
		{"exists", ptr("connections:\n  pg:\n    plugin: file\n"), pg, false, "connections:\n  pg:\n    plugin: file\n", ErrConnectionExists},
		{"replace", ptr("connections:\n  pg:\n    plugin: file\n"), NewConnection{Name: "pg", Plugin: "echo", Path: "/bin/echo"}, true,
			"connections:\n  pg:\n    plugin: echo\n    path: /bin/echo\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "skippr.yml")
			if tc.before != nil {
				if err := os.WriteFile(path, []byte(*tc.before), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := AddConnection(path, tc.nc, tc.replace)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("AddConnection: %v, want %v", err, tc.wantErr)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Fatalf("file:\n%s\nwant:\n%s", b, tc.want)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// `skippr connect --set` takes key=value; the value may be empty or hold '=', the key may not be empty.
func TestParseSettings(t *testing.T) {
	tests := []struct {
		in      []string
		want    [][2]string
		wantErr string
	}{
		{nil, nil, ""},
		{[]string{"host=127.0.0.1", "port=5432"}, [][2]string{{"host", "127.0.0.1"}, {"port", "5432"}}, ""},
		{[]string{"password=${PG_PASSWORD}", "opts=a=b", "empty="}, [][2]string{{"password", "${PG_PASSWORD}"}, {"opts", "a=b"}, {"empty", ""}}, ""},
		{[]string{"host=x", "noequals"}, nil, `--set "noequals": want key=value`},
		{[]string{"=value"}, nil, `--set "=value": want key=value`},
	}
	for _, tt := range tests {
		got, err := ParseSettings(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("ParseSettings(%q) error %v; want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseSettings(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

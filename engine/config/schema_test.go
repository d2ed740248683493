package config

import (
	"reflect"
	"strings"
	"testing"
)

const settingsSchema2020 = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "rows": {"type": "integer", "minimum": 1},
    "dir": {"type": "string"},
    "password": {"type": "string", "minLength": 8, "pattern": "^[a-z]+$"},
    "tables": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "batch": {"type": "integer", "maximum": 100}},
        "required": ["name"],
        "additionalProperties": false
      }
    },
    "tls": {"type": "object", "properties": {"mode": {"enum": ["disable", "require"]}}}
  },
  "required": ["rows", "dir"],
  "additionalProperties": false
}`

const settingsSchemaDraft7 = `{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "type": "object",
  "definitions": {"port": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 65536}},
  "properties": {
    "host": {"type": "string", "format": "hostname"},
    "port": {"$ref": "#/definitions/port"},
    "replicas": {"type": "array", "items": {"$ref": "#/definitions/port"}, "maxItems": 2},
    "ssl": {"type": "boolean"}
  },
  "required": ["host"],
  "dependencies": {"ssl": ["port"]}
}`

func loadConnection(t *testing.T, settings string, env map[string]string) (*Connection, string) {
	t.Helper()
	path := writeConfig(t, "connections:\n  gen:\n    plugin: datagen\n"+settings)
	cfg, err := Load(path, envOf(env))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return cfg.Connections[0], path
}

func TestValidateSettings(t *testing.T) {
	tests := []struct {
		name     string
		schema   string
		settings string // appended under connections.gen (line 4 onwards)
		env      map[string]string
		want     []string // FILE is replaced by the config path; nil means valid
	}{
		{
			name:   "2020-12 valid",
			schema: settingsSchema2020,
			settings: `    settings:
      rows: 10
      dir: /tmp/out
      tables: [{name: orders, batch: 100}]
      tls: {mode: require}
`,
		},
		{
			name:   "2020-12 violations with nested keys and array indexes",
			schema: settingsSchema2020,
			settings: `    settings:
      rows: 0
      password: ${PW}
      tables:
        - name: orders
          batch: 500
        - batch: 5
          nmae: customers
      tls: {mode: verify}
      colour: red
`,
			env: map[string]string{"PW": "Secret123!"},
			want: []string{
				`FILE:4:5: connections.gen.settings: missing required setting "dir"`,
				`FILE:5:7: connections.gen.settings.rows: must be >= 1`,
				`FILE:6:7: connections.gen.settings.password: does not match the pattern "^[a-z]+$"`,
				`FILE:9:11: connections.gen.settings.tables[0].batch: must be <= 100`,
				`FILE:10:11: connections.gen.settings.tables[1]: missing required setting "name"`,
				`FILE:11:11: connections.gen.settings.tables[1].nmae: unknown setting; did you mean "name"?`,
				`FILE:12:13: connections.gen.settings.tls.mode: must be one of "disable", "require"`,
				`FILE:13:7: connections.gen.settings.colour: unknown setting (known: dir, password, rows, tables, tls)`,
			},
		},
		{
			name:     "missing settings name the connection",
			schema:   settingsSchema2020,
			settings: "",
			want:     []string{`FILE:2:3: connections.gen.settings: missing required settings "rows", "dir"`},
		},
		{
			name:   "wrong types",
			schema: settingsSchema2020,
			settings: `    settings:
      rows: "10"
      dir: 7
      tables: {name: x}
`,
			want: []string{
				`FILE:5:7: connections.gen.settings.rows: must be integer, not string`,
				`FILE:6:7: connections.gen.settings.dir: must be string, not number`,
				`FILE:7:7: connections.gen.settings.tables: must be array, not object`,
			},
		},
		{
			name:   "draft-07 valid",
			schema: settingsSchemaDraft7,
			settings: `    settings:
      host: db.internal
      port: 5432
      replicas: [5433]
      ssl: true
`,
		},
		{
			name:   "draft-07 violations through $ref and dependencies",
			schema: settingsSchemaDraft7,
			settings: `    settings:
      host: "not a host!"
      replicas:
        - 5433
        - 70000
        - 0
      ssl: true
`,
			want: []string{
				`FILE:4:5: connections.gen.settings: missing setting "port" (required when "ssl" is set)`,
				`FILE:5:7: connections.gen.settings.host: "not a host!" is not a valid hostname`,
				`FILE:6:7: connections.gen.settings.replicas: must have at most 2 items`,
				`FILE:8:11: connections.gen.settings.replicas[1]: must be < 65536`,
				`FILE:9:11: connections.gen.settings.replicas[2]: must be > 0`,
			},
		},
		{
			name:   "draft-07 format violation from the environment hides the value",
			schema: settingsSchemaDraft7,
			settings: `    settings:
      host: ${DB_HOST}
`,
			env:  map[string]string{"DB_HOST": "secret host name"},
			want: []string{`FILE:5:7: connections.gen.settings.host: is not a valid hostname`},
		},
		{
			name:   "schema without $schema is 2020-12",
			schema: `{"type": "object", "properties": {"n": {"type": "integer"}}, "unevaluatedProperties": false}`,
			settings: `    settings:
      n: 1
      extra: true
`,
			want: []string{`FILE:6:7: connections.gen.settings.extra: is not allowed`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, path := loadConnection(t, tt.settings, tt.env)
			err := ValidateSettings(conn, []byte(tt.schema))
			var want []string
			for _, w := range tt.want {
				want = append(want, strings.ReplaceAll(w, "FILE", path))
			}
			if got := errorLines(err); !reflect.DeepEqual(got, want) {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, v := range tt.env {
				if err != nil && strings.Contains(err.Error(), v) {
					t.Errorf("error reveals the environment value %q", v)
				}
			}
		})
	}
}

func TestValidateSettingsBadSchema(t *testing.T) {
	conn, _ := loadConnection(t, "    settings: {a: 1}\n", nil)
	tests := []struct {
		name, schema, want string
	}{
		{"not JSON", `{"type": `, "connection gen: plugin datagen settings schema: not JSON"},
		{"invalid schema", `{"type": 12}`, "connection gen: plugin datagen settings schema:"},
		{"remote reference is not fetched", `{"$ref": "http://127.0.0.1:1/other.json"}`, "connection gen: plugin datagen settings schema:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateSettings(conn, []byte(tt.schema))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("err = %v; want prefix %q", err, tt.want)
			}
		})
	}
}

func TestValidateSettingsHandBuiltConnection(t *testing.T) {
	// A Connection built in code (no file) validates too; errors then carry no position.
	conn := &Connection{Name: "x", Plugin: "p"}
	err := ValidateSettings(conn, []byte(`{"required": ["a"]}`))
	if err == nil || err.Error() != `connections.x.settings: missing required setting "a"` {
		t.Errorf("err = %v", err)
	}
}

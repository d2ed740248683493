package config

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestSettingsValues(t *testing.T) {
	conn, _ := loadConnection(t, `    settings:
      hex: 0x1F
      under: 1_000
      big: 12345678901234567890123
      neg: -5
      float: 1.50
      exp: 1e3
      dotfloat: .5
      ts: 2001-12-14
      yes: yes
      null1: ~
      null2:
      bool: True
      bin: !!binary aGVsbG8=
      quoted: "123"
      multi: |
        line1
        line2
      1: numeric key
      "a.b": {nested: [1, [2, {deep: x}]]}
`, nil)
	got, err := conn.SettingsJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"hex":31,"under":1000,"big":12345678901234567890123,"neg":-5,"float":1.50,"exp":1e3,"dotfloat":0.5,` +
		`"ts":"2001-12-14","yes":"yes","null1":null,"null2":null,"bool":true,"bin":"aGVsbG8=","quoted":"123",` +
		`"multi":"line1\nline2\n","1":"numeric key","a.b":{"nested":[1,[2,{"deep":"x"}]]}}`
	if string(got) != want {
		t.Errorf("SettingsJSON =\n%s\nwant\n%s", got, want)
	}
	if !json.Valid(got) {
		t.Error("SettingsJSON is not valid JSON")
	}
	m := conn.Settings.Map()
	if m["big"] != json.Number("12345678901234567890123") || m["bool"] != true || m["null1"] != nil {
		t.Errorf("Map = %v", m)
	}
	if conn.Settings.Len() != 17 {
		t.Errorf("Len = %d", conn.Settings.Len())
	}
}

func TestSettingsPositions(t *testing.T) {
	path := writeConfig(t, `connections:
  gen:
    plugin: datagen
    settings:
      "a.b": {nested: [1, [2, {deep: x}]]}
`)
	cfg, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]Pos{
		`connections.gen.settings["a.b"]`:                   {path, 5, 7},
		`connections.gen.settings["a.b"].nested[1][1].deep`: {path, 5, 32},
		`connections.gen.settings["a.b"].nested[1][1]`:      {path, 5, 31},
		`connections.gen.settings["a.b"].nested[0]`:         {path, 5, 24},
	} {
		if got, ok := cfg.Pos(key); !ok || got != want {
			t.Errorf("Pos(%s) = %v, %v; want %v", key, got, ok, want)
		}
	}
	// A violation deep inside maps back to the same place.
	err = ValidateSettings(cfg.Connections[0], []byte(`{"properties": {"a.b": {"properties": {"nested": {"prefixItems": [{}, {"prefixItems": [{}, {"properties": {"deep": {"type": "integer"}}}]}]}}}}}`))
	want := path + `:5:32: connections.gen.settings["a.b"].nested[1][1].deep: must be integer, not string`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v; want %s", err, want)
	}
}

func TestSettingsAliasBomb(t *testing.T) {
	body := "connections:\n  gen:\n    plugin: x\n    settings:\n      a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
	prev := "a"
	for _, name := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		body += "      " + name + ": &" + name + " [" + strings.Repeat("*"+prev+", ", 8) + "*" + prev + "]\n"
		prev = name
	}
	start := time.Now()
	_, err := Load(writeConfig(t, body), nil)
	if err == nil || !strings.Contains(err.Error(), "settings expand to more than 100000 values through aliases") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
}

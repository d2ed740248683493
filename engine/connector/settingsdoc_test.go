package connector

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/engine/pluginhost"
	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/registry"
)

func TestMain(m *testing.M) { testplugins.Main(m) }

// TestDescribe publishes the real datagen binary into a signed registry and asks for its settings the way
// `skippr plugin info` does: the schema is the plugin's own (installed, verified, started), the text form shows
// each setting with its type and default, --json carries the schema whole, and no skippr.lock is written.
func TestDescribe(t *testing.T) {
	ctx := context.Background()
	bin := testplugins.Build(t, "datagen")
	info, err := registry.ReadPluginInfo(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	pubPath, privPath, _, err := registry.Keygen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pub, err := registry.ReadPublicKeyFile(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	regDir := t.TempDir()
	if _, err := registry.Add(ctx, registry.AddRequest{Dir: regDir, Artifact: bin, Name: "datagen", Version: info.Version}); err != nil {
		t.Fatal(err)
	}
	if _, err := registry.Sign(regDir, privPath); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	rc, err := registry.New(registry.Options{Home: home, Protocols: pluginhost.Protocols,
		Registries: []registry.Registry{{URL: "file://" + regDir, Keys: []registry.PublicKey{pub}}}})
	if err != nil {
		t.Fatal(err)
	}
	si, err := rc.Find(ctx, "datagen")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cwd, _ := os.Getwd()

	d := Describe(ctx, rc, si.Info("datagen"), log)
	if d.Settings == nil {
		t.Fatalf("no settings: %s", d.SettingsError)
	}
	if d.Settings.Version != info.Version {
		t.Errorf("settings of version %q, want %q", d.Settings.Version, info.Version)
	}
	var text bytes.Buffer
	if err := d.WriteText(&text, pluginhost.Protocols); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		`(?m)^VERSION\s+PROTOCOLS`, // the registry's listing first
		`(?m)^SETTING\s+TYPE\s+REQUIRED\s+DEFAULT\s+DESCRIPTION$`,
		`(?m)^batch_size\s+integer\s+-\s+10000\s+events per Arrow batch; one checkpoint per batch$`,
		`(?m)^stream\s+string\s+-\s+"events"\s+the stream's`,
		`(?m)^update_ratio\s+number\s+-\s+0\s+share of events`,
		`(?m)^seed\s+integer\s+-\s+1\s+the same seed always produces the same events$`,
	} {
		if !regexp.MustCompile(row).MatchString(text.String()) {
			t.Errorf("text lacks %s:\n%s", row, text.String())
		}
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Name     string `json:"name"`
		Versions []any  `json:"versions"`
		Settings struct {
			Schema struct {
				Properties map[string]any `json:"properties"`
			} `json:"settings_schema"`
		} `json:"settings"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Name != "datagen" || len(back.Versions) != 1 || back.Settings.Schema.Properties["delete_ratio"] == nil {
		t.Errorf("JSON lacks the listing or the schema: %s", b)
	}
	for _, dir := range []string{home, cwd} {
		if _, err := os.Stat(filepath.Join(dir, "skippr.lock")); err == nil {
			t.Errorf("Describe wrote a skippr.lock in %s", dir)
		}
	}

	// A plugin the registry lacks: the listing is still shown, with why the settings are missing.
	d = Describe(ctx, rc, registry.PluginVersions{Name: "nosuch"}, log)
	text.Reset()
	if err := d.WriteText(&text, pluginhost.Protocols); err != nil {
		t.Fatal(err)
	}
	if d.Settings != nil || !strings.Contains(text.String(), "settings: unknown (") || !strings.Contains(d.SettingsError, "nosuch") {
		t.Errorf("a missing plugin: settings %v, error %q, text:\n%s", d.Settings, d.SettingsError, text.String())
	}
}

// TestSettingRows checks the flattening on nested objects, arrays, type lists, enums and required keys.
func TestSettingRows(t *testing.T) {
	schema := `{"type":"object","required":["catalog"],"properties":{
		"catalog":{"type":"object","required":["warehouse"],"properties":{"warehouse":{"type":"string"},"type":{"type":"string","enum":["sql","rest"],"default":"sql"}}},
		"tables":{"type":"array","items":{"type":"string"}},
		"memory_limit":{"type":["integer","string"]},
		"free":{}}}`
	var buf bytes.Buffer
	if err := (SettingsDoc{Plugin: "p", Version: "1.0.0", Schema: json.RawMessage(schema)}).WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`catalog            object                 yes       -        `,
		`catalog.type       string ("sql"|"rest")  -         "sql"    `,
		`catalog.warehouse  string                 yes       -        `,
		`free               -                      -         -        `,
		`memory_limit       integer|string         -         -        `,
		`tables             array of string        -         -        `,
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2+len(want) {
		t.Fatalf("got:\n%s", buf.String())
	}
	for i, w := range want {
		if strings.TrimRight(lines[2+i], " ") != strings.TrimRight(w, " ") {
			t.Errorf("row %d = %q, want %q", i, lines[2+i], w)
		}
	}
}

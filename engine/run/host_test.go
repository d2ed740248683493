package run

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/registry"
)

// Registries reads inline keys and key files (relative ones against the config's directory); a bad key is
// Refused and names the registry's place in the file.
func TestRegistries(t *testing.T) {
	dir := t.TempDir()
	pubPath, _, _, err := registry.Keygen(dir)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	pos := config.Pos{File: "skippr.yml", Line: 3}
	for _, tc := range []struct {
		name string
		reg  config.Registry
		keys int
		err  string
	}{
		{"inline key", config.Registry{URL: "file:///r", Keys: []string{strings.TrimSpace(string(pub))}}, 1, ""},
		{"relative key file", config.Registry{URL: "file:///r", KeyFiles: []string{filepath.Base(pubPath)}}, 1, ""},
		{"both", config.Registry{URL: "file:///r", Keys: []string{string(pub)}, KeyFiles: []string{pubPath}}, 2, ""},
		{"bad key", config.Registry{URL: "file:///r", Keys: []string{"nonsense"}, Pos: pos}, 0, "skippr.yml:3: registries: file:///r: key: "},
		{"missing key file", config.Registry{URL: "file:///r", KeyFiles: []string{"nope.pub"}, Pos: pos}, 0, "skippr.yml:3: registries: file:///r: key file: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			regs, err := Registries(&config.Config{Dir: dir, Registries: []*config.Registry{&tc.reg}})
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) || CodeOf(err) != Refused {
					t.Fatalf("err %v (code %v), want Refused starting %q", err, CodeOf(err), tc.err)
				}
				return
			}
			if err != nil || len(regs) != 1 || regs[0].URL != "file:///r" || len(regs[0].Keys) != tc.keys {
				t.Fatalf("Registries: %v, %+v", err, regs)
			}
		})
	}
}

package registry

import (
	"errors"
	"strings"
	"testing"
)

// A registry that answers without the plugin ends the search when it lists a close name
// (a typo), and the project's fallback registry is not asked once a configured one
// answered; otherwise the next configured registry is asked in its turn.
func TestFindStopsAtTypoAndSkipsFallback(t *testing.T) {
	local := newFixture(t)
	local.addForeign("testdest", "0.1.0", "darwin", "arm64", "destination", 1)
	local.sign()
	remote := newFixture(t)
	remote.addForeign("warehouse", "0.1.0", "darwin", "arm64", "destination", 1)
	remote.sign()
	srv, log := remote.serve()

	tests := []struct {
		name     string
		plugin   string
		fallback bool // the HTTP registry is the unnamed fallback (like the public one)
		want     string
		asked    bool // the HTTP registry was contacted
	}{
		{"typo stops at the first registry", "testdst", false, "no plugin testdst in " + local.fileURL() + "; did you mean testdest?", false},
		{"a named later registry is asked in its turn", "warehouse", false, "", true},
		{"the fallback is not asked after an answer", "warehouse", true, "no plugin warehouse in " + local.fileURL() + " (they list: testdest); " + srv.URL + " was not asked", false},
		{"no close name, nothing anywhere", "kafka", false, "no plugin kafka in " + local.fileURL() + " or " + srv.URL + " (they list: testdest, warehouse)", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log.mu.Lock()
			log.paths = nil
			log.mu.Unlock()
			httpReg := remote.reg(srv.URL)
			httpReg.Fallback = tt.fallback
			c := newClient(t, t.TempDir(), nil, local.reg(local.fileURL()), httpReg)
			si, err := c.Find(testCtx(t), tt.plugin)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Find: %v", err)
			case tt.want == "" && si.Registry.URL != strings.TrimRight(srv.URL, "/"):
				t.Fatalf("found in %s", si.Registry.URL)
			case tt.want != "" && (!errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v\nwant ErrNotFound containing %q", err, tt.want)
			}
			log.mu.Lock()
			asked := len(log.paths) > 0
			log.mu.Unlock()
			if asked != tt.asked {
				t.Errorf("HTTP registry asked = %v, want %v", asked, tt.asked)
			}
		})
	}
}

func TestMergeRegistriesKeepsFallbackOnlyWhenUnnamed(t *testing.T) {
	d := DefaultRegistry()
	if m := MergeRegistries([]Registry{{URL: "file:///r"}}, []Registry{d}); !m[1].Fallback {
		t.Errorf("default registry added after the user's is not a fallback: %+v", m)
	}
	named := Registry{URL: DefaultRegistryURL}
	if m := MergeRegistries([]Registry{named}, []Registry{d}); len(m) != 1 || m[0].Fallback {
		t.Errorf("default registry named by the user is still a fallback: %+v", m)
	}
}

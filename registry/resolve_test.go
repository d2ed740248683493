package registry

import (
	"errors"
	"strings"
	"testing"
)

// testIndex builds an index in memory; resolution never looks at binaries.
func testIndex() *Index {
	sum := strings.Repeat("ab", 32)
	rel := func(protos []int, yanked string, plats ...string) *Release {
		r := &Release{ProtocolVersions: protos, Kind: "source", Yanked: yanked, Platforms: map[string]Artifact{}}
		for _, p := range plats {
			r.Platforms[p] = Artifact{URL: "x/" + p, SHA256: sum, Size: 1}
		}
		return r
	}
	return &Index{Format: 1, Plugins: map[string]*Plugin{
		"pg": {Versions: map[string]*Release{
			"1.0.0":        rel([]int{1}, "", "linux_amd64", "darwin_arm64"),
			"1.2.0":        rel([]int{1}, "", "linux_amd64", "darwin_arm64"),
			"1.2.3":        rel([]int{1}, "", "linux_amd64", "darwin_arm64"),
			"1.2.4":        rel([]int{1}, "loses rows on reconnect", "linux_amd64", "darwin_arm64"),
			"1.3.0":        rel([]int{1}, "", "darwin_arm64"),
			"1.9.0":        rel([]int{1, 2}, "", "linux_amd64"),
			"2.0.0":        rel([]int{2}, "", "linux_amd64", "darwin_arm64"),
			"2.1.0-beta.1": rel([]int{2}, "", "linux_amd64"),
		}},
	}}
}

func TestResolve(t *testing.T) {
	ix := testIndex()
	if err := ix.validate(); err != nil {
		t.Fatal(err)
	}
	linux := Platform{OS: "linux", Arch: "amd64"}
	cases := []struct {
		constraint string
		protos     []int
		platform   Platform
		want       string   // version, when no error
		err        error    // sentinel, when an error
		msg        []string // substrings of the error
	}{
		{constraint: "1.2.3", protos: []int{1}, platform: linux, want: "1.2.3"},
		{constraint: "= 1.2.3", protos: []int{1}, platform: linux, want: "1.2.3"},
		{constraint: "~> 1.2", protos: []int{1}, platform: linux, want: "1.9.0"},
		{constraint: "~> 1.2.0", protos: []int{1}, platform: linux, want: "1.2.3"}, // 1.2.4 is yanked
		{constraint: ">= 1, < 2", protos: []int{1}, platform: linux, want: "1.9.0"},
		{constraint: ">= 1, < 1.9", protos: []int{1}, platform: linux, want: "1.2.3"}, // 1.3.0 has no linux build
		{constraint: ">= 1, < 1.9", protos: []int{1}, platform: Platform{"darwin", "arm64"}, want: "1.3.0"},
		{constraint: "", protos: []int{1}, platform: linux, want: "1.9.0"},
		{constraint: "", protos: []int{1, 2}, platform: linux, want: "2.0.0"}, // prereleases only when asked for
		{constraint: "2.1.0-beta.1", protos: []int{2}, platform: linux, want: "2.1.0-beta.1"},
		{constraint: "1.2.4", protos: []int{1}, platform: linux, want: "1.2.4"}, // exact pin allows a yanked version
		{constraint: "~> 2.0", protos: []int{1}, platform: linux, err: ErrIncompatible,
			msg: []string{"2.0.0 (speaks protocol [2], the engine speaks [1])", "newest version that works with this engine and platform: 1.9.0"}},
		{constraint: "~> 3.0", protos: []int{1}, platform: linux, err: ErrNotFound,
			msg: []string{`no version matches "~> 3.0"`, "available: 2.1.0-beta.1, 2.0.0, 1.9.0, 1.3.0, 1.2.4 (yanked), 1.2.3"}},
		{constraint: ">= 1.2.4, < 1.2.5", protos: []int{1}, platform: linux, err: ErrNotFound,
			msg: []string{"1.2.4 (yanked: loses rows on reconnect)"}},
		{constraint: "1.3.0", protos: []int{1}, platform: linux, err: ErrNotFound,
			msg: []string{"no build for linux_amd64 (built for darwin_arm64)"}},
		{constraint: "not a constraint", protos: []int{1}, platform: linux, err: ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.constraint+"/"+tc.platform.String(), func(t *testing.T) {
			res, err := ix.Resolve("pg", tc.constraint, tc.protos, tc.platform)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("got %v (%+v), want error %v", err, res.Version, tc.err)
				}
				for _, m := range tc.msg {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("error %q does not mention %q", err, m)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Version != tc.want {
				t.Fatalf("resolved %s, want %s", res.Version, tc.want)
			}
			if res.Artifact != res.Release.Platforms[tc.platform.String()] {
				t.Errorf("artifact %+v is not the %s build", res.Artifact, tc.platform)
			}
		})
	}
}

func TestResolveUnknownPlugin(t *testing.T) {
	_, err := testIndex().Resolve("pgx", "", []int{1}, HostPlatform())
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"pgx"`) || !strings.Contains(err.Error(), "it lists: pg") {
		t.Fatalf("error %v", err)
	}
}

func TestParseIndexRejects(t *testing.T) {
	sum := strings.Repeat("0", 64)
	cases := map[string]string{
		"format":       `{"format":2,"plugins":{}}`,
		"unknown":      `{"format":1,"plugins":{},"extra":1}`,
		"bad name":     `{"format":1,"plugins":{"Bad Name":{"versions":{}}}}`,
		"noncanonical": `{"format":1,"plugins":{"a":{"versions":{"1.2":{"protocol_versions":[1],"kind":"source","platforms":{"linux_amd64":{"url":"a","sha256":"` + sum + `","size":1}}}}}}}`,
		"kind":         `{"format":1,"plugins":{"a":{"versions":{"1.2.0":{"protocol_versions":[1],"kind":"sink","platforms":{"linux_amd64":{"url":"a","sha256":"` + sum + `","size":1}}}}}}}`,
		"no protocol":  `{"format":1,"plugins":{"a":{"versions":{"1.2.0":{"protocol_versions":[],"kind":"source","platforms":{"linux_amd64":{"url":"a","sha256":"` + sum + `","size":1}}}}}}}`,
		"sha":          `{"format":1,"plugins":{"a":{"versions":{"1.2.0":{"protocol_versions":[1],"kind":"source","platforms":{"linux_amd64":{"url":"a","sha256":"xyz","size":1}}}}}}}`,
		"escape":       `{"format":1,"plugins":{"a":{"versions":{"1.2.0":{"protocol_versions":[1],"kind":"source","platforms":{"linux_amd64":{"url":"../../etc/passwd","sha256":"` + sum + `","size":1}}}}}}}`,
		"platform":     `{"format":1,"plugins":{"a":{"versions":{"1.2.0":{"protocol_versions":[1],"kind":"source","platforms":{"linux":{"url":"a","sha256":"` + sum + `","size":1}}}}}}}`,
		"scheme":       `{"format":1,"plugins":{"a":{"versions":{"1.2.0":{"protocol_versions":[1],"kind":"source","platforms":{"linux_amd64":{"url":"ftp://x/a","sha256":"` + sum + `","size":1}}}}}}}`,
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseIndex([]byte(doc)); !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseIndex accepted or misclassified: %v", err)
			}
		})
	}
	ok := `{"format":1,"plugins":{"a":{"versions":{"1.2.0":{"protocol_versions":[1],"kind":"source","platforms":{"linux_amd64":{"url":"https://cdn.example/a","sha256":"` + sum + `","size":1}}}}}}}`
	if _, err := ParseIndex([]byte(ok)); err != nil {
		t.Fatalf("valid index rejected: %v", err)
	}
}

package registry

import (
	"slices"
	"strings"
	"testing"
)

// Sources asks the config's registries first, then the trusted ones, then the project's; a URL that appears
// twice is asked once, at its first place, with the keys of both.
func TestSources(t *testing.T) {
	home := t.TempDir()
	a, b := newFixture(t), newFixture(t)
	if _, err := Trust(home, "https://trusted.example/reg", a.pub); err != nil {
		t.Fatal(err)
	}
	if _, err := Trust(home, "https://both.example/reg", a.pub); err != nil {
		t.Fatal(err)
	}
	got, err := Sources(home, []Registry{{URL: "https://both.example/reg/", Keys: []PublicKey{b.pub}}, {URL: "https://config.example/reg"}})
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, r := range got {
		urls = append(urls, r.URL)
	}
	want := []string{"https://both.example/reg", "https://config.example/reg", "https://trusted.example/reg", DefaultRegistryURL}
	if len(urls) != len(want) {
		t.Fatalf("sources %v, want %v", urls, want)
	}
	for i := range want {
		if urls[i] != want[i] {
			t.Fatalf("sources %v, want %v", urls, want)
		}
	}
	if len(got[0].Keys) != 2 {
		t.Errorf("a registry both in the config and trusted has %d keys, want both", len(got[0].Keys))
	}
	if !got[3].Fallback {
		t.Errorf("the project's registry is not marked as the fallback")
	}
}

// Pick: without --registry the Sources order; with it, those URLs alone, trusted with --key's files or the
// keys the trust store knows for them. Every mistake names the flag.
func TestPick(t *testing.T) {
	home := t.TempDir()
	pub, _, id, err := Keygen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	trusted := newFixture(t)
	if _, err := Trust(home, "https://trusted.example/reg", trusted.pub); err != nil {
		t.Fatal(err)
	}
	config := []Registry{{URL: "https://config.example/reg", Keys: []PublicKey{trusted.pub}}}
	tests := []struct {
		name       string
		urls, keys []string
		want       []string // URL and key id of each registry
		wantErr    string
	}{
		{name: "configured order", want: []string{"https://config.example/reg " + trusted.pub.ID(), "https://trusted.example/reg " + trusted.pub.ID(), DefaultRegistryURL}},
		{name: "url with key file", urls: []string{"https://other.example/reg/"}, keys: []string{pub}, want: []string{"https://other.example/reg " + id}},
		{name: "trusted url without key", urls: []string{"https://trusted.example/reg"}, want: []string{"https://trusted.example/reg " + trusted.pub.ID()}},
		{name: "untrusted url without key", urls: []string{"https://other.example/reg"}, wantErr: "--registry https://other.example/reg: no trusted key for it"},
		{name: "key without url", keys: []string{pub}, wantErr: "--key applies to --registry URLs"},
		{name: "missing key file", urls: []string{"https://other.example/reg"}, keys: []string{"/nonexistent.pub"}, wantErr: "--key: "},
	}
	for _, tt := range tests {
		regs, err := Pick(home, config, tt.urls, tt.keys)
		if tt.wantErr != "" {
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Errorf("%s: %v; want %q", tt.name, err, tt.wantErr)
			}
			continue
		}
		var got []string
		for _, r := range regs {
			if r.Fallback { // the project's registry, with the project's keys
				r.Keys = nil
			}
			got = append(got, strings.TrimSpace(r.URL+" "+strings.Join(r.KeyIDs(), " ")))
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

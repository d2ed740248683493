package registry

import "testing"

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

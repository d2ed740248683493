package registry

import (
	"crypto/ed25519"
	"strings"
	"testing"
)

// Choose: the --registry URLs replace the known registries, trusted with --key or with their known keys.
func TestChoose(t *testing.T) {
	k1, _, _ := ed25519.GenerateKey(nil)
	k2, _, _ := ed25519.GenerateKey(nil)
	known := []Registry{{URL: "https://a.example/reg", Keys: []PublicKey{PublicKey(k1)}}}
	for _, tc := range []struct {
		name    string
		urls    []string
		keys    []PublicKey
		want    []string // URLs chosen
		wantKey PublicKey
		err     string
	}{
		{"none given", nil, nil, []string{"https://a.example/reg"}, PublicKey(k1), ""},
		{"known key", []string{"https://a.example/reg"}, nil, []string{"https://a.example/reg"}, PublicKey(k1), ""},
		{"given key", []string{"https://b.example/reg"}, []PublicKey{PublicKey(k2)}, []string{"https://b.example/reg"}, PublicKey(k2), ""},
		{"no key", []string{"https://b.example/reg"}, nil, nil, nil, "--registry https://b.example/reg: no trusted key for it"},
		{"key alone", nil, []PublicKey{PublicKey(k2)}, nil, nil, "--key applies to --registry URLs"},
		{"bad url", []string{"ftp://x"}, []PublicKey{PublicKey(k2)}, nil, nil, "--registry: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			regs, err := Choose(known, tc.urls, tc.keys)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || len(regs) != len(tc.want) {
				t.Fatalf("Choose: %v, %+v", err, regs)
			}
			for i, r := range regs {
				if r.URL != tc.want[i] || len(r.Keys) != 1 || !ed25519.PublicKey(r.Keys[0]).Equal(ed25519.PublicKey(tc.wantKey)) {
					t.Fatalf("registry %d: %+v, want %s with the expected key", i, r, tc.want[i])
				}
			}
		})
	}
}

// Listed marks only the pinned version; WriteText shows it as yes.
func TestLockListed(t *testing.T) {
	lock := &Lock{Plugins: map[string]LockedPlugin{"pg": {Version: "1.0.0"}}}
	rows := lock.Listed([]Installed{{Name: "pg", Version: "1.0.0", SHA256: "aa", Path: "/p1"}, {Name: "pg", Version: "0.9.0", SHA256: "bb", Path: "/p0"}})
	if !rows[0].Locked || rows[1].Locked {
		t.Fatalf("locked flags: %+v", rows)
	}
	var b strings.Builder
	if err := rows.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := "NAME  VERSION  LOCKED  SHA256  PATH\npg    1.0.0    yes     aa      /p1\npg    0.9.0    -       bb      /p0\n"
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

// Info lists versions newest first, with their platforms and yank reason.
func TestSignedIndexInfo(t *testing.T) {
	si := &SignedIndex{Index: &Index{Plugins: map[string]*Plugin{"pg": {Versions: map[string]*Release{
		"1.0.0": {ProtocolVersions: []int{2}, Kind: "source", Yanked: "bad"},
		"1.1.0": {ProtocolVersions: []int{2}, Kind: "source"},
	}}}}, Registry: Registry{URL: "file:///r"}, KeyID: "k"}
	var b strings.Builder
	if err := si.Info("pg").WriteText(&b, []int{2}); err != nil {
		t.Fatal(err)
	}
	want := "pg in file:///r (index signed by key k); this engine speaks protocol [2]\n\n" +
		"VERSION  PROTOCOLS  KIND    PLATFORMS  YANKED\n1.1.0    [2]        source             -\n1.0.0    [2]        source             bad\n"
	if b.String() != want {
		t.Fatalf("got:\n%q\nwant:\n%q", b.String(), want)
	}
}

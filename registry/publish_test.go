package registry

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAddRejects(t *testing.T) {
	f := newFixture(t)
	f.publish("echo", "1.0.0", "source", 1)
	bin := buildPlugin(t, "echo", "1.0.0", "source", 1)
	f.addForeign("echo", "1.0.0", "plan9", "amd64", "source", 1)
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, []byte("other bytes"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cases := []struct {
		name string
		req  AddRequest
		msg  string
	}{
		{"name mismatch", AddRequest{Artifact: bin, Name: "ohce", Version: "1.0.0"}, `reports name "echo"`},
		{"version mismatch", AddRequest{Artifact: bin, Name: "echo", Version: "1.0.1"}, `reports version "1.0.0"`},
		{"protocol flag disagrees", AddRequest{Artifact: bin, Name: "echo", Version: "1.0.0", ProtocolVersions: []int{2}}, "--protocol [2] disagrees"},
		{"kind flag disagrees", AddRequest{Artifact: bin, Name: "echo", Version: "1.0.0", Kind: "destination"}, `--kind "destination" disagrees`},
		{"foreign without flags", AddRequest{Artifact: bin, Name: "echo", Version: "1.0.0", OS: "plan9", Arch: "mips"}, "give --protocol and --kind"},
		{"immutable", AddRequest{Artifact: other, Name: "echo", Version: "1.0.0", OS: "plan9", Arch: "amd64", ProtocolVersions: []int{1}, Kind: "source"}, "immutable"},
		{"kind differs between platforms", AddRequest{Artifact: other, Name: "echo", Version: "1.0.0", OS: "plan9", Arch: "386", ProtocolVersions: []int{1}, Kind: "both"}, "every platform of a version must agree"},
		{"bad name", AddRequest{Artifact: bin, Name: "Echo!", Version: "1.0.0"}, "plugin name"},
		{"bad version", AddRequest{Artifact: bin, Name: "echo", Version: "one"}, "version"},
		{"not a plugin", AddRequest{Artifact: "/bin/true", Name: "echo", Version: "1.0.0"}, "not the plugin info JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Dir = f.dir
			_, err := Add(ctx, tc.req)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want ErrInvalid mentioning %q", err, tc.msg)
			}
		})
	}
	// Re-adding identical bytes is a no-op, not an error.
	if _, err := Add(ctx, AddRequest{Dir: f.dir, Artifact: bin, Name: "echo", Version: "v1.0"}); err != nil {
		t.Fatalf("re-add of identical bytes: %v", err)
	}
}

func TestAddInvalidatesSignature(t *testing.T) {
	f := newFixture(t)
	f.publish("echo", "1.0.0", "source", 1)
	f.sign()
	f.publish("echo", "1.0.1", "source", 1)
	if _, err := os.Stat(filepath.Join(f.dir, SignatureFile)); !os.IsNotExist(err) {
		t.Fatalf("signature survived an index change: %v", err)
	}
	_, err := FetchIndex(context.Background(), f.reg(f.fileURL()), SourceOptions{})
	if !errors.Is(err, ErrSignature) {
		t.Fatalf("fetch of an unsigned index: %v", err)
	}
}

func TestSignKeyRotation(t *testing.T) {
	old := newFixture(t)
	old.publish("echo", "1.0.0", "source", 1)
	newKeys := t.TempDir()
	pubPath, privPath, newID, err := Keygen(newKeys)
	if err != nil {
		t.Fatal(err)
	}
	newPub, err := ReadPublicKeyFile(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Sign(old.dir, old.keyFile); err != nil {
		t.Fatal(err)
	}
	if id, err := Sign(old.dir, privPath); err != nil || id != newID {
		t.Fatalf("sign with new key: %s %v", id, err)
	}
	// Signing again with the same key replaces its line instead of adding one.
	if _, err := Sign(old.dir, privPath); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(old.dir, SignatureFile))
	if n := strings.Count(string(b), signatureTag); n != 2 {
		t.Fatalf("%d signature lines, want 2:\n%s", n, b)
	}
	for _, k := range []PublicKey{old.pub, newPub} {
		si, err := FetchIndex(context.Background(), Registry{URL: old.fileURL(), Keys: []PublicKey{k}}, SourceOptions{})
		if err != nil {
			t.Fatalf("trusting only %s: %v", k.ID(), err)
		}
		if si.KeyID != k.ID() {
			t.Errorf("verified with %s, want %s", si.KeyID, k.ID())
		}
	}
	// The public key file is not a signing key.
	if _, err := Sign(old.dir, pubPath); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "public key") {
		t.Fatalf("sign with a public key: %v", err)
	}
}

func TestYank(t *testing.T) {
	f := newFixture(t)
	f.publish("echo", "1.0.0", "source", 1)
	f.publish("echo", "1.1.0", "source", 1)
	if err := Yank(f.dir, "echo", "1.1.0", ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("yank without reason: %v", err)
	}
	if err := Yank(f.dir, "echo", "9.9.9", "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("yank of a missing version: %v", err)
	}
	if err := Yank(f.dir, "echo", "1.1.0", "drops rows"); err != nil {
		t.Fatal(err)
	}
	f.sign()
	var logs bytes.Buffer
	c, err := New(Options{Home: t.TempDir(), Registries: []Registry{f.reg(f.fileURL())}, Protocols: []int{1},
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Install(testCtx(t), "echo", "", "")
	if err != nil || got.Version != "1.0.0" {
		t.Fatalf("install skipping yanked: %+v %v", got, err)
	}
	if strings.Contains(logs.String(), "yanked") {
		t.Errorf("warned without installing a yanked version: %s", logs.String())
	}
	got, err = c.Install(testCtx(t), "echo", "1.1.0", "")
	if err != nil || got.Version != "1.1.0" {
		t.Fatalf("install pinned yanked: %+v %v", got, err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "drops rows") {
		t.Errorf("no warning for an installed yanked version: %s", logs.String())
	}
}

func TestKeys(t *testing.T) {
	dir := t.TempDir()
	pubPath, privPath, id, err := Keygen(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(privPath)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode %v, %v", st.Mode().Perm(), err)
	}
	pub, err := ReadPublicKeyFile(pubPath)
	if err != nil || pub.ID() != id || len(id) != 16 {
		t.Fatalf("public key %v id %s/%s", err, pub.ID(), id)
	}
	if back, err := ParsePublicKey(pub.String()); err != nil || back.ID() != id {
		t.Fatalf("round trip: %v", err)
	}
	if _, _, _, err := Keygen(dir); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("keygen over existing keys: %v", err)
	}
	for _, bad := range []string{
		"",
		"skippr-ed25519-public",
		"skippr-ed25519-public !!!",
		"skippr-ed25519-public AAAA",
		"skippr-ed25519-private " + strings.Repeat("A", 44),
		pub.String() + "\n" + pub.String(),
	} {
		if _, err := ParsePublicKey(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParsePublicKey(%q) = %v", bad, err)
		}
	}
	if d := DefaultRegistry(); d.URL != DefaultRegistryURL || len(d.Keys) != 1 || d.Keys[0].ID() != "1fd13fda2490e24a" {
		t.Fatalf("default registry %+v", d)
	}
}

func TestTrustStore(t *testing.T) {
	home := t.TempDir()
	a, b := newFixture(t), newFixture(t)
	if regs, err := ReadTrustStore(home); err != nil || len(regs) != 0 {
		t.Fatalf("empty store: %v %v", regs, err)
	}
	if _, err := Trust(home, "https://Example.com/reg/", a.pub); err != nil {
		t.Fatal(err)
	}
	if _, err := Trust(home, "file://"+a.dir, a.pub); err != nil {
		t.Fatal(err)
	}
	r, err := Trust(home, "https://example.com/reg", b.pub, a.pub)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Keys) != 2 {
		t.Fatalf("merged entry %+v", r)
	}
	regs, err := ReadTrustStore(home)
	if err != nil {
		t.Fatal(err)
	}
	if len(regs) != 2 || regs[0].URL != "https://example.com/reg" || len(regs[0].Keys) != 2 || regs[1].URL != "file://"+a.dir {
		t.Fatalf("store %+v", regs)
	}
	if _, err := Trust(home, "ftp://x", a.pub); !errors.Is(err, ErrInvalid) {
		t.Fatalf("trust ftp: %v", err)
	}
	if _, err := Trust(home, "https://x"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("trust without key: %v", err)
	}
}

func TestNormalizeURL(t *testing.T) {
	cases := []struct{ in, want string }{
		{"file:///srv/reg/", "file:///srv/reg"},
		{"/srv/reg", "file:///srv/reg"},
		{"file://localhost/srv/reg", "file:///srv/reg"},
		{"HTTPS://Plugins.Example.COM/v1/", "https://plugins.example.com/v1"},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"s3://bucket/prefix/?region=eu-west-1", "s3://bucket/prefix?region=eu-west-1"},
		{"file://relative/dir", ""},
		{"ftp://host/x", ""},
		{"https:///nohost", ""},
		{"relative/dir", ""},
	}
	for _, tc := range cases {
		got, err := NormalizeURL(tc.in)
		if tc.want == "" {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("NormalizeURL(%q) = %q, %v; want ErrInvalid", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("NormalizeURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := NewSource("s3://bucket/p?regoin=x", SourceOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("s3 URL with a typo'd parameter: %v", err)
	}
}

func TestListAndRemove(t *testing.T) {
	f := newFixture(t)
	f.publish("echo", "1.0.0", "source", 1)
	f.publish("echo", "1.10.0", "source", 1)
	f.publish("zeta", "0.1.0", "destination", 1)
	f.sign()
	home := t.TempDir()
	c := newClient(t, home, nil, f.reg(f.fileURL()))
	for _, v := range []string{"echo@1.0.0", "echo@1.10.0", "zeta@"} {
		name, con, _ := strings.Cut(v, "@")
		if _, err := c.Install(testCtx(t), name, con, ""); err != nil {
			t.Fatal(err)
		}
	}
	list, err := ListInstalled(home)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range list {
		if err := VerifyFile(p.Path, p.SHA256); err != nil {
			t.Error(err)
		}
		got = append(got, p.Name+" "+p.Version)
	}
	if strings.Join(got, ",") != "echo 1.10.0,echo 1.0.0,zeta 0.1.0" {
		t.Fatalf("listed %v", got)
	}
	if rm, err := Remove(testCtx(t), home, "echo", "1.0"); err != nil || len(rm) != 1 || rm[0] != "1.0.0" {
		t.Fatalf("remove echo 1.0: %v %v", rm, err)
	}
	if _, err := Remove(testCtx(t), home, "echo", "1.0.0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("remove twice: %v", err)
	}
	if rm, err := Remove(testCtx(t), home, "zeta", ""); err != nil || len(rm) != 1 {
		t.Fatalf("remove zeta: %v %v", rm, err)
	}
	want := []string{".lock", "echo", "echo/1.10.0", "echo/1.10.0/skippr-plugin-echo"}
	if got := pluginsEntries(t, home); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("plugins/ holds %v, want %v", got, want)
	}
}

func TestVerifyFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, []byte("hello"), 0o755); err != nil {
		t.Fatal(err)
	}
	const helloSHA = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
	if err := VerifyFile(p, helloSHA); err != nil {
		t.Fatal(err)
	}
	if err := VerifyFile(p, strings.ToUpper(helloSHA)); err != nil {
		t.Fatalf("uppercase hex: %v", err)
	}
	for _, want := range []string{"", "abc", strings.Repeat("0", 64)} {
		if err := VerifyFile(p, want); !errors.Is(err, ErrChecksum) {
			t.Errorf("VerifyFile(%q) = %v", want, err)
		}
	}
}

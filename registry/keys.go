package registry

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Key file tags: the first word of the one non-comment line of a key file.
const (
	publicKeyTag  = "skippr-ed25519-public"
	privateKeyTag = "skippr-ed25519-private"
	signatureTag  = "skippr-ed25519-signature"
)

// File names Keygen writes.
const (
	PublicKeyFile  = "skippr-ed25519.pub"
	PrivateKeyFile = "skippr-ed25519.key"
)

// DefaultRegistryURL is the project's own registry.
const DefaultRegistryURL = "https://plugins.skippr.dev/v1"

// BuiltinPublicKey verifies the index of DefaultRegistryURL (key id
// 1fd13fda2490e24a). The private half
// is held by the release process only (never in this repository); rotating it
// means shipping a skippr release that lists the new key here while the
// registry's index.json.sig carries signatures by both keys.
const BuiltinPublicKey = "skippr-ed25519-public kRksXWdZvlhWOHHcf76dheTcV9cufCrkIqtw9bV7Q1E="

// DefaultRegistry is the project's registry with its built-in key.
func DefaultRegistry() Registry {
	k, err := ParsePublicKey(BuiltinPublicKey)
	if err != nil {
		panic("registry: BuiltinPublicKey is malformed: " + err.Error())
	}
	return Registry{URL: DefaultRegistryURL, Keys: []PublicKey{k}, Fallback: true}
}

// PublicKey is an ed25519 public key that may sign registry indexes. Its text
// form is "skippr-ed25519-public <base64 of the 32 key bytes>".
type PublicKey ed25519.PublicKey

// ID is the key id: the first 16 hex digits of sha256 of the 32 key bytes.
// Signature lines name it so a verifier picks the right trusted key.
func (k PublicKey) ID() string { return keyID(ed25519.PublicKey(k)) }

func keyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// String is the key's one-line text form.
func (k PublicKey) String() string {
	return publicKeyTag + " " + base64.StdEncoding.EncodeToString(k)
}

// MarshalText makes a PublicKey appear in JSON (trust.json) in its text form.
func (k PublicKey) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText parses the text form.
func (k *PublicKey) UnmarshalText(b []byte) error {
	p, err := ParsePublicKey(string(b))
	if err != nil {
		return err
	}
	*k = p
	return nil
}

// ParsePublicKey parses "skippr-ed25519-public <base64>" or the content of a
// public key file (comment lines starting with # and blank lines allowed).
func ParsePublicKey(text string) (PublicKey, error) {
	b, err := parseKeyText(text, publicKeyTag, ed25519.PublicKeySize)
	if err != nil {
		return nil, err
	}
	return PublicKey(b), nil
}

// ReadPublicKeyFile reads a public key file.
func ReadPublicKeyFile(path string) (PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read public key: %w", err)
	}
	k, err := ParsePublicKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("public key file %s: %w", path, err)
	}
	return k, nil
}

// readPrivateKeyFile reads a private key file: "skippr-ed25519-private
// <base64 of the 32-byte seed>".
func readPrivateKeyFile(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read private key: %w", err)
	}
	seed, err := parseKeyText(string(b), privateKeyTag, ed25519.SeedSize)
	if err != nil {
		if strings.Contains(string(b), publicKeyTag) {
			return nil, fmt.Errorf("private key file %s: %w: this is a public key; sign with the .key file", path, ErrInvalid)
		}
		return nil, fmt.Errorf("private key file %s: %w", path, err)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

func parseKeyText(text, tag string, size int) ([]byte, error) {
	var found []string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		found = append(found, line)
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%w: want exactly one line %q, found %d key lines", ErrInvalid, tag+" <base64>", len(found))
	}
	f := strings.Fields(found[0])
	if len(f) != 2 || f[0] != tag {
		return nil, fmt.Errorf("%w: want %q, got %q", ErrInvalid, tag+" <base64>", truncate(found[0], 60))
	}
	b, err := base64.StdEncoding.DecodeString(f[1])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: bad base64: %v", ErrInvalid, tag, err)
	}
	if len(b) != size {
		return nil, fmt.Errorf("%w: %s: %d bytes, want %d", ErrInvalid, tag, len(b), size)
	}
	return b, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Keygen creates a new signing key pair in dir: PrivateKeyFile (mode 0600,
// keep it secret) and PublicKeyFile (publish it; users pass it to
// `skippr registry trust`). It refuses to overwrite existing key files.
func Keygen(dir string) (pubPath, privPath, id string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", "", fmt.Errorf("generate key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", "", fmt.Errorf("keygen: %w", err)
	}
	id = keyID(pub)
	pubPath = filepath.Join(dir, PublicKeyFile)
	privPath = filepath.Join(dir, PrivateKeyFile)
	for _, p := range []string{pubPath, privPath} {
		if _, err := os.Lstat(p); err == nil {
			return "", "", "", fmt.Errorf("keygen: %s already exists; refusing to overwrite a key", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", "", "", fmt.Errorf("keygen: %w", err)
		}
	}
	stamp := time.Now().UTC().Format(time.RFC3339)
	var pb, sb bytes.Buffer
	fmt.Fprintf(&pb, "# skippr registry public key, id %s, created %s\n%s\n", id, stamp, PublicKey(pub).String())
	fmt.Fprintf(&sb, "# skippr registry PRIVATE signing key, id %s, created %s. Keep secret.\n%s %s\n",
		id, stamp, privateKeyTag, base64.StdEncoding.EncodeToString(priv.Seed()))
	if err := writeFileAtomic(privPath, sb.Bytes(), 0o600); err != nil {
		return "", "", "", fmt.Errorf("keygen: %w", err)
	}
	if err := writeFileAtomic(pubPath, pb.Bytes(), 0o644); err != nil {
		return "", "", "", fmt.Errorf("keygen: %w", err)
	}
	return pubPath, privPath, id, nil
}

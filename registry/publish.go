package registry

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Names of the registry's own files inside a registry folder.
const (
	IndexFile     = "index.json"
	SignatureFile = "index.json.sig"
)

// PluginInfo is what a plugin binary prints for --skippr-plugin-info.
type PluginInfo struct {
	Name             string `json:"name"`
	Version          string `json:"version"`
	Kind             string `json:"kind"`
	ProtocolVersions []int  `json:"protocol_versions"`
}

// ReadPluginInfo runs `binary --skippr-plugin-info` and parses its output.
func ReadPluginInfo(ctx context.Context, binary string) (PluginInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, "--skippr-plugin-info")
	cmd.Stdout = &limitedBuffer{b: &stdout, n: 1 << 20}
	cmd.Stderr = &limitedBuffer{b: &stderr, n: 4 << 10}
	if err := cmd.Run(); err != nil {
		return PluginInfo{}, fmt.Errorf("run %s --skippr-plugin-info: %w (stderr: %q)", binary, err, strings.TrimSpace(stderr.String()))
	}
	var info PluginInfo
	dec := json.NewDecoder(&stdout)
	if err := dec.Decode(&info); err != nil {
		return PluginInfo{}, fmt.Errorf("%s --skippr-plugin-info: %w: output is not the plugin info JSON: %v", binary, ErrInvalid, err)
	}
	return info, nil
}

// limitedBuffer keeps the first n bytes and discards the rest, so a
// misbehaving binary cannot exhaust memory.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// AddRequest describes one binary to publish.
type AddRequest struct {
	Dir      string // registry folder
	Artifact string // the plugin binary
	Name     string
	Version  string
	OS, Arch string // target platform; "" means the host's
	// ProtocolVersions and Kind are read from the binary when it runs on this
	// host; for another platform's binary they are required. When given for a
	// host binary they must agree with what it reports.
	ProtocolVersions []int
	Kind             string
}

// Add copies a plugin binary into the registry folder at
// <name>/<version>/<os>_<arch>/skippr-plugin-<name>, records its size and
// sha256 in index.json and deletes index.json.sig (the index changed, so the
// old signature no longer holds; run Sign). Published bytes are immutable:
// adding different bytes for an existing version and platform is an error.
func Add(ctx context.Context, req AddRequest) (Artifact, error) {
	if err := ValidateName(req.Name); err != nil {
		return Artifact{}, err
	}
	ver, err := CanonicalVersion(req.Version)
	if err != nil {
		return Artifact{}, err
	}
	plat := Platform{OS: req.OS, Arch: req.Arch}
	host := HostPlatform()
	if plat.OS == "" {
		plat.OS = host.OS
	}
	if plat.Arch == "" {
		plat.Arch = host.Arch
	}
	if _, err := ParsePlatform(plat.String()); err != nil {
		return Artifact{}, err
	}
	protos, kind, err := artifactMeta(ctx, req, ver, plat == host)
	if err != nil {
		return Artifact{}, err
	}

	ix, err := readIndexFile(req.Dir)
	if err != nil {
		return Artifact{}, err
	}
	sum, size, err := hashAndSize(req.Artifact)
	if err != nil {
		return Artifact{}, err
	}
	rel := strings.Join([]string{req.Name, ver, plat.String(), BinaryName(req.Name)}, "/")
	art := Artifact{URL: rel, SHA256: sum, Size: size}

	p := ix.Plugins[req.Name]
	if p == nil {
		p = &Plugin{Versions: map[string]*Release{}}
		ix.Plugins[req.Name] = p
	}
	r := p.Versions[ver]
	if r == nil {
		r = &Release{ProtocolVersions: protos, Kind: kind, Platforms: map[string]Artifact{}}
		p.Versions[ver] = r
	}
	if !sameInts(r.ProtocolVersions, protos) || r.Kind != kind {
		return Artifact{}, fmt.Errorf("add %s %s %s: %w: the index records protocol_versions %v and kind %q for this version, this binary has %v and %q; every platform of a version must agree",
			req.Name, ver, plat, ErrInvalid, r.ProtocolVersions, r.Kind, protos, kind)
	}
	if old, ok := r.Platforms[plat.String()]; ok && old.SHA256 != sum {
		return Artifact{}, fmt.Errorf("add %s %s %s: %w: already published with sha256 %s; published versions are immutable — yank it and publish a new version",
			req.Name, ver, plat, ErrInvalid, old.SHA256)
	}
	r.Platforms[plat.String()] = art

	dest := filepath.Join(req.Dir, filepath.FromSlash(rel))
	if err := copyFileAtomic(req.Artifact, dest, sum); err != nil {
		return Artifact{}, fmt.Errorf("add %s %s %s: %w", req.Name, ver, plat, err)
	}
	if err := writeIndexFile(req.Dir, ix); err != nil {
		return Artifact{}, err
	}
	return art, nil
}

func artifactMeta(ctx context.Context, req AddRequest, ver string, native bool) ([]int, string, error) {
	if req.Kind != "" && !slices.Contains(kinds, req.Kind) {
		return nil, "", fmt.Errorf("%w: kind %q, want one of %s", ErrInvalid, req.Kind, strings.Join(kinds, ", "))
	}
	for _, p := range req.ProtocolVersions {
		if p < 1 {
			return nil, "", fmt.Errorf("%w: protocol version %d is not positive", ErrInvalid, p)
		}
	}
	if !native {
		if len(req.ProtocolVersions) == 0 || req.Kind == "" {
			return nil, "", fmt.Errorf("%w: %s is built for %s_%s and cannot run on this %s host to report its info: give --protocol and --kind",
				ErrInvalid, req.Artifact, req.OS, req.Arch, HostPlatform())
		}
		return sortedInts(req.ProtocolVersions), req.Kind, nil
	}
	info, err := ReadPluginInfo(ctx, req.Artifact)
	if err != nil {
		return nil, "", err
	}
	if info.Name != req.Name {
		return nil, "", fmt.Errorf("%w: %s reports name %q, not %q", ErrInvalid, req.Artifact, info.Name, req.Name)
	}
	if iv, err := CanonicalVersion(info.Version); err != nil || iv != ver {
		return nil, "", fmt.Errorf("%w: %s reports version %q, not %q", ErrInvalid, req.Artifact, info.Version, ver)
	}
	if !slices.Contains(kinds, info.Kind) {
		return nil, "", fmt.Errorf("%w: %s reports kind %q, want one of %s", ErrInvalid, req.Artifact, info.Kind, strings.Join(kinds, ", "))
	}
	if len(info.ProtocolVersions) == 0 || slices.ContainsFunc(info.ProtocolVersions, func(p int) bool { return p < 1 }) {
		return nil, "", fmt.Errorf("%w: %s reports protocol_versions %v", ErrInvalid, req.Artifact, info.ProtocolVersions)
	}
	if len(req.ProtocolVersions) > 0 && !sameInts(req.ProtocolVersions, info.ProtocolVersions) {
		return nil, "", fmt.Errorf("%w: --protocol %v disagrees with %s, which reports %v", ErrInvalid, req.ProtocolVersions, req.Artifact, info.ProtocolVersions)
	}
	if req.Kind != "" && req.Kind != info.Kind {
		return nil, "", fmt.Errorf("%w: --kind %q disagrees with %s, which reports %q", ErrInvalid, req.Kind, req.Artifact, info.Kind)
	}
	return sortedInts(info.ProtocolVersions), info.Kind, nil
}

func sortedInts(a []int) []int {
	b := slices.Clone(a)
	slices.Sort(b)
	return slices.Compact(b)
}

func sameInts(a, b []int) bool { return slices.Equal(sortedInts(a), sortedInts(b)) }

func hashAndSize(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("artifact: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("artifact %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// copyFileAtomic copies src to dst (mode 0755) through a temp file and checks
// the copy hashes to wantSHA (src could change while we copy).
func copyFileAtomic(src, dst, wantSHA string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	f, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(f, h), in); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != wantSHA {
		return fmt.Errorf("copy %s: %w: file changed while being published", src, ErrChecksum)
	}
	if err := f.Chmod(0o755); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	ok = true
	return syncDir(filepath.Dir(dst))
}

// readIndexFile reads DIR/index.json; a missing file is an empty index.
func readIndexFile(dir string) (*Index, error) {
	b, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if errors.Is(err, fs.ErrNotExist) {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("registry folder: %w", err)
			}
		}
		return &Index{Format: IndexFormat, Plugins: map[string]*Plugin{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	ix, err := ParseIndex(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if ix.Plugins == nil {
		ix.Plugins = map[string]*Plugin{}
	}
	return ix, nil
}

// writeIndexFile writes DIR/index.json and removes the now stale signature.
func writeIndexFile(dir string, ix *Index) error {
	b, err := marshalIndex(ix)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, IndexFile), b, 0o644); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dir, SignatureFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale signature: %w", err)
	}
	return syncDir(dir)
}

// Sign signs DIR/index.json with the private key in keyFile and writes
// DIR/index.json.sig. Signature lines by other keys are kept (Add and Yank
// delete the file whenever the index changes, so lines still present were
// made over these bytes): that is how a registry rotates keys — sign with the
// old and the new key until every user trusts the new one. It returns the key id.
func Sign(dir, keyFile string) (string, error) {
	priv, err := readPrivateKeyFile(keyFile)
	if err != nil {
		return "", err
	}
	raw, err := os.ReadFile(filepath.Join(dir, IndexFile))
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	if _, err := ParseIndex(raw); err != nil {
		return "", fmt.Errorf("sign %s: refusing to sign an invalid index: %w", dir, err)
	}
	id := keyID(priv.Public().(ed25519.PublicKey))
	var sigs []signature
	if old, err := os.ReadFile(filepath.Join(dir, SignatureFile)); err == nil {
		if parsed, err := parseSignatures(old); err == nil {
			for _, s := range parsed {
				if s.KeyID != id {
					sigs = append(sigs, s)
				}
			}
		}
	}
	sigs = append(sigs, signature{KeyID: id, Sig: ed25519.Sign(priv, raw)})
	if err := writeFileAtomic(filepath.Join(dir, SignatureFile), formatSignatures(sigs), 0o644); err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	return id, nil
}

// Yank marks a published version as withdrawn with a reason. Resolve skips it
// unless a constraint pins it exactly; lock files that pin it still install
// it (with a warning). The binaries stay. The signature is removed: run Sign.
func Yank(dir, name, ver, reason string) error {
	if strings.TrimSpace(reason) == "" {
		return fmt.Errorf("yank %s %s: %w: a reason is required (users see it)", name, ver, ErrInvalid)
	}
	if err := ValidateName(name); err != nil {
		return err
	}
	cv, err := CanonicalVersion(ver)
	if err != nil {
		return err
	}
	ix, err := readIndexFile(dir)
	if err != nil {
		return err
	}
	p := ix.Plugins[name]
	if p == nil || p.Versions[cv] == nil {
		return fmt.Errorf("yank: %w: %s %s is not in %s", ErrNotFound, name, cv, filepath.Join(dir, IndexFile))
	}
	p.Versions[cv].Yanked = strings.TrimSpace(reason)
	return writeIndexFile(dir, ix)
}

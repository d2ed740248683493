package registry

import (
	"bufio"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
)

// signature is one line of index.json.sig.
type signature struct {
	KeyID string
	Sig   []byte
}

// parseSignatures parses index.json.sig: one line per signer,
// "skippr-ed25519-signature <key id> <base64 signature>"; # comments allowed.
func parseSignatures(data []byte) ([]signature, error) {
	var out []signature
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != signatureTag {
			return nil, fmt.Errorf("%w: index.json.sig line %d: want %q", ErrSignature, n, signatureTag+" <key id> <base64>")
		}
		sig, err := base64.StdEncoding.DecodeString(f[2])
		if err != nil || len(sig) != ed25519.SignatureSize {
			return nil, fmt.Errorf("%w: index.json.sig line %d: signature is not %d bytes of base64", ErrSignature, n, ed25519.SignatureSize)
		}
		out = append(out, signature{KeyID: f[1], Sig: sig})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: index.json.sig holds no signature", ErrSignature)
	}
	return out, nil
}

func formatSignatures(sigs []signature) []byte {
	var b strings.Builder
	for _, s := range sigs {
		fmt.Fprintf(&b, "%s %s %s\n", signatureTag, s.KeyID, base64.StdEncoding.EncodeToString(s.Sig))
	}
	return []byte(b.String())
}

// verifyIndexSignature checks that at least one signature line was made over
// index by one of the trusted keys. It returns the id of the key that verified.
// Errors name the registry and both the signing and the trusted key ids so the
// user can tell "wrong key trusted" from "index modified after signing".
func verifyIndexSignature(regURL string, index, sigFile []byte, trusted []PublicKey) (string, error) {
	if len(trusted) == 0 {
		return "", fmt.Errorf("registry %s: %w: no trusted public key; run `skippr registry trust %s --key PUBFILE`", regURL, ErrSignature, regURL)
	}
	sigs, err := parseSignatures(sigFile)
	if err != nil {
		return "", fmt.Errorf("registry %s: %w", regURL, err)
	}
	var signers, trustedIDs, badWithTrusted []string
	for _, k := range trusted {
		trustedIDs = append(trustedIDs, k.ID())
	}
	for _, s := range sigs {
		signers = append(signers, s.KeyID)
		for _, k := range trusted {
			if k.ID() != s.KeyID {
				continue
			}
			if ed25519.Verify(ed25519.PublicKey(k), index, s.Sig) {
				return k.ID(), nil
			}
			badWithTrusted = append(badWithTrusted, s.KeyID)
		}
	}
	if len(badWithTrusted) > 0 {
		return "", fmt.Errorf("registry %s: %w: index.json does not match its signature by trusted key %s (index modified after signing, or signature corrupt)",
			regURL, ErrSignature, strings.Join(slices.Compact(badWithTrusted), ", "))
	}
	return "", fmt.Errorf("registry %s: %w: index.json is signed by key %s, but the trusted keys for this registry are %s",
		regURL, ErrSignature, strings.Join(signers, ", "), strings.Join(trustedIDs, ", "))
}

package testutil

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hecsys/hec/images"
	"github.com/hecsys/hec/shared/bundle"
)

// SpoiledBundle is a bad agent bundle and what an agent's refusal of it
// says.
type SpoiledBundle struct {
	Name, Dir, Refusal string
}

// SpoiledBundles makes, from the agent bundle good (signed with the key in
// file key, of a version above floor), the bundles an agent trusting key
// with floor as its anti-rollback floor and limit (its
// --update-max-bundle; limitText spells it as the agent's refusal does, ""
// when the room on its disk may be the smaller bound) must refuse: a
// part tampered with, the manifest tampered with, signed by otherKey,
// built for the other architecture, older than the floor, holding a file
// the manifest does not name, and larger than the limit.
func SpoiledBundles(tb testing.TB, good, key, otherKey, floor string, limit int64, limitText string) []SpoiledBundle {
	tb.Helper()
	priv := PrivateKey(tb, key)
	m, err := bundle.Verify(good, priv.Public().(ed25519.PublicKey))
	if err != nil {
		tb.Fatal(err)
	}
	agent := filepath.Join(good, bundle.AgentPart)
	resign := func(key, version string) string {
		out := filepath.Join(tb.TempDir(), "bundle")
		if _, err := images.BuildAgent(images.AgentOptions{Agent: agent, Out: out, KeyPath: key, Version: version}); err != nil {
			tb.Fatal(err)
		}
		return out
	}
	var out []SpoiledBundle
	add := func(name, refusal string, spoil func(dir string) error) {
		dir := CopyDir(tb, good)
		if err := spoil(dir); err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		out = append(out, SpoiledBundle{Name: name, Dir: dir, Refusal: refusal})
	}
	add("a part tampered with", "does not match the manifest", func(d string) error {
		b, err := os.ReadFile(filepath.Join(d, bundle.AgentPart))
		if err != nil {
			return err
		}
		b[len(b)/2] ^= 1
		return os.WriteFile(filepath.Join(d, bundle.AgentPart), b, 0o644)
	})
	add("the manifest tampered with", "signature does not verify", func(d string) error {
		b, err := os.ReadFile(filepath.Join(d, bundle.ManifestFile))
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(d, bundle.ManifestFile), bytes.Replace(b, []byte(m.Version), []byte(m.Version+"1"), 1), 0o644)
	})
	out = append(out, SpoiledBundle{Name: "signed by another key", Dir: resign(otherKey, m.Version), Refusal: "signature does not verify"})
	add("built for the other architecture", "is built for", func(d string) error {
		other := m
		other.Arch = map[string]string{"amd64": "arm64", "arm64": "amd64"}[m.Arch]
		return bundle.Sign(d, other, priv)
	})
	out = append(out, SpoiledBundle{Name: "older than the floor", Dir: resign(key, "v0.0.1"), Refusal: "is not newer than " + floor})
	add("holding a file the manifest does not name", "not named by the manifest", func(d string) error {
		return os.WriteFile(filepath.Join(d, "extra"), []byte("unsigned"), 0o755)
	})
	add("larger than the limit", "larger than "+limitText, func(d string) error {
		if err := os.WriteFile(filepath.Join(d, "padding"), nil, 0o644); err != nil {
			return err
		}
		return os.Truncate(filepath.Join(d, "padding"), limit+10<<20)
	})
	return out
}

// CopyDir copies the plain files of directory src into a new temporary
// directory, for a test to spoil the copy.
func CopyDir(tb testing.TB, src string) string {
	tb.Helper()
	dst := tb.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return dst
}

// NewKey writes a new signing key into a temporary file and returns the
// file's path.
func NewKey(tb testing.TB) string {
	tb.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(tb.TempDir(), "signing.key")
	if err := os.WriteFile(path, []byte(hex.EncodeToString(priv.Seed())+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// PrivateKey reads a signing key (hecctl keys gen, mkimage --key).
func PrivateKey(tb testing.TB, path string) ed25519.PrivateKey {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	k, err := bundle.ParsePrivateKey(b)
	if err != nil {
		tb.Fatal(fmt.Errorf("%s: %w", path, err))
	}
	return k
}

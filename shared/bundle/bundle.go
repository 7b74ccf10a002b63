package bundle

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// File names of a bundle besides its parts.
const (
	ManifestFile  = "manifest.json"
	SignatureFile = "manifest.sig"
	PublicKeyFile = "manifest.pub" // the signer's key, for a first look only: never trusted by Verify
)

// TrustedKeyPath is where an image carries (relative to its root) the
// public key, in hex, its loader trusts for agent bundles until a
// committed bundle rotates it.
const TrustedKeyPath = "etc/hec/trusted.pub"

// AgentPart is the part that makes a bundle an agent bundle: the hecd
// binary a loader runs.
const AgentPart = "hecd"

// Errors of Verify, checked with errors.Is.
var (
	ErrSignature = errors.New("bundle: the manifest's signature does not verify with the trusted key")
	ErrPart      = errors.New("bundle: a part does not match the manifest")
	ErrMalformed = errors.New("bundle: malformed")
)

// Manifest describes a bundle; its signature covers its exact bytes.
type Manifest struct {
	Version string `json:"version"`
	Target  string `json:"target"`
	// Arch is the GOARCH the bundle's code runs on (amd64, arm64).
	Arch          string          `json:"arch,omitempty"`
	KernelPackage string          `json:"kernel_package,omitempty"`
	KernelVersion string          `json:"kernel_version,omitempty"`
	KernelRelease string          `json:"kernel_release,omitempty"`
	Parts         map[string]Part `json:"parts"`
	Build         BuildInfo       `json:"build"`
	// NextKey, when set, is the public key (hex) that an agent trusts
	// from the moment this bundle is committed: key rotation by a bundle
	// signed with the old key.
	NextKey string `json:"next_key,omitempty"`
}

// Part is one file of the bundle.
type Part struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// BuildInfo records how the bundle was made.
type BuildInfo struct {
	Go       string   `json:"go"`
	Revision string   `json:"revision,omitempty"`
	Modules  []string `json:"modules,omitempty"`
}

// Sign writes m as manifest.json into dir with its signature by key in
// manifest.sig and the signer's public key in manifest.pub.
func Sign(dir string, m Manifest, key ed25519.PrivateKey) error {
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	sig := ed25519.Sign(key, body)
	for name, data := range map[string][]byte{
		ManifestFile:  body,
		SignatureFile: []byte(hex.EncodeToString(sig) + "\n"),
		PublicKeyFile: []byte(hex.EncodeToString(key.Public().(ed25519.PublicKey)) + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Verify checks the bundle in dir: the manifest's signature with pub,
// then each part's size and hash. Only then is the manifest returned.
func Verify(dir string, pub ed25519.PublicKey) (Manifest, error) {
	var m Manifest
	if len(pub) != ed25519.PublicKeySize {
		return m, fmt.Errorf("bundle: no trusted key (want %d bytes, have %d)", ed25519.PublicKeySize, len(pub))
	}
	body, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return m, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	sigHex, err := os.ReadFile(filepath.Join(dir, SignatureFile))
	if err != nil {
		return m, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	sig, err := hex.DecodeString(strings.TrimSpace(string(sigHex)))
	if err != nil || len(sig) != ed25519.SignatureSize {
		return m, fmt.Errorf("%w: %s is not a hex ed25519 signature", ErrSignature, SignatureFile)
	}
	if !ed25519.Verify(pub, body, sig) {
		return m, ErrSignature
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return m, fmt.Errorf("%w: %s: %v", ErrMalformed, ManifestFile, err)
	}
	if len(m.Parts) == 0 {
		return m, fmt.Errorf("%w: the manifest names no parts", ErrMalformed)
	}
	for name, want := range m.Parts {
		if !PlainName(name) {
			return m, fmt.Errorf("%w: part name %q", ErrMalformed, name)
		}
		got, err := HashFile(filepath.Join(dir, name))
		if err != nil {
			return m, fmt.Errorf("%w: %s: %v", ErrPart, name, err)
		}
		if got != want {
			return m, fmt.Errorf("%w: %s (%d bytes, sha256 %.16s; the manifest says %d bytes, %.16s)", ErrPart, name, got.Size, got.SHA256, want.Size, want.SHA256)
		}
	}
	if m.NextKey != "" {
		if k, err := hex.DecodeString(m.NextKey); err != nil || len(k) != ed25519.PublicKeySize {
			return m, fmt.Errorf("%w: next_key is not a hex ed25519 public key", ErrMalformed)
		}
	}
	return m, nil
}

// PlainName reports whether name is a file name a bundle may hold: no
// directory, nothing hidden, nothing that leaves the bundle.
func PlainName(name string) bool {
	return name != "" && len(name) <= 128 && !strings.ContainsAny(name, "/\\\x00") && !strings.HasPrefix(name, ".")
}

// HashFile returns the sha256 and size of the file at path.
func HashFile(path string) (Part, error) {
	f, err := os.Open(path)
	if err != nil {
		return Part{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return Part{SHA256: hex.EncodeToString(h.Sum(nil)), Size: n}, err
}

// ParsePublicKey reads an ed25519 public key written in hex (as
// manifest.pub and `hecctl keys gen` write it).
func ParsePublicKey(text []byte) (ed25519.PublicKey, error) {
	k, err := hex.DecodeString(strings.TrimSpace(string(text)))
	if err != nil || len(k) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("bundle: want a %d-byte ed25519 public key in hex", ed25519.PublicKeySize)
	}
	return k, nil
}

// ParsePrivateKey reads an ed25519 private key written as its seed in hex.
func ParsePrivateKey(text []byte) (ed25519.PrivateKey, error) {
	seed, err := hex.DecodeString(strings.TrimSpace(string(text)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("bundle: want a %d-byte ed25519 seed in hex", ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

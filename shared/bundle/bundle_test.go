package bundle

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func testKey(t testing.TB, b byte) ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	seed[0] = b
	return ed25519.NewKeyFromSeed(seed)
}

// writeBundle writes a signed agent bundle whose part holds data.
func writeBundle(t *testing.T, key ed25519.PrivateKey, data []byte, edit func(*Manifest)) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, AgentPart), data, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := HashFile(filepath.Join(dir, AgentPart))
	if err != nil {
		t.Fatal(err)
	}
	m := Manifest{Version: "v1.2.3", Target: "host", Arch: "arm64", Parts: map[string]Part{AgentPart: p}}
	if edit != nil {
		edit(&m)
	}
	if err := Sign(dir, m, key); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestVerify(t *testing.T) {
	key, other := testKey(t, 1), testKey(t, 2)
	pub := key.Public().(ed25519.PublicKey)
	data := []byte("\x7fELF a small agent")
	dir := writeBundle(t, key, data, nil)
	m, err := Verify(dir, pub)
	if err != nil || m.Version != "v1.2.3" || m.Arch != "arm64" {
		t.Fatalf("good bundle: %+v, %v", m, err)
	}
	if _, err := Verify(dir, other.Public().(ed25519.PublicKey)); !errors.Is(err, ErrSignature) {
		t.Errorf("another key: %v, want ErrSignature", err)
	}
	if _, err := Verify(dir, nil); err == nil {
		t.Error("no trusted key: verified")
	}

	// Every byte of the manifest and of the part flipped, one at a time.
	for _, name := range []string{ManifestFile, AgentPart} {
		path := filepath.Join(dir, name)
		orig, _ := os.ReadFile(path)
		for i := range orig {
			b := append([]byte(nil), orig...)
			b[i] ^= 0x20
			os.WriteFile(path, b, 0o644)
			_, err := Verify(dir, pub)
			want := ErrSignature
			if name == AgentPart {
				want = ErrPart
			}
			if !errors.Is(err, want) {
				t.Fatalf("%s byte %d flipped: %v, want %v", name, i, err, want)
			}
		}
		os.WriteFile(path, orig, 0o644)
	}
	if _, err := Verify(dir, pub); err != nil {
		t.Fatalf("restored: %v", err)
	}

	for _, c := range []struct {
		name string
		edit func(dir string)
		want error
	}{
		{"part truncated", func(d string) { os.Truncate(filepath.Join(d, AgentPart), 3) }, ErrPart},
		{"part missing", func(d string) { os.Remove(filepath.Join(d, AgentPart)) }, ErrPart},
		{"signature missing", func(d string) { os.Remove(filepath.Join(d, SignatureFile)) }, ErrMalformed},
		{"signature not hex", func(d string) { os.WriteFile(filepath.Join(d, SignatureFile), []byte("zz"), 0o644) }, ErrSignature},
		{"manifest truncated", func(d string) {
			b, _ := os.ReadFile(filepath.Join(d, ManifestFile))
			os.WriteFile(filepath.Join(d, ManifestFile), b[:len(b)/2], 0o644)
		}, ErrSignature},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := writeBundle(t, key, data, nil)
			c.edit(d)
			if _, err := Verify(d, pub); !errors.Is(err, c.want) {
				t.Errorf("%v, want %v", err, c.want)
			}
		})
	}

	// Signed, but naming a part outside the bundle.
	d := writeBundle(t, key, data, func(m *Manifest) { m.Parts["../escape"] = Part{} })
	if _, err := Verify(d, pub); !errors.Is(err, ErrMalformed) {
		t.Errorf("part outside the bundle: %v, want ErrMalformed", err)
	}
	d = writeBundle(t, key, data, func(m *Manifest) { m.NextKey = "abcd" })
	if _, err := Verify(d, pub); !errors.Is(err, ErrMalformed) {
		t.Errorf("bad next_key: %v, want ErrMalformed", err)
	}
}

func TestKeys(t *testing.T) {
	if _, err := ParsePublicKey([]byte("00")); err == nil {
		t.Error("short public key parsed")
	}
	if _, err := ParsePrivateKey([]byte("not hex")); err == nil {
		t.Error("non-hex seed parsed")
	}
}

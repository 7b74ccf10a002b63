package bundle

import (
	"archive/tar"
	"bytes"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func tarOf(t testing.TB, entries ...tar.Header) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		h := h
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(make([]byte, h.Size))
		}
	}
	tw.Close()
	return b.Bytes()
}

func TestPackUnpack(t *testing.T) {
	src := writeBundle(t, testKey(t, 1), []byte("an agent"), nil)
	var b bytes.Buffer
	if err := Pack(&b, src); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := Unpack(bytes.NewReader(b.Bytes()), dst, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(dst, testKey(t, 1).Public().(ed25519.PublicKey)); err != nil {
		t.Fatalf("unpacked bundle: %v", err)
	}

	reg := func(name string, size int64) tar.Header {
		return tar.Header{Name: name, Size: size, Mode: 0o644, Typeflag: tar.TypeReg}
	}
	many := make([]tar.Header, maxParts+1)
	for i := range many {
		many[i] = reg(string(rune('a'+i)), 1)
	}
	for _, c := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", tarOf(t), ErrBadUpload},
		{"not a tar", []byte("hello, this is not an archive at all"), ErrBadUpload},
		{"cut short", b.Bytes()[:b.Len()/2], ErrBadUpload},
		{"a path out", tarOf(t, reg("../hecd", 1)), ErrBadUpload},
		{"a directory", tarOf(t, reg("dir/hecd", 1)), ErrBadUpload},
		{"hidden", tarOf(t, reg(".hecd", 1)), ErrBadUpload},
		{"a symlink", tarOf(t, tar.Header{Name: "hecd", Linkname: "/etc/passwd", Typeflag: tar.TypeSymlink}), ErrBadUpload},
		{"twice the same name", tarOf(t, reg("hecd", 1), reg("hecd", 1)), ErrBadUpload},
		{"too many files", tarOf(t, many...), ErrBadUpload},
		{"too large", tarOf(t, reg("hecd", 600), reg("Image", 600)), ErrTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := t.TempDir()
			if err := Unpack(bytes.NewReader(c.data), dst, 1000); !errors.Is(err, c.want) {
				t.Errorf("%v, want %v", err, c.want)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(dst), "hecd")); err == nil {
				t.Error("wrote outside the directory")
			}
		})
	}
}

// FuzzUnpack feeds Unpack arbitrary uploads: it must return, write only
// inside its directory and never more than the limit.
func FuzzUnpack(f *testing.F) {
	f.Add(tarOf(f, tar.Header{Name: "hecd", Size: 3, Mode: 0o644, Typeflag: tar.TypeReg}))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dst := filepath.Join(parent, "in")
		os.Mkdir(dst, 0o700)
		Unpack(bytes.NewReader(data), dst, 4096)
		var total int64
		entries, _ := os.ReadDir(dst)
		for _, e := range entries {
			fi, _ := e.Info()
			total += fi.Size()
		}
		if total > 4096 {
			t.Fatalf("%d bytes written, limit 4096", total)
		}
		if others, _ := os.ReadDir(parent); len(others) != 1 {
			t.Fatalf("wrote beside the directory: %v", others)
		}
	})
}

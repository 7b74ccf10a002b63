package images

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/hecsys/hec/shared/bundle"
)

func TestCPIOIsReproducibleAndReadable(t *testing.T) {
	files := []File{
		{Path: "init", Mode: 0o755, Data: []byte("#!agent")},
		{Path: "lib/modules/x/a.ko", Mode: 0o644, Data: []byte("module a")},
		{Path: "etc/hec/modules", Mode: 0o644, Data: []byte("/lib/modules/x/a.ko\n")},
		{Path: "bin/sh", Link: "/init"},
	}
	var a, b bytes.Buffer
	if err := WriteCPIO(&a, files); err != nil {
		t.Fatal(err)
	}
	// Another order of the same files: the same bytes.
	rev := []File{files[3], files[2], files[1], files[0]}
	if err := WriteCPIO(&b, rev); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) || a.Len()%512 != 0 {
		t.Fatalf("not reproducible (%d vs %d bytes)", a.Len(), b.Len())
	}
	if _, err := exec.LookPath("cpio"); err == nil {
		dir := t.TempDir()
		cmd := exec.Command("cpio", "-idm", "--quiet")
		cmd.Dir = dir
		cmd.Stdin = bytes.NewReader(a.Bytes())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cpio cannot read it: %v %s", err, out)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "lib/modules/x/a.ko")); string(got) != "module a" {
			t.Fatalf("extracted %q", got)
		}
	} else {
		t.Log("cpio(1) not installed: archive not cross-checked")
	}
	if err := WriteCPIO(&b, []File{{Path: "../escape"}}); err == nil {
		t.Fatal("path with .. accepted")
	}
}

func TestLoadOrder(t *testing.T) {
	mods := map[string]Module{
		"ext4":    {Name: "ext4", Depends: []string{"jbd2", "mbcache", "crc16"}},
		"jbd2":    {Name: "jbd2"},
		"mbcache": {Name: "mbcache"},
		"crc16":   {Name: "crc16"},
		"loop_a":  {Name: "loop_a", Depends: []string{"loop_b"}},
		"loop_b":  {Name: "loop_b", Depends: []string{"loop-a"}},
	}
	order, err := LoadOrder(mods, map[string]bool{"virtio": true}, []string{"ext4", "virtio"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range order {
		names = append(names, m.Name)
	}
	if got := strings.Join(names, ","); got != "jbd2,mbcache,crc16,ext4" {
		t.Fatalf("order %s", got)
	}
	if _, err := LoadOrder(mods, nil, []string{"loop_a"}); err == nil {
		t.Fatal("cycle accepted")
	}
	if _, err := LoadOrder(mods, nil, []string{"nope"}); err == nil {
		t.Fatal("missing module accepted")
	}
}

// TestBuildTwiceSameBytes builds the real image twice (the Debian arm64
// kernel is fetched into the repository cache) and compares; then checks
// the signature, and that tampering is caught.
func TestBuildTwiceSameBytes(t *testing.T) {
	k, err := FetchKernel(context.Background(), "../.cache")
	if err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("fetching the arm64 kernel needs root here: %v", err)
		}
		t.Fatal(err)
	}
	agent := filepath.Join(t.TempDir(), "hecd")
	os.WriteFile(agent, bytes.Repeat([]byte("hecd arm64 stand-in "), 1000), 0o755)
	key := filepath.Join(t.TempDir(), "key")
	var sums []bundle.Part
	var dirs []string
	for i := 0; i < 2; i++ {
		out := filepath.Join(t.TempDir(), "bundle")
		m, err := Build(BuildOptions{Agent: agent, Kernel: k, Target: "qemu", Out: out, KeyPath: key, Version: "t"})
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, m.Parts["initramfs.cpio"])
		dirs = append(dirs, out)
	}
	if sums[0] != sums[1] {
		t.Fatalf("two builds differ: %+v vs %+v", sums[0], sums[1])
	}
	t.Logf("initramfs %d bytes, sha256 %s, both builds; kernel %s %s", sums[0].Size, sums[0].SHA256, k.Package, k.Version)
	m, err := Verify(dirs[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.KernelRelease != k.Release || len(m.Build.Modules) < 5 {
		t.Fatalf("manifest %+v", m)
	}
	// A different key, then a changed part: both refused.
	other, _, _ := ed25519.GenerateKey(nil)
	if _, err := Verify(dirs[0], other); err == nil {
		t.Fatal("verified with the wrong key")
	}
	os.WriteFile(filepath.Join(dirs[0], "initramfs.cpio"), []byte("tampered"), 0o644)
	if _, err := Verify(dirs[0], nil); err == nil {
		t.Fatal("tampered initramfs verified")
	}
	if _, err := Build(BuildOptions{Agent: agent, Kernel: k, Target: "bf9", Out: t.TempDir(), KeyPath: key}); err == nil {
		t.Fatal("unknown target accepted")
	}
}

// TestDynamicRuntime: a dynamically linked binary of this machine (ls)
// gets its interpreter (a link where it names it, to the file in the
// multiarch directory), its libraries, the RDMA libraries hecd opens and
// the soft-RoCE provider with its driver file; a static one, none.
func TestDynamicRuntime(t *testing.T) {
	ls, err := os.ReadFile("/bin/ls")
	if err != nil {
		t.Skip(err)
	}
	files, err := DynamicRuntime(ls)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("this machine lacks what an image carries: %v (make test-deps installs it)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]File{}
	for _, f := range files {
		got[f.Path] = f
	}
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	for _, want := range []string{"lib/" + triplet + "/libc.so.6", "lib/" + triplet + "/libibverbs.so.1", "lib/" + triplet + "/librdmacm.so.1",
		"etc/libibverbs.d/rxe.driver"} {
		if f, ok := got[want]; !ok || len(f.Data) == 0 {
			t.Errorf("no %s among %d files", want, len(files))
		}
	}
	providers := 0
	for p := range got {
		if strings.HasPrefix(p, "usr/lib/"+triplet+"/libibverbs/librxe-rdmav") {
			providers++
		}
	}
	if providers != 1 {
		t.Errorf("%d soft-RoCE providers", providers)
	}
	var interp string
	if runtime.GOARCH == "amd64" {
		interp = "lib64/ld-linux-x86-64.so.2"
	} else {
		interp = "lib/ld-linux-aarch64.so.1"
	}
	if l, ok := got[interp]; !ok || l.Link != "/lib/"+triplet+"/"+path.Base(interp) || len(got[l.Link[1:]].Data) == 0 {
		t.Errorf("interpreter %s: %+v, want a link to the file in the multiarch directory", interp, l)
	}
	if files, err := DynamicRuntime([]byte("not an ELF binary")); err != nil || files != nil {
		t.Errorf("not an ELF: %v, %v", files, err)
	}
}

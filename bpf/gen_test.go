//go:build linux

package bpf

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedIsFresh regenerates the bindings from xdp.c, with the bpf2go
// line of gen.go, into a temporary directory and fails when
// the committed hec_bpfel.go or hec_bpfel.o differ: run make generate.
func TestGeneratedIsFresh(t *testing.T) {
	if _, err := exec.LookPath("clang"); err != nil {
		t.Skip("no clang to regenerate the bindings with (make test-deps installs it)")
	}
	src, err := os.ReadFile("gen.go")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, l := range strings.Split(string(src), "\n") {
		if rest, ok := strings.CutPrefix(l, "//go:generate go tool bpf2go "); ok {
			args = strings.Fields(rest)
		}
	}
	if args == nil {
		t.Fatal("no bpf2go line in gen.go")
	}
	dir := t.TempDir()
	cmd := exec.Command("go", append([]string{"tool", "bpf2go", "-output-dir", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GOPACKAGE=bpf", "GOFILE=gen.go")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bpf2go: %v\n%s", err, out)
	}
	for _, f := range []string{"hec_bpfel.go", "hec_bpfel.o"} {
		want, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run make generate and commit it", f)
		}
	}
}

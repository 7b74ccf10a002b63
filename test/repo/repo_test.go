package repo

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/hecsys/hec"

type pkg struct {
	ImportPath string
	Dir        string
	Doc        string
	Name       string
	Standard   bool
	Deps       []string
	GoFiles    []string
}

// listPackages runs `go list -deps=false -json ./...` from the module root.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	return pkgs
}

func under(path, prefix string) bool {
	p := module + "/" + prefix
	return path == p || strings.HasPrefix(path, p+"/")
}

// isStd reports whether an import path belongs to the standard library (no
// dot in its first element).
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// TestLayering enforces DESIGN.md's "who may import whom".
func TestLayering(t *testing.T) {
	rules := []struct {
		layer   string
		allowed func(dep string) bool // nil: everything not forbidden
		forbid  []string              // import path prefixes
	}{
		{layer: "shared", allowed: func(dep string) bool {
			return isStd(dep) || under(dep, "shared") || strings.HasPrefix(dep, "golang.org/x/sys/")
		}},
		{layer: "ec", forbid: []string{module + "/dpu", module + "/host", module + "/kv", module + "/bpf", module + "/coll"}},
		{layer: "coll", forbid: []string{module + "/dpu", module + "/host", module + "/kv", module + "/bpf"}},
		{layer: "kv", forbid: []string{module + "/dpu", module + "/host", module + "/bpf", module + "/ec", module + "/coll"}},
		{layer: "bpf", forbid: []string{module + "/dpu", module + "/host", module + "/kv", module + "/ec", module + "/coll"}},
		{layer: "dpu", forbid: []string{module + "/host"}},
		{layer: "host", forbid: []string{module + "/dpu", module + "/kv", module + "/bpf",
			"github.com/dgraph-io/badger", "github.com/cilium/ebpf", "github.com/vishvananda/netlink"}},
	}
	checked := 0
	for _, p := range listPackages(t) {
		for _, r := range rules {
			if !under(p.ImportPath, r.layer) {
				continue
			}
			checked++
			for _, dep := range p.Deps {
				if r.allowed != nil && !r.allowed(dep) {
					t.Errorf("%s (layer %s) depends on %s", p.ImportPath, r.layer, dep)
				}
				for _, f := range r.forbid {
					if dep == f || strings.HasPrefix(dep, f+"/") {
						t.Errorf("%s (layer %s) must not depend on %s", p.ImportPath, r.layer, dep)
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no package fell under a layering rule")
	}
}

// TestEveryPackageHasDoc: a package doc comment, in a file named doc.go.
func TestEveryPackageHasDoc(t *testing.T) {
	for _, p := range listPackages(t) {
		if strings.TrimSpace(p.Doc) == "" {
			t.Errorf("%s: no package doc comment", p.ImportPath)
		}
		if _, err := os.Stat(filepath.Join(p.Dir, "doc.go")); err != nil && len(p.GoFiles) > 0 {
			t.Errorf("%s: no doc.go", p.ImportPath)
		}
	}
}

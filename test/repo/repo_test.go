package repo

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// TestLayering enforces DESIGN.md's "who may import whom": each rule says
// what a layer may not depend on, and why.
func TestLayering(t *testing.T) {
	m := func(p string) string { return module + "/" + p }
	rules := []struct {
		layer   string
		allowed func(dep string) bool // nil: everything not forbidden
		forbid  []string              // import path prefixes
		why     string
	}{
		{layer: "shared", allowed: func(dep string) bool {
			return isStd(dep) || under(dep, "shared") || strings.HasPrefix(dep, "golang.org/x/sys/")
		}, why: "the contract between host and DPU: every side links it, so it carries nothing but the standard library and x/sys"},
		{layer: "ec", forbid: []string{m("dpu"), m("host"), m("kv"), m("bpf"), m("coll"), m("test")},
			why: "a domain library, usable and testable alone (the host rail links it too)"},
		{layer: "coll", forbid: []string{m("dpu"), m("host"), m("kv"), m("bpf"), m("ec"), m("test")},
			why: "a domain library, usable and testable alone (the host rail links it too)"},
		{layer: "kv", forbid: []string{m("dpu"), m("host"), m("bpf"), m("ec"), m("coll"), m("test")},
			why: "a domain library that knows nothing of the agent"},
		{layer: "bpf", forbid: []string{m("dpu"), m("host"), m("kv"), m("ec"), m("coll"), m("test")},
			why: "a domain library that knows nothing of the agent"},
		{layer: "dpu", forbid: []string{m("host"), m("images"), m("qemu"), m("test")},
			why: "the agent is what runs on the DPU: no host library, no build or test harness in it"},
		{layer: "dpu/pid1", forbid: []string{m("dpu/profile"), m("kv"), m("bpf"), m("ec"), m("coll"), m("shared/peer"), m("dpu")},
			why: "process 1 supervises the agent and never runs service code: a crash there panics the kernel (it reads the A/B slots, dpu/slots, to choose what to run)"},
		{layer: "host", forbid: []string{m("dpu"), m("kv"), m("bpf"),
			"github.com/dgraph-io/badger", "github.com/cilium/ebpf", "github.com/vishvananda/netlink"},
			why: "an application that links the host library stays small: no agent, no Badger, no eBPF"},
		{layer: "images", forbid: []string{m("dpu"), m("host"), m("kv"), m("bpf"), m("test")},
			why: "the image builder builds hecd with the go command; linking the agent would put it in every tool"},
		{layer: "qemu", forbid: []string{m("dpu"), m("host"), m("kv"), m("bpf"), m("test")},
			why: "the harness boots an image and reaches it over the network like any client"},
		{layer: "host/cmd/hecctl", forbid: []string{m("test")},
			why: "the CLI is the product: the test harness is not linked into it (clusters are host/cluster, coll bench's driver host/collbench)"},
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
					t.Errorf("%s (layer %s) depends on %s: %s", p.ImportPath, r.layer, dep, r.why)
				}
				for _, f := range r.forbid {
					if (dep == f || strings.HasPrefix(dep, f+"/")) && !(r.layer == "dpu/pid1" && f == m("dpu") && (under(dep, "dpu/pid1") || under(dep, "dpu/slots"))) {
						t.Errorf("%s (layer %s) must not depend on %s: %s", p.ImportPath, r.layer, dep, r.why)
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no package fell under a layering rule")
	}
}

// TestPlotsOnlyWherePlotsAreDrawn: gonum/plot (some 4 MB of fonts and
// renderers) is linked by the commands that draw pictures and nothing
// else: not the agent, not the host library, not the bench's driver.
func TestPlotsOnlyWherePlotsAreDrawn(t *testing.T) {
	draws := map[string]bool{module + "/host/cmd/hecctl": true, module + "/test/bench": true}
	seen := 0
	for _, p := range listPackages(t) {
		for _, dep := range p.Deps {
			if dep == "gonum.org/v1/plot" || strings.HasPrefix(dep, "gonum.org/v1/plot/") {
				if !draws[p.ImportPath] {
					t.Errorf("%s depends on %s: only %v draw plots", p.ImportPath, dep, keys(draws))
				} else {
					seen++
				}
				break
			}
		}
	}
	if seen == 0 {
		t.Fatal("no package links gonum/plot: the rule checks nothing (update its list)")
	}
}

func keys(m map[string]bool) (out []string) {
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestLongTestsAreListed: a test whose loops make test runs smaller
// (testutil.Sized, testutil.Long) or not at all (testutil.NeedLong) is named
// in the Makefile's LONG_TESTS, so make test-long runs it whole.
func TestLongTestsAreListed(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^LONG_TESTS\s*:=\s*(.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile has no LONG_TESTS")
	}
	listed := map[string]bool{}
	for _, name := range strings.Split(strings.TrimSpace(string(m[1])), "|") {
		listed[name] = true
	}
	found := 0
	for _, p := range listPackages(t) {
		files, _ := filepath.Glob(filepath.Join(p.Dir, "*_test.go"))
		for _, file := range files {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, file, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Test") {
					continue
				}
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					sel, ok := n.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "testutil" && (sel.Sel.Name == "Sized" || sel.Sel.Name == "Long" || sel.Sel.Name == "NeedLong") {
						found++
						if !listed[fn.Name.Name] {
							t.Errorf("%s: %s calls testutil.%s but is not in the Makefile's LONG_TESTS: make test-long would not run it whole",
								fset.Position(fn.Pos()), fn.Name.Name, sel.Sel.Name)
						}
					}
					return true
				})
			}
		}
	}
	if found == 0 {
		t.Fatal("no test calls testutil.Sized, Long or NeedLong: the rule checks nothing")
	}
}

// TestTopLevel: the top level is fixed (DESIGN.md).
func TestTopLevel(t *testing.T) {
	want := map[string]bool{"go.mod": true, "go.sum": true, "dpu": true, "host": true, "shared": true, "bpf": true, "kv": true,
		"ec": true, "coll": true, "images": true, "qemu": true, "test": true, "Makefile": true, "README.md": true, ".ci": true,
		".gitignore": true}
	out, err := exec.Command("git", "-C", "../..", "ls-files").Output()
	if err != nil {
		t.Skipf("git ls-files: %v", err)
	}
	seen := map[string]bool{}
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		top, _, _ := strings.Cut(f, "/")
		if !want[top] && !seen[top] {
			t.Errorf("%s at the top level: the layout is go.mod, dpu/, host/, shared/, bpf/, kv/, ec/, coll/, images/, qemu/, test/, Makefile", top)
		}
		seen[top] = true
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

// TestAgentCoreNamesNoService: the agent's core composes services through
// the Service seam; dpu/agent.go importing a service's package, or naming
// one, means a service leaked into it (dpu/doc.go has the recipe: a new
// service touches its own files, its op codes, the list in
// dpu/services.go and the README).
func TestAgentCoreNamesNoService(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../../dpu/agent.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		p := strings.Trim(imp.Path.Value, `"`)
		for _, svc := range []string{"/kv", "/bpf", "/shared/peer", "/ec", "/coll"} {
			if strings.HasPrefix(p, module+svc) {
				t.Errorf("dpu/agent.go imports %s", p)
			}
		}
	}
	services := regexp.MustCompile(`(?i)\b(kv|resp|redis|udp|xdp|bpf|peers?|etcd|ec|coll|hot)\b|kvService|respService|udpService|xdpService|peerService`)
	ast.Inspect(f, func(n ast.Node) bool {
		var text string
		switch x := n.(type) {
		case *ast.Ident:
			text = x.Name
		case *ast.BasicLit:
			if x.Kind == token.STRING {
				text = x.Value
			}
		default:
			return true
		}
		if services.MatchString(text) {
			t.Errorf("%s: dpu/agent.go names a service: %s", fset.Position(n.Pos()), text)
		}
		return true
	})
}

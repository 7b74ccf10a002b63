package testutil

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hecsys/hec/shared/sysinfo"
)

// ModuleRoot is the repository root, found from this file's place.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

type built struct {
	once sync.Once
	path string
	err  error
}

var (
	binMu  sync.Mutex
	bins   = map[string]*built{}
	binDir string
)

// Main runs the tests of a package (from its TestMain) and then removes
// what they built in this process's directory (ProcessDir). It returns
// m.Run's code, for os.Exit.
func Main(m *testing.M) int {
	code := m.Run()
	RemoveProcessDir()
	return code
}

// RemoveProcessDir removes this process's directory (ProcessDir), for a
// program that is not a test (the bench) to call as it ends. What Build
// returned until then is gone; a later Build builds anew.
func RemoveProcessDir() {
	binMu.Lock()
	defer binMu.Unlock()
	if binDir != "" {
		os.RemoveAll(binDir)
		binDir = ""
		bins = map[string]*built{}
	}
}

// ProcessDir is this test process's own directory for what it builds
// (binaries, images): $TMPDIR/hec-testbin/PID, made on first use. Main
// removes it when the tests end. Those of processes that ended without
// (killed, or a -timeout's panic) are removed when the next is made, and
// their orphans with them: the agents and VMs still running from them.
func ProcessDir() (string, error) {
	binMu.Lock()
	defer binMu.Unlock()
	if binDir == "" {
		root := filepath.Join(os.TempDir(), "hec-testbin")
		if old, _ := os.ReadDir(root); len(old) > 0 {
			for _, e := range old {
				if pid, err := strconv.Atoi(e.Name()); err == nil && sysinfo.Ended(pid) {
					dir := filepath.Join(root, e.Name())
					killRunningFrom(dir)
					os.RemoveAll(dir)
				}
			}
		}
		dir := filepath.Join(root, strconv.Itoa(os.Getpid()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		binDir = dir
	}
	return binDir, nil
}

// killRunningFrom kills every process whose command line names a path in
// dir (a binary built there, a VM booted from an image there) and waits,
// up to a second, for them to go.
func killRunningFrom(dir string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var killed []int
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), dir+"/") {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != os.Getpid() && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed = append(killed, pid)
		}
	}
	for deadline := time.Now().Add(time.Second); len(killed) > 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		killed = slices.DeleteFunc(killed, sysinfo.Ended)
	}
}

// Build builds the command in pkg (relative to the repository root, such
// as "./dpu/cmd/hecd") once per process into ProcessDir and returns the
// binary's path.
func Build(pkg string) (string, error) {
	dir, err := ProcessDir()
	if err != nil {
		return "", err
	}
	binMu.Lock()
	b := bins[pkg]
	if b == nil {
		b = &built{}
		bins[pkg] = b
	}
	binMu.Unlock()
	b.once.Do(func() {
		b.path = filepath.Join(dir, filepath.Base(pkg))
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		cmd.Dir = ModuleRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	return b.path, b.err
}

// BuildLibhec builds libhec from this tree into dir as make build does,
// mode c-shared (libhec.so) or c-archive (libhec.a), and returns its path.
func BuildLibhec(dir, mode string) (string, error) {
	name := map[string]string{"c-shared": "libhec.so", "c-archive": "libhec.a"}[mode]
	if name == "" {
		return "", fmt.Errorf("libhec: build mode %q", mode)
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-tags", "nonvml", "-buildmode="+mode, "-o", out, "./host/libhec")
	cmd.Dir, cmd.Env = ModuleRoot(), append(os.Environ(), "CGO_ENABLED=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -buildmode=%s ./host/libhec: %v\n%s", mode, err, b)
	}
	return out, nil
}

// Hecd returns the path of hecd built from this tree (once per process).
func Hecd(tb testing.TB) string {
	tb.Helper()
	p, err := Build("./dpu/cmd/hecd")
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// Hecctl returns the path of hecctl built from this tree (once per process).
func Hecctl(tb testing.TB) string {
	tb.Helper()
	p, err := Build("./host/cmd/hecctl")
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// WaitFor polls cond every 20 ms until it holds, failing the test after d.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %v", what, d)
		}
	}
}

// FreeAddrs returns n loopback addresses whose ports were free a moment
// ago.
func FreeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	out, err := FreeLoopbackAddrs(n)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// FreeLoopbackAddrs is FreeAddrs for callers without a testing.TB.
func FreeLoopbackAddrs(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("a free loopback port: %w", err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	return out, nil
}

// LongEnv is the variable make test-long sets (to 1): the run where the
// loops sized for rare events (power cuts, a million hostile descriptors,
// training on four ranks) run whole. make test runs them smaller, sized to
// what finds the defects they guard; the README says which and why.
const LongEnv = "HEC_TEST_LONG"

// Long reports whether this is make test-long's run (LongEnv=1).
func Long() bool { return os.Getenv(LongEnv) == "1" }

// Sized is a loop's count: long under make test-long, else short.
func Sized(short, long int) int {
	if Long() {
		return long
	}
	return short
}

// NeedLong skips the test outside make test-long, saying why it runs only
// there.
func NeedLong(tb testing.TB, why string) {
	tb.Helper()
	if !Long() {
		tb.Skipf("make test-long runs this (%s=1): %s", LongEnv, why)
	}
}

// NeedRoot skips the test, saying why, when not root.
func NeedRoot(tb testing.TB, why string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skipf("%s: root only (CI runs as root)", why)
	}
}

// SmallDisk mounts a tmpfs of size bytes for the test (root only: it
// skips otherwise, saying why) holding a ballast file of ballast bytes —
// a full disk a test can fill, then free by removing the ballast. A tmpfs,
// like a full disk, answers a write into a memory-mapped hole with SIGBUS.
// It returns the mount point and the ballast's path; both go at cleanup.
func SmallDisk(tb testing.TB, size, ballast int64) (dir, ballastPath string) {
	tb.Helper()
	NeedRoot(tb, "mounting a tmpfs")
	dir = tb.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		tb.Skipf("mount tmpfs: %v", err)
	}
	tb.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	ballastPath = filepath.Join(dir, "ballast")
	if err := os.WriteFile(ballastPath, make([]byte, ballast), 0o600); err != nil {
		tb.Fatal(err)
	}
	return dir, ballastPath
}

// Etcd runs Debian's etcd on loopback ports for the test and returns its
// client address (host:port); it skips the test where etcd is not
// installed (make test installs etcd-server as root).
func Etcd(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skip("etcd not installed (make test installs etcd-server as root)")
	}
	ports := FreeAddrs(t, 2)
	client, peerURL := "http://"+ports[0], "http://"+ports[1]
	cmd := exec.Command("etcd", "--data-dir", t.TempDir(), "--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL, "--initial-cluster", "default="+peerURL)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(client + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return ports[0]
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("etcd not healthy within 20 s")
		}
	}
}

// TorchPython returns a python3 that imports torch.distributed with gloo
// (Debian's python3-torch is /usr/bin/python3's, which need not be the
// python3 on PATH), or why none does.
func TorchPython() (string, error) {
	var tried []string
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		p, err := exec.LookPath(py)
		if err != nil {
			continue
		}
		out, err := exec.Command(p, "-c", "import torch.distributed as d; assert d.is_available(); print(d.is_gloo_available())").CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) == "True" {
			return p, nil
		}
		tried = append(tried, fmt.Sprintf("%s: %s", p, strings.TrimSpace(string(out))))
	}
	return "", fmt.Errorf("no python3 with torch.distributed and gloo (make test-deps installs python3-torch as root): %s", strings.Join(tried, "; "))
}

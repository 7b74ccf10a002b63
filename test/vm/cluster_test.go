package vm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hecsys/hec/cluster"
)

// A test cluster with an arm64 VM among its agents: the VM joins the
// bridge through a tap, every agent reaches every other (the ping matrix),
// and down leaves nothing behind.
func TestClusterWithAVM(t *testing.T) {
	b := bundle(t)
	if os.Geteuid() != 0 {
		t.Skip("clusters are network namespaces: root only (CI runs as root)")
	}
	hecd := filepath.Join(t.TempDir(), "hecd")
	if out, err := exec.Command("go", "build", "-o", hecd, "../../dpu/cmd/hecd").CombinedOutput(); err != nil {
		t.Fatalf("build hecd: %v\n%s", err, out)
	}
	const name = "tvm"
	dir := filepath.Join(t.TempDir(), "state")
	cluster.Down(name, dir, nil)
	st, err := cluster.Up(context.Background(), cluster.Options{Name: name, Agents: 3, VMs: 1, Bundle: b, Hecd: hecd, StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Down(name, dir, nil) })
	if !st.Nodes[2].VM {
		t.Fatalf("node 3 is not the VM: %+v", st.Nodes)
	}
	res, err := st.Ping(context.Background(), 5, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Error != "" || r.GBPerSec <= 0 {
			t.Fatalf("%d → %d: %+v", r.From, r.To, r)
		}
		t.Logf("%d → %d: rtt p50 %.0f µs, %.3f GB/s", r.From, r.To, r.RTTP50Us, r.GBPerSec)
	}
	qemuPID := st.Nodes[2].PID
	if err := cluster.Down(name, dir, nil); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	if len(out) > 0 && containsPrefix(string(out), "hec-"+name+"-") {
		t.Fatalf("namespaces left: %s", out)
	}
	if _, err := os.Stat(filepath.Join("/proc", itoa(qemuPID))); err == nil {
		if b, _ := os.ReadFile(filepath.Join("/proc", itoa(qemuPID), "stat")); len(b) > 0 && !zombie(string(b)) {
			t.Fatalf("QEMU (pid %d) left", qemuPID)
		}
	}
	if shm, _ := filepath.Glob("/dev/shm/hec-" + name + "-*"); len(shm) > 0 {
		t.Fatalf("shared memory left: %v", shm)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func zombie(stat string) bool {
	i := strings.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

func containsPrefix(list, prefix string) bool {
	for _, l := range strings.Fields(list) {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

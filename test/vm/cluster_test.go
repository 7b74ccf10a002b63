package vm

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hecsys/hec/test/testutil"

	"github.com/hecsys/hec/test/cluster"
)

// A test cluster with an arm64 VM among its agents: the VM joins the
// bridge through a tap, every agent reaches every other (the ping matrix),
// and down leaves nothing behind.
func TestClusterWithAVM(t *testing.T) {
	b := bundle(t)
	if os.Geteuid() != 0 {
		t.Skip("clusters are network namespaces: root only (CI runs as root)")
	}
	hecd := testutil.Hecd(t)
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
	pids := []int{st.Nodes[0].PID, st.Nodes[1].PID, st.Nodes[2].PID} // two agents and QEMU
	if err := cluster.Down(name, dir, nil); err != nil {
		t.Fatal(err)
	}
	if left := cluster.Remains(name, dir, pids); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestCollWithAnArm64Rank runs hecctl coll bench among three ranks whose
// third agent is the arm64 VM: on the DPU rail that agent reduces its
// share in arm64 code, and every result must still be exact.
func TestCollWithAnArm64Rank(t *testing.T) {
	b := bundle(t)
	if os.Geteuid() != 0 {
		t.Skip("coll bench --net netns makes network namespaces: root only (CI runs as root)")
	}
	hecd := testutil.Hecd(t)
	hecctl := testutil.Hecctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, hecctl, "coll", "bench", "-o", "json", "--net", "netns", "--world", "3", "--vm", "1",
		"--bundle", b, "--hecd", hecd, "--rail", "dpu,host", "--sizes", "8,64K,1M,4M", "--iters", "2", "--deadline", "10s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("hecctl coll bench --world 3 --vm 1:\n%s%s", out, stderr.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var row struct {
			Rail  string `json:"rail"`
			Size  int    `json:"size"`
			Wrong int64  `json:"wrong"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if row.Wrong != 0 {
			t.Errorf("%s rail, %d bytes: %d wrong", row.Rail, row.Size, row.Wrong)
		}
		rows++
	}
	if rows != 8 {
		t.Fatalf("%d rows, want 2 rails × 4 sizes", rows)
	}
}
